#include "kattn/io/npy.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <type_traits>

#include "kattn/core/storage.hpp"
#include "kattn/errors.hpp"

namespace kattn {
namespace io {

const char* name(DType t) {
  switch (t) {
    case DType::f32: return "<f4";
    case DType::f64: return "<f8";
    case DType::f16: return "<f2";
    case DType::bf16: return "<u2";
    case DType::i32: return "<i4";
    case DType::i64: return "<i8";
    case DType::b1: return "|b1";
  }
  return "?";
}

std::size_t size_of(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::b1: return 1;
  }
  return 0;
}

std::int64_t NpyHeader::size() const {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

std::int64_t NpyArray::size() const {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

template <class T>
void decode_elements(DType dtype, const unsigned char* p, std::size_t n, T* out) {
  for (std::size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::f32: { float x; std::memcpy(&x, p + 4 * i, 4); out[i] = static_cast<T>(x); break; }
      case DType::f64: { double x; std::memcpy(&x, p + 8 * i, 8); out[i] = static_cast<T>(x); break; }
      case DType::f16: { fp16 x; std::memcpy(&x.bits, p + 2 * i, 2); out[i] = static_cast<T>(widen(x)); break; }
      case DType::bf16: { bf16 x; std::memcpy(&x.bits, p + 2 * i, 2); out[i] = static_cast<T>(widen(x)); break; }
      case DType::i32: { std::int32_t x; std::memcpy(&x, p + 4 * i, 4); out[i] = static_cast<T>(x); break; }
      case DType::i64: { std::int64_t x; std::memcpy(&x, p + 8 * i, 8); out[i] = static_cast<T>(x); break; }
      case DType::b1: out[i] = static_cast<T>(p[i] != 0); break;
    }
  }
}
template void decode_elements<float>(DType, const unsigned char*, std::size_t, float*);
template void decode_elements<double>(DType, const unsigned char*, std::size_t, double*);
template void decode_elements<std::int64_t>(DType, const unsigned char*, std::size_t, std::int64_t*);

template <class T>
std::vector<T> NpyArray::values() const {
  std::vector<T> out(static_cast<std::size_t>(size()));
  decode_elements(dtype, bytes.data(), out.size(), out.data());
  return out;
}
template std::vector<float> NpyArray::values<float>() const;
template std::vector<double> NpyArray::values<double>() const;
template std::vector<std::int64_t> NpyArray::values<std::int64_t>() const;

namespace {

// File bytes quoted in a message: control and non-ASCII bytes as '?', at most 40 characters, so
// that every refusal stays one printable line whatever the file holds.
std::string printable(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < 40; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    out.push_back(c >= 0x20 && c < 0x7f ? static_cast<char>(c) : '?');
  }
  if (text.size() > 40) out += "...";
  return out;
}

// The header is a Python dict literal: {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
std::string dict_value(const std::string& header, const std::string& key, const std::string& what) {
  const std::string quoted = "'" + key + "'";
  const std::size_t k = header.find(quoted);
  KATTN_REQUIRE(k != std::string::npos, what, ": .npy header has no '", key, "' entry");
  std::size_t c = header.find(':', k + quoted.size());
  KATTN_REQUIRE(c != std::string::npos, what, ": malformed .npy header near '", key, "'");
  ++c;
  while (c < header.size() && std::isspace(static_cast<unsigned char>(header[c]))) ++c;
  KATTN_REQUIRE(c < header.size(), what, ": malformed .npy header near '", key, "'");
  std::size_t end;
  if (header[c] == '(') {
    end = header.find(')', c);
    KATTN_REQUIRE(end != std::string::npos, what, ": malformed shape in .npy header");
    return header.substr(c, end - c + 1);
  }
  if (header[c] == '\'' || header[c] == '"') {
    end = header.find(header[c], c + 1);
    KATTN_REQUIRE(end != std::string::npos, what, ": malformed '", key, "' in .npy header");
    return header.substr(c + 1, end - c - 1);
  }
  end = c;
  while (end < header.size() && header[end] != ',' && header[end] != '}') ++end;
  std::string v = header.substr(c, end - c);
  while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.pop_back();
  return v;
}

std::vector<std::int64_t> parse_shape(const std::string& tuple, const std::string& what) {
  std::vector<std::int64_t> shape;
  std::size_t i = 1;  // past '('
  const std::size_t end = tuple.size() - 1;  // at ')'
  while (i < end) {
    while (i < end && (std::isspace(static_cast<unsigned char>(tuple[i])) || tuple[i] == ',')) ++i;
    if (i >= end) break;
    KATTN_REQUIRE(std::isdigit(static_cast<unsigned char>(tuple[i])), what, ": malformed shape ", printable(tuple),
                  " in .npy header");
    std::int64_t v = 0;
    while (i < end && std::isdigit(static_cast<unsigned char>(tuple[i]))) {
      KATTN_REQUIRE(v <= (std::numeric_limits<std::int64_t>::max() - 9) / 10, what, ": dimension too large in shape ",
                    printable(tuple));
      v = v * 10 + (tuple[i] - '0');
      ++i;
    }
    // A Python int literal may carry an 'L' suffix in files written by Python 2.
    if (i < end && tuple[i] == 'L') ++i;
    shape.push_back(v);
    while (i < end && std::isspace(static_cast<unsigned char>(tuple[i]))) ++i;
    KATTN_REQUIRE(i >= end || tuple[i] == ',', what, ": malformed shape ", printable(tuple), " in .npy header");
  }
  return shape;
}

DType parse_descr(const std::string& d, const std::string& what) {
  if (d == "<f4") return DType::f32;
  if (d == "<f8") return DType::f64;
  if (d == "<f2") return DType::f16;
  if (d == "<u2") return DType::bf16;  // the bf16 convention (npy.hpp)
  if (d == "<i4") return DType::i32;
  if (d == "<i8") return DType::i64;
  if (d == "|b1" || d == "<b1" || d == "|u1" || d == "|i1") return DType::b1;
  KATTN_REQUIRE(d.empty() || d[0] != '>', what, ": big-endian data ('", printable(d),
                "') is not supported; save it little endian (arr.astype(arr.dtype.newbyteorder('<')))");
  KATTN_REQUIRE(false, what, ": unsupported dtype '", printable(d),
                "'; expected float32 (<f4), float64 (<f8), float16 (<f2), bf16 bits as uint16 (<u2), int32 (<i4), ",
                "int64 (<i8) or bool (|b1)");
  return DType::f32;
}

std::uint32_t read_le(const unsigned char* p, int n) {
  std::uint32_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

NpyHeader parse_npy_header(const unsigned char* data, std::size_t available, std::uint64_t file_size,
                           const std::string& what) {
  static const unsigned char magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  KATTN_REQUIRE(available >= 10 && std::memcmp(data, magic, 6) == 0, what, ": not an .npy file (bad magic)");
  const int major = data[6];
  KATTN_REQUIRE(major >= 1 && major <= 3, what, ": unsupported .npy format version ", major, ".", int(data[7]));
  const int len_bytes = major == 1 ? 2 : 4;
  KATTN_REQUIRE(available >= static_cast<std::size_t>(8 + len_bytes), what, ": truncated .npy header");
  const std::size_t header_len = read_le(data + 8, len_bytes);
  const std::size_t data_start = 8 + len_bytes + header_len;
  KATTN_REQUIRE(header_len <= file_size && data_start <= file_size && data_start <= available, what,
                ": truncated .npy header (", header_len, " header bytes announced, file has ", file_size, ")");
  const std::string header(reinterpret_cast<const char*>(data) + 8 + len_bytes, header_len);
  KATTN_REQUIRE(header.find('{') != std::string::npos && header.find('}') != std::string::npos, what,
                ": malformed .npy header (no dict)");

  NpyHeader h;
  h.dtype = parse_descr(dict_value(header, "descr", what), what);
  const std::string fortran = dict_value(header, "fortran_order", what);
  KATTN_REQUIRE(fortran == "False", what, ": Fortran-order arrays are not supported; save a C-order array ",
                "(np.ascontiguousarray)");
  h.shape = parse_shape(dict_value(header, "shape", what), what);
  h.data_offset = data_start;

  // Element count, guarding the multiplication against overflow.
  std::uint64_t n = 1;
  for (auto s : h.shape) {
    KATTN_REQUIRE(s == 0 || n <= std::numeric_limits<std::uint64_t>::max() / 16 / static_cast<std::uint64_t>(s),
                  what, ": array too large");
    n *= static_cast<std::uint64_t>(s);
  }
  const std::uint64_t nbytes = n * size_of(h.dtype);
  const std::uint64_t have = file_size - data_start;
  KATTN_REQUIRE(have >= nbytes, what, ": truncated data (", nbytes, " bytes expected for shape, ", have, " present)");
  KATTN_REQUIRE(have == nbytes, what, ": ", have - nbytes, " unexpected bytes after the array data");
  return h;
}

NpyHeader read_npy_header(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  KATTN_REQUIRE(in.good(), path, ": cannot open file");
  const std::uint64_t file_size = static_cast<std::uint64_t>(in.tellg());
  in.seekg(0);
  // The fixed prefix (magic, version, header length), then as much of the header as it announces.
  std::vector<unsigned char> buf(static_cast<std::size_t>(std::min<std::uint64_t>(file_size, 12)));
  in.read(reinterpret_cast<char*>(buf.data()), static_cast<std::streamsize>(buf.size()));
  if (buf.size() >= 12 && buf[6] >= 1 && buf[6] <= 3) {
    const int len_bytes = buf[6] == 1 ? 2 : 4;
    const std::uint64_t want = std::min<std::uint64_t>(file_size, 8 + len_bytes + read_le(buf.data() + 8, len_bytes));
    const std::size_t had = buf.size();
    buf.resize(static_cast<std::size_t>(std::max<std::uint64_t>(want, had)));
    in.read(reinterpret_cast<char*>(buf.data() + had), static_cast<std::streamsize>(buf.size() - had));
  }
  KATTN_REQUIRE(in.good() || in.eof(), path, ": read failed");
  return parse_npy_header(buf.data(), buf.size(), file_size, path);
}

NpyArray parse_npy(const unsigned char* data, std::size_t size, const std::string& what) {
  const NpyHeader h = parse_npy_header(data, size, size, what);
  NpyArray a;
  a.dtype = h.dtype;
  a.shape = h.shape;
  a.bytes.assign(data + h.data_offset, data + size);
  return a;
}

NpyArray read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  KATTN_REQUIRE(in.good(), path, ": cannot open file");
  std::vector<unsigned char> buf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_npy(buf.data(), buf.size(), path);
}

std::string npy_prefix(DType dtype, const std::vector<std::int64_t>& shape) {
  std::string dims;  // Python tuple syntax: (), (5,), (2, 3)
  for (std::size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string header = std::string("{'descr': '") + name(dtype) + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Pad with spaces to a multiple of 64 bytes including the 10-byte prefix and the newline.
  const std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  const std::uint16_t len = static_cast<std::uint16_t>(header.size());
  const char prefix[10] = {char(0x93), 'N', 'U', 'M', 'P', 'Y', 1, 0, char(len & 0xff), char(len >> 8)};
  return std::string(prefix, 10) + header;
}

void write_npy(const std::string& path, DType dtype, const std::vector<std::int64_t>& shape, const void* data) {
  const std::string prefix = npy_prefix(dtype, shape);
  std::ofstream out(path, std::ios::binary);
  KATTN_REQUIRE(out.good(), path, ": cannot open for writing");
  out.write(prefix.data(), static_cast<std::streamsize>(prefix.size()));
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(n * size_of(dtype)));
  KATTN_REQUIRE(out.good(), path, ": write failed");
}

template <class T>
void write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const std::vector<T>& values) {
  DType t = DType::f32;
  if constexpr (std::is_same_v<T, fp16>) t = DType::f16;
  else if constexpr (std::is_same_v<T, bf16>) t = DType::bf16;
  else if constexpr (std::is_floating_point_v<T>) t = sizeof(T) == 4 ? DType::f32 : DType::f64;
  else t = sizeof(T) == 4 ? DType::i32 : DType::i64;
  static_assert(is_16bit_v<T> || sizeof(T) == 4 || sizeof(T) == 8, "write_npy: 16-bit storage, 4- or 8-byte elements");
  write_npy(path, t, shape, values.data());
}
template void write_npy<fp16>(const std::string&, const std::vector<std::int64_t>&, const std::vector<fp16>&);
template void write_npy<bf16>(const std::string&, const std::vector<std::int64_t>&, const std::vector<bf16>&);
template void write_npy<float>(const std::string&, const std::vector<std::int64_t>&, const std::vector<float>&);
template void write_npy<double>(const std::string&, const std::vector<std::int64_t>&, const std::vector<double>&);
template void write_npy<std::int32_t>(const std::string&, const std::vector<std::int64_t>&,
                                      const std::vector<std::int32_t>&);
template void write_npy<std::int64_t>(const std::string&, const std::vector<std::int64_t>&,
                                      const std::vector<std::int64_t>&);

}  // namespace io
}  // namespace kattn
