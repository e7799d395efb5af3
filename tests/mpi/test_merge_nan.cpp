// The NaN rule of the state algebra across ranks (tests/test_merge_nan.cpp has the single-rank
// scales): the merge operator of distributed decode, and the folds of ring attention and
// distributed decode, keep a NaN under a weight that underflows to 0 in float.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "dist_support.hpp"
#include "kattn/distributed/attention.hpp"
#include "kattn/distributed/merge_op.hpp"
#include "kattn/distributed/detail/row_merge.hpp"
#include "nan_merge_problem.hpp"

namespace kattn {
namespace test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(DistMergeNaN, MergeOperatorKeepsANaNUnderAWeightThatUnderflowed) {
  const float a[2] = {-200.0f, kNaN};
  float b[2] = {0.0f, 1.0f};
  dist::detail::merge_finished_rows(a, b, 1);
  EXPECT_TRUE(std::isnan(b[1]));
  EXPECT_NEAR(b[0], 0.0f, 1e-6f);
  // Through MPI: rank 0's part is (NaN, -200), every other rank's (1, 0).
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  float row[2] = {rank == 0 ? -200.0f : 0.0f, rank == 0 ? kNaN : 1.0f};
  MPI_Datatype type = dist::finished_row_type<float>(1);
  MPI_Allreduce(MPI_IN_PLACE, row, 1, type, dist::finished_row_merge<float>(), MPI_COMM_WORLD);
  MPI_Type_free(&type);
  EXPECT_TRUE(std::isnan(row[1])) << "P=" << P;
}

TEST(DistMergeNaN, RingForward) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  const int Nq = 8, Nk = 128;
  const Problem<float> g = underflowing_nan_problem(Nq, Nk);
  const dist::SequenceLayout ql(Nq, P, dist::Sharding::contiguous), kl(Nk, P, dist::Sharding::contiguous);
  const View4<float> q = shard(g.q, ql, rank, "q"), k = shard(g.k, kl, rank, "k"), v = shard(g.v, kl, rank, "v");
  const std::size_t n = static_cast<std::size_t>(ql.local_length(rank));
  View4<float> o("o", 1, n, 2, 4);
  View3<float> lse("lse", 1, 2, n);
  poison(o);
  poison(lse);
  dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), q, kv::dense(k, v), o, lse, underflowing_nan_options());
  expect_underflowing_nan_result(o, lse, Nk, "ring_attention");
}

TEST(DistMergeNaN, Decode) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  const int Nk = 128;
  const Problem<float> g = underflowing_nan_problem(1, Nk);
  for (bool det : {false, true}) {
    dist::DistOptions d;
    d.deterministic = det;
    d.chunk = 16;  // deterministic shards start at chunk multiples
    const dist::SequenceLayout kl(Nk, P, dist::Sharding::contiguous, det ? 16 : 1);
    const View4<float> k = shard(g.k, kl, rank, "k"), v = shard(g.v, kl, rank, "v");
    View4<float> o("o", 1, 1, 2, 4);
    View3<float> lse("lse", 1, 2, 1);
    poison(o);
    poison(lse);
    dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), g.q, kv::dense(k, v), o, lse, underflowing_nan_options(), with_scheme(dist::Scheme::sharded_kv, d));
    expect_underflowing_nan_result(o, lse, Nk, det ? "decode, deterministic" : "decode");
  }
}

}  // namespace
}  // namespace test
}  // namespace kattn
