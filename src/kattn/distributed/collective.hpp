// Collective errors: bad input on any rank raises the same kattn::Error on every rank, and no rank
// is left waiting in a collective the others never reach. Every distributed entry point validates
// through these before its first transfer; all ranks call them in the same order.
#pragma once

#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "kattn/core/storage.hpp"
#include "kattn/distributed/options.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace dist {

// The storage types a distributed call takes, by number (what the ranks agree on).
enum class StorageCode : std::int64_t { f32, f64, bf16, f16 };
template <class S>
constexpr StorageCode storage_code() {
  static_assert(std::is_same_v<S, float> || std::is_same_v<S, double> || is_16bit_v<S>,
                "kattn::dist: float, double, kattn::bf16 or kattn::fp16");
  if constexpr (std::is_same_v<S, float>) return StorageCode::f32;
  if constexpr (std::is_same_v<S, double>) return StorageCode::f64;
  if constexpr (std::is_same_v<S, bf16>) return StorageCode::bf16;
  return StorageCode::f16;
}

// Runs `local` (local validation) on every rank. When it throws on any rank, every rank throws:
// the message of the lowest failing rank, prefixed "rank R: " when there are several ranks, as a
// kattn::Error (or std::runtime_error when the failure was not a kattn::Error; one not derived
// from std::exception reads "an exception not derived from std::exception").
void collective_check(MPI_Comm comm, const std::function<void()>& local);

// Every rank throws kattn::Error(message of the lowest rank with ok == false) if any has it.
void collective_require(MPI_Comm comm, bool ok, const std::string& message);

// One value that must be the same on every rank, named for the message:
//   "<argument>: expected <what> <value on rank 0> (from rank 0), got <value> on rank R".
struct Agreed {
  enum class Kind { integer, boolean, real, dtype };
  const char* argument;
  const char* what;
  Kind kind;
  std::int64_t value;  // a real is stored by its bits

  static Agreed integer(const char* argument, const char* what, std::int64_t v) {
    return {argument, what, Kind::integer, v};
  }
  static Agreed boolean(const char* argument, const char* what, bool v) { return {argument, what, Kind::boolean, v}; }
  static Agreed real(const char* argument, const char* what, double v);
  // S: the storage type, named in messages as --dtype names it (f32, f64, bf16, f16).
  template <class S>
  static Agreed dtype(const char* argument) {
    return {argument, "dtype", Kind::dtype, static_cast<std::int64_t>(storage_code<S>())};
  }
};

// Checks that every rank passed the same values (in the same order); the first difference, in
// field order then rank order, becomes the same kattn::Error on every rank.
void collective_agree(MPI_Comm comm, const std::vector<Agreed>& fields);

// The options as fields to agree on: every call agrees on them, and so may a caller that branches
// on them before its first call (a program reading its flags on every rank).
// The sum of the finite values (a -inf sink gives its head none): one number that ranks given
// different per-head values disagree on.
inline double finite_sum(const std::vector<double>& values) {
  double sum = 0;
  for (const double x : values)
    if (std::isfinite(x)) sum += x;
  return sum;
}

inline std::vector<Agreed> option_fields(const Options& opt, const DistOptions& d) {
  return {Agreed::boolean("options", "causal", opt.causal),
          Agreed::integer("options", "window_left", opt.window_left),
          Agreed::integer("options", "window_right", opt.window_right),
          Agreed::integer("options", "diagonal_shift", opt.diagonal_shift),
          Agreed::real("options", "softcap", opt.softcap),
          Agreed::integer("options", "sinks (count)", static_cast<std::int64_t>(opt.sinks.size())),
          Agreed::real("options", "sinks (sum)", finite_sum(opt.sinks)),
          Agreed::integer("options", "alibi_slopes (count)", static_cast<std::int64_t>(opt.alibi_slopes.size())),
          Agreed::real("options", "alibi_slopes (sum)", finite_sum(opt.alibi_slopes)),
          Agreed::boolean("options", "bias", opt.bias.active()),
          Agreed::real("options", "scale", opt.scale),
          Agreed::integer("options", "block_k", opt.block_k),
          Agreed::boolean("options", "block_mask", opt.block_mask != nullptr),
          Agreed::boolean("options", "deterministic", d.deterministic),
          Agreed::integer("options", "chunk", chunk_of(d)),
          Agreed::integer("options", "sharding (0 contiguous, 1 zigzag)", static_cast<int>(d.sharding)),
          Agreed::integer("options", "root", d.root),
          Agreed::boolean("options", "communicate", d.communicate),
          Agreed::integer("options", "ulysses_size", d.ulysses_size),
          Agreed::integer("options", "grid rows", d.grid.rows),
          Agreed::integer("options", "grid cols", d.grid.cols),
          Agreed::integer("options", "scheme (0 ring, 1 ulysses, 2 hybrid, 3 sharded-kv, 4 grid)",
                          static_cast<int>(d.scheme))};
}

// Every rank's value of `local`, in rank order.
std::vector<std::int64_t> allgather(MPI_Comm comm, std::int64_t local);

// kattn's own duplicate of a communicator (made on first use, collectively, and cached on it;
// freed when the caller frees theirs): kattn's messages and collectives never meet the
// caller's, whatever tags they use.
MPI_Comm library_comm(MPI_Comm comm);

// A duplicate of comm cached on it under the attribute `key` (MPI_KEYVAL_INVALID on first use, set
// here): made collectively on first use, freed when comm is freed. Each user keeps its own key.
MPI_Comm cached_dup(MPI_Comm comm, int& key);

}  // namespace dist
}  // namespace kattn
