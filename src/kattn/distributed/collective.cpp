#include "kattn/distributed/collective.hpp"

#include <cstring>
#include <stdexcept>

#include "kattn/errors.hpp"

namespace kattn {
namespace dist {
namespace {

int rank_of(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}
int size_of(MPI_Comm comm) {
  int n = 1;
  MPI_Comm_size(comm, &n);
  return n;
}

// kattn::Error prefixes "kattn: "; the rethrown error adds it again.
std::string strip_prefix(const std::string& s) {
  static const std::string prefix = "kattn: ";
  return s.compare(0, prefix.size(), prefix) == 0 ? s.substr(prefix.size()) : s;
}

enum FailureKind : int { kNone = 0, kError = 1, kOther = 2 };

// The lowest failing rank's (kind, message) on every rank; kind kNone when nobody failed.
[[noreturn]] void throw_agreed(MPI_Comm comm, int lowest, int kind, std::string message) {
  MPI_Bcast(&kind, 1, MPI_INT, lowest, comm);
  long long len = static_cast<long long>(message.size());
  MPI_Bcast(&len, 1, MPI_LONG_LONG, lowest, comm);
  message.resize(static_cast<std::size_t>(len));
  MPI_Bcast(&message[0], static_cast<int>(len), MPI_CHAR, lowest, comm);
  const std::string text = size_of(comm) > 1 ? kattn::detail::concat("rank ", lowest, ": ", message) : message;
  if (kind == kError) throw Error(text);
  throw std::runtime_error("kattn: " + text);
}

void settle(MPI_Comm comm, int kind, const std::string& message) {
  const int rank = rank_of(comm), size = size_of(comm);
  int mine = kind != kNone ? rank : size, lowest = size;
  MPI_Allreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, comm);
  if (lowest == size) return;
  throw_agreed(comm, lowest, kind, message);
}

std::string format(const Agreed& f, std::int64_t v) {
  switch (f.kind) {
    case Agreed::Kind::boolean:
      return v ? "true" : "false";
    case Agreed::Kind::dtype:
      switch (static_cast<StorageCode>(v)) {
        case StorageCode::f32:
          return "f32";
        case StorageCode::f64:
          return "f64";
        case StorageCode::bf16:
          return "bf16";
        case StorageCode::f16:
          return "f16";
      }
      return kattn::detail::concat("storage ", v);
    case Agreed::Kind::real: {
      double d;
      std::memcpy(&d, &v, sizeof d);
      return kattn::detail::concat(d);
    }
    default:
      return kattn::detail::concat(v);
  }
}

}  // namespace

void collective_check(MPI_Comm comm, const std::function<void()>& local) {
  int kind = kNone;
  std::string message;
  try {
    local();
  } catch (const Error& e) {
    kind = kError;
    message = strip_prefix(e.what());
  } catch (const std::exception& e) {
    kind = kOther;
    message = strip_prefix(e.what());
  } catch (...) {  // caller code may throw anything; leaving here alone would hang the other ranks
    kind = kOther;
    message = "an exception not derived from std::exception";
  }
  settle(comm, kind, message);
}

void collective_require(MPI_Comm comm, bool ok, const std::string& message) {
  settle(comm, ok ? kNone : kError, message);
}

Agreed Agreed::real(const char* argument, const char* what, double v) {
  std::int64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  return {argument, what, Kind::real, bits};
}

namespace {

int free_cached_dup(MPI_Comm, int, void* attr, void*) {
  MPI_Comm* dup = static_cast<MPI_Comm*>(attr);
  MPI_Comm_free(dup);
  delete dup;
  return MPI_SUCCESS;
}

}  // namespace

MPI_Comm cached_dup(MPI_Comm comm, int& key) {
  if (key == MPI_KEYVAL_INVALID) MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, &free_cached_dup, &key, nullptr);
  void* value = nullptr;
  int found = 0;
  MPI_Comm_get_attr(comm, key, &value, &found);
  if (found) return *static_cast<MPI_Comm*>(value);
  MPI_Comm* dup = new MPI_Comm;
  MPI_Comm_dup(comm, dup);
  MPI_Comm_set_attr(comm, key, dup);
  return *dup;
}

MPI_Comm library_comm(MPI_Comm comm) {
  static int key = MPI_KEYVAL_INVALID;
  return cached_dup(comm, key);
}

std::vector<std::int64_t> allgather(MPI_Comm comm, std::int64_t local) {
  std::vector<long long> all(static_cast<std::size_t>(size_of(comm)));
  long long mine = local;
  MPI_Allgather(&mine, 1, MPI_LONG_LONG, all.data(), 1, MPI_LONG_LONG, comm);
  return std::vector<std::int64_t>(all.begin(), all.end());
}

void collective_agree(MPI_Comm comm, const std::vector<Agreed>& fields) {
  const int size = size_of(comm);
  const int n = static_cast<int>(fields.size());
  // First how many fields, and the first one (the call, for the library's entry points): ranks in
  // different calls agree on different lists, which one exchange of the lists could not compare.
  long long head[2] = {n, n > 0 ? fields[0].value : 0};
  std::vector<long long> heads(2 * static_cast<std::size_t>(size));
  MPI_Allgather(head, 2, MPI_LONG_LONG, heads.data(), 2, MPI_LONG_LONG, comm);
  for (int r = 1; r < size; ++r) {
    if (n > 0 && heads[2 * r] > 0 && heads[2 * r + 1] != heads[1]) {
      const Agreed& f = fields[0];
      throw Error(kattn::detail::concat(f.argument, ": expected ", f.what, " ", format(f, heads[1]),
                                        " (from rank 0), got ", format(f, heads[2 * r + 1]), " on rank ", r));
    }
    if (heads[2 * r] != heads[0])
      throw Error(kattn::detail::concat("call: the ranks are in different collective calls (rank 0 compares ", heads[0],
                                        " values, rank ", r, " ", heads[2 * r], ")"));
  }
  std::vector<long long> mine(fields.size()), all(fields.size() * size);
  for (int i = 0; i < n; ++i) mine[i] = fields[i].value;
  MPI_Allgather(mine.data(), n, MPI_LONG_LONG, all.data(), n, MPI_LONG_LONG, comm);
  // Every rank looks at the same table, so every rank finds the same first difference.
  for (int i = 0; i < n; ++i)
    for (int r = 1; r < size; ++r)
      if (all[r * n + i] != all[i]) {
        const Agreed& f = fields[i];
        const std::string text =
            kattn::detail::concat(f.argument, ": expected ", f.what, " ", format(f, all[i]), " (from rank 0), got ",
                                  format(f, all[r * n + i]), " on rank ", r);
        throw Error(text);
      }
}

}  // namespace dist
}  // namespace kattn
