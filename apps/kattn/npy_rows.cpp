#include "npy_rows.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "dtype.hpp"
#include "kattn/errors.hpp"

namespace kattn {
namespace cli {
namespace {

// A file descriptor closed on every path out, errors included.
class Fd {
 public:
  Fd(const std::string& path, int flags, const char* doing) : fd_(::open(path.c_str(), flags, 0644)) {
    KATTN_REQUIRE(fd_ >= 0, path, ": cannot open ", doing, " (", std::strerror(errno), ")");
  }
  ~Fd() { ::close(fd_); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

// Spans are cut into pieces of at most this many elements, so the byte buffer stays small.
constexpr std::int64_t kPiece = std::int64_t(1) << 20;

}  // namespace

std::int64_t RowBlock::local_length() const {
  std::int64_t n = 0;
  for (const PositionRun& r : runs) n += r.length;
  return n;
}

std::vector<PositionRun> packed_runs(const std::vector<std::int64_t>& rows) {
  std::vector<PositionRun> runs;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (!runs.empty() && runs.back().global + runs.back().length == rows[i] &&
        runs.back().local + runs.back().length == std::int64_t(i))
      ++runs.back().length;
    else
      runs.push_back(PositionRun{rows[i], std::int64_t(i), 1});
  }
  return runs;
}

namespace {

// Calls take(bytes, m, local) for every piece of at most kPiece elements of the runs, as stored.
template <class Take>
void read_pieces(const std::string& path, const io::NpyHeader& h, const RowBlock& rows, Take&& take) {
  if (rows.local_size() == 0) return;
  const Fd fd(path, O_RDONLY, "for reading");
  const std::int64_t esize = static_cast<std::int64_t>(io::size_of(h.dtype));
  std::vector<unsigned char> bytes;
  for_each_span(rows, [&](std::int64_t file, std::int64_t local, std::int64_t count) {
    for (std::int64_t done = 0; done < count; done += kPiece) {
      const std::int64_t m = std::min(kPiece, count - done);
      bytes.resize(static_cast<std::size_t>(m * esize));
      const off_t at = static_cast<off_t>(h.data_offset + (file + done) * esize);
      const ssize_t got = ::pread(fd.get(), bytes.data(), bytes.size(), at);
      KATTN_REQUIRE(got == static_cast<ssize_t>(bytes.size()), path, ": read failed at byte ", at,
                    got < 0 ? std::string(" (") + std::strerror(errno) + ")" : std::string(" (short read)"));
      take(bytes, m, local + done);
    }
  });
}

}  // namespace

std::vector<double> read_rows(const std::string& path, const io::NpyHeader& h, const RowBlock& rows) {
  std::vector<double> out(static_cast<std::size_t>(rows.local_size()));
  read_pieces(path, h, rows, [&](const std::vector<unsigned char>& bytes, std::int64_t m, std::int64_t local) {
    io::decode_elements(h.dtype, bytes.data(), static_cast<std::size_t>(m), out.data() + local);
  });
  return out;
}

std::vector<unsigned char> read_row_bytes(const std::string& path, const io::NpyHeader& h, const RowBlock& rows) {
  const std::size_t esize = io::size_of(h.dtype);
  std::vector<unsigned char> out(static_cast<std::size_t>(rows.local_size()) * esize);
  read_pieces(path, h, rows, [&](const std::vector<unsigned char>& bytes, std::int64_t, std::int64_t local) {
    std::copy(bytes.begin(), bytes.end(), out.begin() + std::size_t(local) * esize);
  });
  return out;
}

void create_npy(const std::string& path, io::DType dtype, const std::vector<std::int64_t>& shape) {
  const std::string prefix = io::npy_prefix(dtype, shape);
  const Fd fd(path, O_WRONLY | O_CREAT | O_TRUNC, "for writing");
  KATTN_REQUIRE(::pwrite(fd.get(), prefix.data(), prefix.size(), 0) == static_cast<ssize_t>(prefix.size()), path,
                ": write failed");
}

void write_rows(const std::string& path, io::DType dtype, const std::vector<std::int64_t>& shape, const RowBlock& rows,
                const std::vector<double>& values) {
  KATTN_ASSERT(static_cast<std::int64_t>(values.size()) == rows.local_size());
  if (values.empty()) return;
  const std::uint64_t start = io::npy_prefix(dtype, shape).size();
  const Fd fd(path, O_WRONLY, "for writing");
  const std::int64_t esize = static_cast<std::int64_t>(io::size_of(dtype));
  for_each_span(rows, [&](std::int64_t file, std::int64_t local, std::int64_t count) {
    for (std::int64_t done = 0; done < count; done += kPiece) {
      const std::int64_t m = std::min(kPiece, count - done);
      const std::vector<unsigned char> bytes = encode_values(dtype, values.data() + local + done, std::size_t(m));
      const off_t at = static_cast<off_t>(start + (file + done) * esize);
      KATTN_REQUIRE(::pwrite(fd.get(), bytes.data(), bytes.size(), at) == static_cast<ssize_t>(bytes.size()), path,
                    ": write failed");
    }
  });
}

}  // namespace cli
}  // namespace kattn
