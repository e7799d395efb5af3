// Distributed decode against the float64 reference of the whole KV cache, with even, uneven and
// empty shards; MPI_Allreduce gives every rank the same bits, MPI_Reduce gives the root the result
// and leaves the others' outputs alone. And the MPI_Op itself on random finished rows.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "dist_support.hpp"
#include "kattn/distributed/attention.hpp"
#include "kattn/distributed/merge_op.hpp"
#include "kattn/distributed/detail/row_merge.hpp"

namespace kattn {
namespace test {
namespace {

template <class T>
dist::DistStats decode_on(const Problem<T>& g, const std::vector<std::int64_t>& lens, const Options& opt, const DistOptions& d,
               View4<T>& o, View3<T>& lse) {
  const int rank = rank_of(MPI_COMM_WORLD);
  std::int64_t start = 0;
  for (int r = 0; r < rank; ++r) start += lens[r];
  const auto range = std::make_pair(start, start + lens[rank]);
  // Strided views straight into the global arrays: any layout with a contiguous head dim works.
  auto k = Kokkos::subview(g.k, Kokkos::ALL, range, Kokkos::ALL, Kokkos::ALL);
  auto v = Kokkos::subview(g.v, Kokkos::ALL, range, Kokkos::ALL, Kokkos::ALL);
  o = View4<T>("o", g.shape.B, g.shape.Nq, g.shape.Hq, g.shape.D);
  lse = View3<T>("lse", g.shape.B, g.shape.Hq, g.shape.Nq);
  poison(o);
  poison(lse);
  return dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), g.q, kv::dense(k, v), o, lse, opt,
                         with_scheme(dist::Scheme::sharded_kv, d));
}

template <class T>
void check_decode(const Shape& s, const Options& opt, const DistOptions& d = {}) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(describe(s, opt) + " seed=" + std::to_string(seed));
  Problem<T> g(s, seed);
  const Problem<double> ref = reference_of(g, opt);
  const dist::SequenceLayout whole(s.Nq, 1, dist::Sharding::contiguous);
  for (const auto& lens : splits_of(s.Nk, size_of(MPI_COMM_WORLD))) {
    View4<T> o;
    View3<T> lse;
    const dist::DistStats stats = decode_on(g, lens, opt, d, o, lse);
    expect_shard_close(o, lse, ref, whole, 0, tolerance<T>(), "decode");
    EXPECT_EQ(stats.bytes_sent,
              modelled_sent(s, sizeof(T), opt, with_scheme(dist::Scheme::sharded_kv, d), dist::Pass::forward));
    // Every rank holds the same bits as rank 0.
    std::vector<double> mine = to_host(o), root = mine;
    MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
    EXPECT_EQ(std::memcmp(mine.data(), root.data(), mine.size() * sizeof(double)), 0) << "o differs from rank 0's";
  }
}

std::vector<Options> variants() {
  std::vector<Options> v(6);
  v[1].causal = true;
  v[2].window_left = 17;
  v[3].causal = true, v[3].window_left = 30, v[3].softcap = 3.0;
  v[4].splits = 7;
  v[5].causal = true, v[5].splits = 1000;  // more splits than keys
  return v;
}

TEST(DistDecode, DoubleMatchesReference) {
  const std::vector<Shape> shapes = {{1, 1, 1, 1, 1, 4},   {2, 1, 97, 4, 2, 16}, {1, 1, 300, 8, 1, 64},
                                     {3, 4, 131, 4, 4, 8}, {1, 2, 5, 2, 1, 128}, {2, 1, 64, 16, 2, 32}};
  for (const Shape& s : shapes)
    for (const Options& o : variants()) check_decode<double>(s, o);
}

TEST(DistDecode, FloatWithinRelativeBound) {
  for (const Options& o : variants()) check_decode<float>({2, 1, 257, 8, 2, 64}, o);
}

