// Failures after the calls' first agreement: a progress callback that throws on one rank at some
// step, or a memory limit (KATTN_MEMORY_LIMIT) set on one rank only. Every rank must throw the
// failing rank's error, no rank may hang (ctest runs these under a timeout), and the next call on
// the same communicator must succeed (no request or message left behind).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "dist_support.hpp"
#include "kattn/distributed/attention.hpp"

namespace kattn {
namespace test {
namespace {

enum class Call { ring, ring_backward, ulysses, ulysses_backward, hybrid, hybrid_backward, grid };
const Call kCalls[] = {Call::ring,   Call::ring_backward,   Call::ulysses, Call::ulysses_backward,
                       Call::hybrid, Call::hybrid_backward, Call::grid};

const char* name(Call c) {
  switch (c) {
    case Call::ring:
      return "ring";
    case Call::ring_backward:
      return "ring_backward";
    case Call::ulysses:
      return "ulysses";
    case Call::ulysses_backward:
      return "ulysses_backward";
    case Call::hybrid:
      return "hybrid";
    case Call::grid:
      return "grid";
    default:
      return "hybrid_backward";
  }
}
bool is_hybrid(Call c) { return c == Call::hybrid || c == Call::hybrid_backward; }

constexpr std::int64_t kN = 48;  // six chunks of kChunk: several steps in every mode
constexpr std::int64_t kChunk = 8;

DistOptions options_for(Call c, bool deterministic) {
  DistOptions d;
  d.deterministic = deterministic;
  d.chunk = kChunk;
  const int P = size_of(MPI_COMM_WORLD);
  if (is_hybrid(c)) d.ulysses_size = P % 2 == 0 ? 2 : 1;  // 4 ranks: a 2 x 2 grid
  return d;
}

// This rank's shard of a problem of kN positions with 2P query and P KV heads (every call splits
// them), laid out as the call expects, and the call run on it.
void run(Call c, const DistOptions& d, const BackwardOptions& bopt = {}) {
  const int P = size_of(MPI_COMM_WORLD), Hq = 2 * P, Hkv = P, D = 8;
  const SequenceLayout layout =
      is_hybrid(c) ? dist::hybrid_layout(kN, P, d) : SequenceLayout(kN, P, d.sharding, d.deterministic ? kChunk : 1);
  const std::size_t n = static_cast<std::size_t>(layout.local_length(rank_of(MPI_COMM_WORLD)));
  View4<double> q("q", 1, n, Hq, D), k("k", 1, n, Hkv, D), v("v", 1, n, Hkv, D), o("o", 1, n, Hq, D);
  View4<double> dout("do", 1, n, Hq, D), dq("dq", 1, n, Hq, D), dk("dk", 1, n, Hkv, D), dv("dv", 1, n, Hkv, D);
  View3<double> lse("lse", 1, Hq, n);
  fill_normal(q, 1), fill_normal(k, 2), fill_normal(v, 3), fill_normal(o, 4), fill_normal(dout, 5);
  fill_normal(lse, 6);
  const Kokkos::DefaultExecutionSpace space;
  switch (c) {
    case Call::ring:
      dist::attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, lse, Options{}, d);
      break;
    case Call::ring_backward:
      dist::attention_backward(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, lse, dout, dq, dk, dv, Options{},
                                    bopt, d);
      break;
    case Call::ulysses:
      dist::attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, lse, Options{}, with_scheme(dist::Scheme::ulysses, d));
      break;
    case Call::ulysses_backward:
      dist::attention_backward(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, lse, dout, dq, dk, dv, Options{},
                                       bopt, with_scheme(dist::Scheme::ulysses, d));
      break;
    case Call::hybrid:
      dist::attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, lse, Options{}, with_scheme(dist::Scheme::hybrid, d));
      break;
    case Call::hybrid_backward:
      dist::attention_backward(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, lse, dout, dq, dk, dv, Options{},
                                      bopt, with_scheme(dist::Scheme::hybrid, d));
      break;
    case Call::grid:  // the most square grid of the ranks (4: 2 x 2)
      dist::attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, lse, Options{}, with_scheme(dist::Scheme::grid, d));
      break;
  }
}

// Distributed decode: replicated queries over this rank's keys.
void run_decode(const DistOptions& d) {
  const int P = size_of(MPI_COMM_WORLD);
  const std::size_t n = static_cast<std::size_t>(2 * kChunk);  // whole chunks: the deterministic chain's rule
  View4<double> q("q", 1, 1, 2 * P, 8), k("k", 1, n, P, 8), v("v", 1, n, P, 8), o("o", 1, 1, 2 * P, 8);
  View3<double> lse("lse", 1, 2 * P, 1);
  fill_normal(q, 1), fill_normal(k, 2), fill_normal(v, 3);
  dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), q, kv::dense(k, v), o, lse, Options{}, with_scheme(dist::Scheme::sharded_kv, d));
}

