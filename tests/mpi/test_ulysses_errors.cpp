// Head sharding's collective errors: heads that do not divide over the ranks, options that differ
// between ranks, communicate off, and deterministic backward on a rank count that splits GQA groups, each the same
// kattn::Error on every rank, never a hang (ctest runs DistErrors under a timeout).
#include <gtest/gtest.h>

#include <string>

#include "dist_support.hpp"
#include "kattn/distributed/attention.hpp"

namespace kattn {
namespace test {
namespace {

// This rank's contiguous shard of a problem of N positions: q, k, v, o, dO and the gradients.
struct HeadShard {
  View4<double> q, k, v, o, dout, dq, dk, dv;
  View3<double> lse;
  HeadShard(std::int64_t N, int Hq, int Hkv, int D) {
    const std::size_t n =
        SequenceLayout(N, size_of(MPI_COMM_WORLD), dist::Sharding::contiguous).local_length(rank_of(MPI_COMM_WORLD));
    q = View4<double>("q", 1, n, Hq, D), o = View4<double>("o", 1, n, Hq, D), dout = View4<double>("do", 1, n, Hq, D);
    dq = View4<double>("dq", 1, n, Hq, D);
    k = View4<double>("k", 1, n, Hkv, D), v = View4<double>("v", 1, n, Hkv, D);
    dk = View4<double>("dk", 1, n, Hkv, D), dv = View4<double>("dv", 1, n, Hkv, D);
    lse = View3<double>("lse", 1, Hq, n);
    fill_normal(q, 1), fill_normal(k, 2), fill_normal(v, 3), fill_normal(o, 4), fill_normal(dout, 5);
    fill_normal(lse, 6);
  }
  void forward(const Options& opt = {}, const DistOptions& d = {}) {
    dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), q, kv::dense(k, v), o, lse, opt, with_scheme(dist::Scheme::ulysses, d));
  }
  void backward(const Options& opt = {}, const DistOptions& d = {}) {
    dist::attention_backward(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), q, kv::dense(k, v), o, lse, dout,
                                     dq, dk, dv, opt, BackwardOptions{}, with_scheme(dist::Scheme::ulysses, d));
  }
};

TEST(DistErrors, UlyssesHeadsMustDivideOverRanks) {
  const int P = size_of(MPI_COMM_WORLD);
  if (P < 2) GTEST_SKIP() << "every head count divides over one rank";
  HeadShard s(20, P + 1, 1, 8);
  const std::string expected = "q: expected a number of heads that is a multiple of the " + std::to_string(P) +
                               " ranks sharing them (head sharding), got " + std::to_string(P + 1);
  expect_same_error([&] { s.forward(); }, expected);
  expect_same_error([&] { s.backward(); }, expected);
}

TEST(DistErrors, UlyssesOptionsDifferAcrossRanks) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  if (P < 2) GTEST_SKIP() << "needs two ranks";
  HeadShard s(20, 4 * P, 2, 8);
  Options opt;
  opt.causal = rank == P - 1;
  const std::string expected =
      "options: expected causal false (from rank 0), got true on rank " + std::to_string(P - 1);
  expect_same_error([&] { s.forward(opt); }, expected);
  expect_same_error([&] { s.backward(opt); }, expected);
}

TEST(DistErrors, UlyssesDeterministicBackwardNeedsWholeGqaGroups) {
  const int P = size_of(MPI_COMM_WORLD);
  if (P < 2) GTEST_SKIP() << "one rank holds every group";
  DistOptions d;
  d.deterministic = true;
  HeadShard s(20, 2 * P, 1, 8);
  expect_same_error([&] { s.backward({}, d); },
                    "k: deterministic head sharding needs a number of KV heads that is a multiple of the " +
                        std::to_string(P) + " ranks (each rank then sums whole GQA groups), got 1");
}

TEST(DistErrors, UlyssesAlwaysTransfers) {
  HeadShard s(20, 2 * size_of(MPI_COMM_WORLD), 2, 8);
  DistOptions d;
  d.communicate = false;
  const std::string expected = "communicate: false is for the ring's forward alone; ulysses always transfers";
  expect_same_error([&] { s.forward({}, d); }, expected);
  expect_same_error([&] { s.backward({}, d); }, expected);
}

TEST(DistErrors, UlyssesBadShapeOnOneRank) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  HeadShard s(20, 2 * P, 2, 8);
  View4<double> bad_k("k", 1, s.k.extent(1), 2, 6);
  expect_same_error(
      [&] {
        dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), s.q,
                        kv::dense(rank == P - 1 ? bad_k : s.k, s.v), s.o, s.lse, Options{},
                        with_scheme(dist::Scheme::ulysses));
      },
      "k: expected head dim 8");
}

}  // namespace
}  // namespace test
}  // namespace kattn