TEST(DistDecode, HostStagingPath) {
  DistOptions d;
  d.staging = dist::Staging::host;
  for (const Options& o : variants()) check_decode<double>({1, 2, 77, 4, 2, 16}, o, d);
  d.deterministic = true;
  d.chunk = 8;
  // Deterministic shards must start at chunk multiples: use the chunk-aligned layout.
  const int P = size_of(MPI_COMM_WORLD);
  Problem<double> g({1, 1, 77, 4, 2, 16}, shared_seed());
  const dist::SequenceLayout lay(77, P, dist::Sharding::contiguous, 8);
  std::vector<std::int64_t> lens;
  for (int r = 0; r < P; ++r) lens.push_back(lay.local_length(r));
  View4<double> o;
  View3<double> lse;
  const dist::DistStats stats = decode_on(g, lens, Options{}, d, o, lse);
  expect_shard_close(o, lse, reference_of(g, Options{}), dist::SequenceLayout(1, 1, dist::Sharding::contiguous), 0,
                     kDoubleTol, "deterministic decode, staged");
  EXPECT_EQ(stats.bytes_sent, modelled_sent(g.shape, sizeof(double), Options{},
                                            with_scheme(dist::Scheme::sharded_kv, d), dist::Pass::forward));
}

TEST(DistDecode, ReduceToOneRank) {
  const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
  Problem<double> g({2, 2, 90, 4, 2, 16}, shared_seed());
  const Problem<double> ref = reference_of(g, Options{});
  const dist::SequenceLayout whole(2, 1, dist::Sharding::contiguous);
  for (bool det : {false, true}) {
    DistOptions d;
    d.root = P - 1;
    d.deterministic = det;
    d.chunk = 10;
    const dist::SequenceLayout lay(90, P, dist::Sharding::contiguous, det ? 10 : 1);
    std::vector<std::int64_t> lens;
    for (int r = 0; r < P; ++r) lens.push_back(lay.local_length(r));
    View4<double> o;
    View3<double> lse;
    const dist::DistStats stats = decode_on(g, lens, Options{}, d, o, lse);
    EXPECT_EQ(stats.bytes_sent, modelled_sent(g.shape, sizeof(double), Options{},
                                              with_scheme(dist::Scheme::sharded_kv, d), dist::Pass::forward));
    if (rank == d.root) {
      expect_shard_close(o, lse, ref, whole, 0, kDoubleTol, det ? "reduce, deterministic" : "reduce");
    } else {
      for (double x : to_host(o)) EXPECT_TRUE(std::isnan(x)) << "a non-root o was written";
    }
  }
}

TEST(DistDecode, MergeOperatorMatchesSequentialMerge) {
  // Random finished rows on every rank (every rank draws all ranks' rows), some empty.
  const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
  const int rows = 37, D = 24, w = D + 1;
  std::mt19937_64 gen(shared_seed());
  std::normal_distribution<double> normal(0.0, 3.0);
  std::vector<std::vector<double>> all(P, std::vector<double>(rows * w));
  for (int r = 0; r < P; ++r)
    for (int i = 0; i < rows; ++i) {
      const bool empty = (i + r) % 5 == 0;
      all[r][i * w] = empty ? -std::numeric_limits<double>::infinity() : normal(gen);
      for (int d = 0; d < D; ++d) all[r][i * w + 1 + d] = empty ? 0.0 : normal(gen);
    }
  // Expected: a left fold in rank order with the same algebra, in long double-free double.
  std::vector<double> expect = all[0];
  for (int r = 1; r < P; ++r) {
    std::vector<double> next = all[r];
    for (int i = 0; i < rows; ++i) dist::detail::merge_finished_rows(&expect[i * w], &next[i * w], D);
    expect = next;
  }
  MPI_Datatype type = dist::finished_row_type<double>(D);
  for (int root : {-1, 0, P - 1}) {
    std::vector<double> buf = all[rank];
    if (root < 0)
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), rows, type, dist::finished_row_merge<double>(), MPI_COMM_WORLD);
    else
      MPI_Reduce(rank == root ? MPI_IN_PLACE : buf.data(), buf.data(), rows, type, dist::finished_row_merge<double>(),
                 root, MPI_COMM_WORLD);
    if (root >= 0 && rank != root) continue;
    const Errors e = compare(buf, expect);
    EXPECT_FALSE(e.nan_mismatch);
    EXPECT_LE(e.max_abs, 1e-12) << "root " << root;
    for (int i = 0; i < rows; ++i)
      if (std::isinf(expect[i * w])) {
        EXPECT_EQ(buf[i * w], expect[i * w]) << "row " << i << " should stay empty";
      }
  }
  MPI_Type_free(&type);
}

}  // namespace
}  // namespace test
}  // namespace kattn