// Every rank returned without an error.
template <class F>
void expect_all_succeed(F&& f) {
  std::string message = "<none>";
  try {
    f();
  } catch (const std::exception& e) {
    message = e.what();
  }
  const std::vector<std::string> all = allgather_strings(MPI_COMM_WORLD, message);
  for (std::size_t r = 0; r < all.size(); ++r) EXPECT_EQ(all[r], "<none>") << "rank " << r << " failed";
}

std::string ranked(int rank, const std::string& text) {
  return size_of(MPI_COMM_WORLD) > 1 ? "rank " + std::to_string(rank) + ": " + text : text;
}

// The step of `steps` at which the callback throws.
enum class When { first, middle, last };
int step_of(When w, int steps) { return w == When::first ? 1 : w == When::middle ? (steps + 1) / 2 : steps; }
const char* name(When w) { return w == When::first ? "first" : w == When::middle ? "middle" : "last"; }

TEST(DistMidCallErrors, ProgressThrowsOnOneRank) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  int turn = 0;
  for (Call c : kCalls)
    for (bool det : {false, true})
      for (When w : {When::first, When::middle, When::last}) {
        const int failing = turn++ % P;  // each rank in turn
        SCOPED_TRACE(std::string(name(c)) + (det ? " deterministic" : "") + ", " + name(w) + " step, rank " +
                     std::to_string(failing));
        const std::string text = "test: progress stopped on rank " + std::to_string(failing);
        DistOptions d = options_for(c, det);
        d.progress = [&](int step, int steps) {
          if (rank == failing && step == step_of(w, steps)) throw Error(text);
        };
        expect_same_error([&] { run(c, d); }, ranked(failing, text));
        expect_all_succeed([&] { run(c, options_for(c, det)); });
      }
}

// A callback may throw anything: what is not a std::exception must end every rank alike too.
TEST(DistMidCallErrors, ProgressThrowsNonStandardOnOneRank) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD), failing = P - 1;
  for (Call c : kCalls)
    for (bool det : {false, true}) {
      SCOPED_TRACE(std::string(name(c)) + (det ? " deterministic" : ""));
      DistOptions d = options_for(c, det);
      d.progress = [&](int step, int steps) {
        if (rank == failing && step == step_of(When::middle, steps)) throw 42;
      };
      expect_same_error([&] { run(c, d); }, ranked(failing, "an exception not derived from std::exception"));
      expect_all_succeed([&] { run(c, options_for(c, det)); });
    }
}

// Which ranks fail depends on timing (a rank that has learned of a failure calls its callback no
// more), so the report is checked for being one of them, the same on every rank.
TEST(DistMidCallErrors, ProgressThrowsOnEveryRankOneFailureIsReported) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  for (Call c : kCalls)
    for (bool det : {false, true}) {
      SCOPED_TRACE(std::string(name(c)) + (det ? " deterministic" : ""));
      DistOptions d = options_for(c, det);
      d.progress = [&](int, int) { throw Error("test: progress stopped on rank " + std::to_string(rank)); };
      const std::string msg = expect_same_error([&] { run(c, d); }, "test: progress stopped on rank ");
      bool names_itself = false;
      for (int r = 0; r < P; ++r)
        names_itself = names_itself ||
                       msg.find(ranked(r, "test: progress stopped on rank " + std::to_string(r))) != std::string::npos;
      EXPECT_TRUE(names_itself) << msg;
      expect_all_succeed([&] { run(c, options_for(c, det)); });
    }
}

// KATTN_MEMORY_LIMIT on this rank only, for one scope.
struct MemoryLimitHere {
  explicit MemoryLimitHere(bool here, const char* bytes = "1") : set(here) {
    if (set) setenv("KATTN_MEMORY_LIMIT", bytes, 1);
  }
  ~MemoryLimitHere() {
    if (set) unsetenv("KATTN_MEMORY_LIMIT");
  }
  bool set;
};

#ifndef __SANITIZE_ADDRESS__
// RLIMIT_AS on this rank only, for one scope: the address space in use now plus `more` bytes.
struct AddressSpaceLimitHere {
  AddressSpaceLimitHere(bool here, std::int64_t more) : set(here) {
    if (!set) return;
    getrlimit(RLIMIT_AS, &saved);
    rlimit r = saved;
    r.rlim_cur = static_cast<rlim_t>(address_space_in_use() + more);
    setrlimit(RLIMIT_AS, &r);
  }
  ~AddressSpaceLimitHere() {
    if (set) setrlimit(RLIMIT_AS, &saved);
  }
  static std::int64_t address_space_in_use() {  // VmSize, in bytes
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line))
      if (line.rfind("VmSize:", 0) == 0) return std::stoll(line.substr(7)) * 1024;
    return 0;
  }
  bool set;
  rlimit saved{};
};
#endif

TEST(DistMidCallErrors, MemoryLimitOnOneRank) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD), failing = P - 1;
  const std::string limit = "allowed (KATTN_MEMORY_LIMIT)";
  for (Call c : kCalls)
    for (bool det : {false, true}) {
      SCOPED_TRACE(std::string(name(c)) + (det ? " deterministic" : ""));
      const std::string msg = expect_same_error(
          [&] {
            const MemoryLimitHere scope(rank == failing);
            run(c, options_for(c, det));
          },
          limit);
      EXPECT_NE(msg.find(ranked(failing, "")), std::string::npos) << msg;
      expect_all_succeed([&] { run(c, options_for(c, det)); });
    }
  for (bool det : {false, true}) {
    SCOPED_TRACE(std::string("decode") + (det ? " deterministic" : ""));
    DistOptions d;
    d.deterministic = det;
    d.chunk = kChunk;
    const std::string msg = expect_same_error(
        [&] {
          const MemoryLimitHere scope(rank == failing);
          run_decode(d);
        },
        limit);
    EXPECT_NE(msg.find(ranked(failing, "")), std::string::npos) << msg;
    expect_all_succeed([&] { run_decode(d); });
  }
}

// The deterministic tour allocates the packages it receives on the way as they come, past its
// up-front step (which holds those that start or end on a rank, and one spare to receive into):
// a package that does not fit on one rank, checked with those the rank holds, must reach every
// rank through the latch, the tour's messages still all matched (that rank sends empty ones).
// Non-causal, so each rank's keys make one package that visits every rank, the last rank first;
// the limit lets the last rank's up-front step through (its home package and the spare, as long
// as the longest other shard) and refuses the first package it receives, rank 0's.
TEST(DistMidCallErrors, TourPackageMemoryFailsMidTour) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD), failing = P - 1;
  const DistOptions d = options_for(Call::ring_backward, true);
  const SequenceLayout layout(kN, P, d.sharding, kChunk);
  std::int64_t longest_other = 0;
  for (int r = 0; r < failing; ++r) longest_other = std::max(longest_other, layout.local_length(r));
  // K, V, dK, dV of a package: 4 arrays of positions x P KV heads x D = 8 doubles.
  const auto bytes = [&](std::int64_t positions) { return 4 * positions * P * 8 * std::int64_t(sizeof(double)); };
  const std::int64_t up_front = bytes(layout.local_length(failing)) + bytes(longest_other);
  const std::string limit = std::to_string(up_front + bytes(layout.local_length(0)) / 2);
  const std::string msg = expect_same_error(
      [&] {
        const MemoryLimitHere scope(rank == failing, limit.c_str());
        run(Call::ring_backward, d);
      },
      "the deterministic tour's packages needs");
  EXPECT_NE(msg.find(ranked(failing, "kattn::dist::attention_backward (ring)")), std::string::npos) << msg;
  expect_all_succeed([&] { run(Call::ring_backward, d); });
  // The same limit on every rank: each may fail, one is reported, none hangs.
  expect_same_error(
      [&] {
        const MemoryLimitHere scope(true, limit.c_str());
        run(Call::ring_backward, d);
      },
      "kattn::dist::attention_backward (ring): the deterministic tour's");
  expect_all_succeed([&] { run(Call::ring_backward, d); });
}

// Not under AddressSanitizer, whose allocator aborts when the address space runs out, and whose
// shadow memory makes the process's address space no measure of kattn's (as for
// mpi.cli.memory_per_rank).
#ifndef __SANITIZE_ADDRESS__
// An allocation failing for real on one rank in the middle of head sharding, past the call's
// memory check (which sees the machine's free memory, not this rank's address-space limit): the
// exchange's buffers are allocated in a collective step, so every rank throws that rank's error,
// the gather already in flight completes, and the next call succeeds. The limit leaves room for
// the result buffers and the first gather (q) and not for the second (k): 8 MB each here.
TEST(DistMidCallErrors, HeadExchangeAllocationFailsOnOneRank) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD), failing = P - 1;
  const std::int64_t N = 16384, D = 64;  // one head per rank: every whole sequence is N x D doubles
  const std::int64_t whole = N * D * std::int64_t(sizeof(double));
  const SequenceLayout layout(N, P, dist::Sharding::contiguous, 1);
  const std::size_t n = static_cast<std::size_t>(layout.local_length(rank));
  View4<double> q("q", 1, n, P, D), k("k", 1, n, P, D), v("v", 1, n, P, D), o("o", 1, n, P, D);
  View3<double> lse("lse", 1, P, n);
  fill_normal(q, 1), fill_normal(k, 2), fill_normal(v, 3);
  const std::string msg = expect_same_error(
      [&] {
        // The results (o, lse), then q's whole sequence and its outgoing copy, then 4 MB to spare.
        const AddressSpaceLimitHere scope(rank == failing, whole + N * 8 + 2 * whole + (4 << 20));
        dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), q, kv::dense(k, v), o, lse,
                                Options{}, with_scheme(dist::Scheme::ulysses, DistOptions{}));
      },
      "kattn::dist::heads::");
  EXPECT_NE(msg.find(ranked(failing, "")), std::string::npos) << msg;
  expect_all_succeed([&] { run(Call::ulysses, options_for(Call::ulysses, false)); });
}
#endif

}  // namespace
}  // namespace test
}  // namespace kattn
