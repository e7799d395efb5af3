// Ring attention against the float64 textbook reference of the whole sequence: every rank checks
// its shard. Contiguous and zigzag sharding, causal/window/softcap, GQA, lengths that do not
// divide by the rank count (ranks with nothing included), staging through host buffers, and the
// bytes sent against the model; windows of every size send only the keys some query sees.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "dist_forward.hpp"
#include "dist_support.hpp"
#include "kattn/distributed/attention.hpp"
#include "kattn/distributed/traffic.hpp"
#include "kattn/attention.hpp"

namespace kattn {
namespace test {
namespace {

template <class T>
void check_ring(const Shape& s, const Options& opt, const DistOptions& d) {
  expect_sharded_forward_matches_reference<T>(s, opt, d, "ring_attention");
}

std::vector<Options> variants() {
  std::vector<Options> v(8);
  v[1].causal = true;
  v[2].window_left = 5, v[2].window_right = 3;
  v[3].causal = true, v[3].window_left = 7;
  v[4].softcap = 2.5;
  v[5].causal = true, v[5].softcap = 30.0, v[5].scale = -0.2;
  v[6].window_left = 0, v[6].window_right = -1;
  v[7].causal = true, v[7].block_q = 5, v[7].block_k = 3;
  return v;
}

TEST(RingForward, DoubleMatchesReferenceContiguousAndZigzag) {
  // Lengths that divide by no rank count > 1, and self-attention with Nq = Nk.
  const std::vector<Shape> shapes = {{1, 1, 1, 1, 1, 4},    {2, 37, 37, 2, 1, 16}, {1, 53, 53, 4, 2, 8},
                                     {1, 97, 97, 2, 2, 32}, {2, 13, 13, 8, 1, 5},  {1, 64, 64, 1, 1, 64}};
  for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
    DistOptions d;
    d.sharding = sh;
    for (const Shape& s : shapes)
      for (const Options& o : variants()) check_ring<double>(s, o, d);
  }
}

TEST(RingForward, DoubleMatchesReferenceForGqaRatiosAndCrossLengths) {
  for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
    DistOptions d;
    d.sharding = sh;
    for (int ratio : {1, 2, 8})
      for (const Options& o : variants()) check_ring<double>({2, 29, 29, 2 * ratio, 2, 24}, o, d);
    // Nk != Nq: causal is bottom-right aligned on the global sequences.
    for (const Options& o : variants()) {
      check_ring<double>({1, 23, 61, 4, 2, 8}, o, d);
      check_ring<double>({1, 61, 23, 4, 2, 8}, o, d);
    }
  }
}

TEST(RingForward, SinksMatchReferenceContiguousAndZigzag) {
  Options o;
  o.causal = true;
  o.sinks = {1.5, -0.5, 3.0, -std::numeric_limits<double>::infinity()};
  for (dist::Sharding sh : {dist::Sharding::contiguous, dist::Sharding::zigzag}) {
    DistOptions d;
    d.sharding = sh;
    check_ring<double>({2, 45, 45, 4, 2, 16}, o, d);
  }
}

TEST(RingForward, AlibiMatchesReferenceContiguousAndZigzag) {
  // Every shard measures its keys' distances from the global diagonal (the shift places it).
  for (bool causal : {false, true}) {
    Options o;
    o.causal = causal;
    o.alibi_slopes = {0.5, 0.0, 0.125, 2.0};
    for (dist::Sharding sh : {dist::Sharding::contiguous, dist::Sharding::zigzag}) {
      DistOptions d;
      d.sharding = sh;
      check_ring<double>({2, 45, 45, 4, 2, 16}, o, d);
      check_ring<double>({1, 23, 61, 4, 2, 8}, o, d);
    }
  }
}

TEST(RingForward, RanksWithoutTokens) {
  // Fewer positions than shards: some ranks hold nothing and still take part.
  for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
    DistOptions d;
    d.sharding = sh;
    for (int n : {1, 2, 3, 5})
      for (const Options& o : variants()) check_ring<double>({1, n, n, 2, 1, 8}, o, d);
  }
}

TEST(RingForward, FloatWithinRelativeBound) {
  for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
    DistOptions d;
    d.sharding = sh;
    for (const Options& o : variants()) check_ring<float>({2, 131, 131, 4, 2, 32}, o, d);
  }
}

TEST(RingForward, HostStagingPath) {
  // Host memory normally goes to MPI directly; Staging::host forces the device-buffer path
  // (mirror copies around every transfer) so it is tested on this machine too.
  DistOptions d;
  d.staging = dist::Staging::host;
  for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
    d.sharding = sh;
    for (const Options& o : variants()) check_ring<double>({1, 45, 45, 2, 1, 16}, o, d);
  }
}

TEST(RingForward, LongShardsCutIntoPiecesMatchOneRankForward) {
  // Segments longer than a launch piece (2048 rows) are cut, with MPI progressed in between.
  const int rank = rank_of(MPI_COMM_WORLD);
  const Shape s{1, 4500, 4500, 2, 1, 8};
  Problem<double> g(s, shared_seed());
  for (bool causal : {false, true}) {
    Options opt;
    opt.causal = causal;
    opt.window_left = causal ? 3000 : -1;
    Problem<double> one(s, 0);
    one.q = g.q, one.k = g.k, one.v = g.v;
    attention(Kokkos::DefaultExecutionSpace(), one.q, kv::dense(one.k, one.v), one.o, one.lse, one_split(opt));
    Kokkos::fence();
    for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
      DistOptions d;
      d.sharding = sh;
      const ShardedRun<double> r = sharded_dense_forward(MPI_COMM_WORLD, g, opt, d);
      const ShardValues v = pair_with_global(r.o, r.lse, one.o, one.lse, r.q_layout, rank);
      EXPECT_LE(compare(v.o, v.ref_o).max_abs, kDoubleTol) << "causal=" << causal << " " << dist::name(sh);
      EXPECT_LE(compare(v.lse, v.ref_lse).max_abs, kDoubleTol) << "causal=" << causal << " " << dist::name(sh);
    }
  }
}

TEST(RingForward, BytesSentMatchTheModel) {
  // One K and one V shard per step, P - 1 steps, even and uneven shards: what dist::traffic says.
  const int P = size_of(MPI_COMM_WORLD);
  for (int n : {8 * P, 64 * P + 1}) {
    const Shape s{2, n, n, 4, 2, 16};
    Problem<double> g(s, shared_seed());
    const ShardedRun<double> r = sharded_dense_forward(MPI_COMM_WORLD, g, Options{}, DistOptions{});
    EXPECT_EQ(r.stats.bytes_sent, modelled_sent(s, sizeof(double), Options{}, DistOptions{}, dist::Pass::forward));
    if (n % P == 0) {
      EXPECT_EQ(r.stats.bytes_sent, std::int64_t(P - 1) * 2 * 2 * (n / P) * 2 * 16 * 8);
    }
    EXPECT_EQ(r.stats.steps, P);
  }
}

// Windows of every size against the shard length (0, 1, inside a shard, across shards, one side
// unbounded), with and without a causal mask: the output as on one rank, and exactly the bytes of
// the traffic model sent (all ranks together send what they receive).
std::vector<Options> windows() {
  std::vector<Options> v(11);
  v[0].window_left = 0, v[0].window_right = 0;
  v[1].window_left = 1, v[1].window_right = 0;
  v[2].window_left = 1, v[2].window_right = 1;
  v[3].window_left = 6, v[3].window_right = 2;
  v[4].window_left = 45, v[4].window_right = 0;
  v[5].window_left = -1, v[5].window_right = 3;
  v[6].window_left = 4, v[6].window_right = -1;
  v[7].causal = true, v[7].window_left = 0;
  v[8].causal = true, v[8].window_left = 1;
  v[9].causal = true, v[9].window_left = 7;
  v[10].causal = true, v[10].window_left = 30;
  return v;
}

template <class T>
void check_window(const Shape& s, const Options& opt, const DistOptions& d) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(describe(s, opt) + " sharding=" + dist::name(d.sharding) + " deterministic=" +
               std::to_string(d.deterministic) + " seed=" + std::to_string(seed));
  Problem<T> g(s, seed);
  const Problem<double> ref = reference_of(g, opt);
  const ShardedRun<T> r = sharded_dense_forward(MPI_COMM_WORLD, g, opt, d);
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  expect_shard_close(r.o, r.lse, ref, r.q_layout, rank, tolerance<T>(), "windowed ring_attention");
  dist::TrafficProblem pr;
  pr.Nq = s.Nq, pr.Nk = s.Nk, pr.batch = s.B, pr.heads_q = s.Hq, pr.heads_kv = s.Hkv, pr.head_dim = s.D;
  pr.bytes_per_value = sizeof(T);
  const dist::Traffic model = dist::traffic(pr, opt, d, P, rank, dist::Pass::forward);
  EXPECT_EQ(r.stats.bytes_sent, model.sent);
  std::int64_t sums[2] = {r.stats.bytes_sent, model.received};
  MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(sums[0], sums[1]) << "bytes sent by all ranks, received by all ranks (model)";
}

TEST(RingForward, WindowsMatchReferenceAndSendOnlyWhatIsSeen) {
  const int P = size_of(MPI_COMM_WORLD);
  // About 16 positions per shard (windows of 30 and 45 reach across shards), an uneven split,
  // GQA, Nq != Nk both ways, and fewer positions than shards.
  const std::vector<Shape> shapes = {{2, 16 * P + 3, 16 * P + 3, 4, 2, 8}, {1, 11 * P, 23 * P + 1, 8, 1, 16},
                                     {1, 23 * P + 1, 11 * P, 2, 2, 8},     {1, 3, 3, 2, 1, 8}};
  for (bool det : {false, true})
    for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
      DistOptions d;
      d.sharding = sh;
      d.deterministic = det;
      d.chunk = 4;
      for (const Shape& s : shapes)
        for (const Options& o : windows()) check_window<double>(s, o, d);
    }
}

TEST(RingForward, WindowShorterThanAShardNeedsTheNeighboursOnly) {
  // 64 positions per rank and a causal window of 20 keys: each contiguous shard receives the
  // last 20 keys of its left neighbour (one step); dense, it would receive P - 1 whole shards.
  const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
  const Shape s{1, 64 * P, 64 * P, 2, 1, 8};
  Problem<double> g(s, shared_seed());
  Options opt;
  opt.causal = true, opt.window_left = 20;
  const ShardedRun<double> r = sharded_dense_forward(MPI_COMM_WORLD, g, opt, DistOptions{});
  expect_shard_close(r.o, r.lse, reference_of(g, opt), r.q_layout, rank, kDoubleTol, "causal window 20");
  const std::int64_t row = 2 * s.Hkv * s.D * sizeof(double);  // K and V of one position
  EXPECT_EQ(r.stats.bytes_sent, rank + 1 < P ? 20 * row : 0);
  EXPECT_EQ(r.stats.steps, P > 1 ? 2 : 1);
}

TEST(RingForward, ZigzagBalancesCausalWork) {
  // Useful work per rank (counted, not timed): zigzag within 10% for causal masks; contiguous
  // sharding gives the last rank about 2P - 1 times the first's.
  const int P = size_of(MPI_COMM_WORLD);
  const Shape s{1, 64 * P, 64 * P, 1, 1, 8};
  Problem<double> g(s, shared_seed());
  Options opt;
  opt.causal = true;
  for (Sharding sh : {Sharding::zigzag, Sharding::contiguous}) {
    DistOptions d;
    d.sharding = sh;
    const ShardedRun<double> r = sharded_dense_forward(MPI_COMM_WORLD, g, opt, d);
    double lo = r.stats.flops, hi = r.stats.flops;
    MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (sh == Sharding::zigzag) {
      EXPECT_LE(hi / lo, 1.10) << "zigzag: slowest/fastest rank work";
    } else if (P > 1) {
      EXPECT_GT(hi / lo, 2.0) << "contiguous causal work is expected to be unbalanced";
    }
  }
}

TEST(RingForward, WithoutCommunicationDoesTheSameWorkAndSendsNothing) {
  const int P = size_of(MPI_COMM_WORLD);
  const Shape s{1, 16 * P, 16 * P, 2, 1, 8};
  Problem<double> g(s, shared_seed());
  Options opt;
  opt.causal = true;
  DistOptions d;
  d.sharding = Sharding::zigzag;
  const ShardedRun<double> with = sharded_dense_forward(MPI_COMM_WORLD, g, opt, d);
  d.communicate = false;
  const ShardedRun<double> without = sharded_dense_forward(MPI_COMM_WORLD, g, opt, d);
  EXPECT_EQ(without.stats.bytes_sent, 0);
  EXPECT_EQ(without.stats.flops, with.stats.flops);
  EXPECT_EQ(without.stats.steps, with.stats.steps);
}

TEST(RingForward, CallersMessagesStayApart) {
  // A receive the caller posted on the same communicator, with the tag and source the ring uses
  // for its K shards, must get the caller's message, not kattn's.
  const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
  const int left = (rank - 1 + P) % P, right = (rank + 1) % P;
  int got = -1;
  MPI_Request req;
  MPI_Irecv(&got, 1, MPI_INT, left, 0, MPI_COMM_WORLD, &req);
  Problem<double> g({1, 12 * P, 12 * P, 2, 1, 8}, shared_seed());
  const Problem<double> ref = reference_of(g, Options{});
  const ShardedRun<double> r = sharded_dense_forward(MPI_COMM_WORLD, g, Options{}, DistOptions{});
  expect_shard_close(r.o, r.lse, ref, r.q_layout, rank, kDoubleTol, "ring beside a pending receive");
  MPI_Send(&rank, 1, MPI_INT, right, 0, MPI_COMM_WORLD);
  MPI_Wait(&req, MPI_STATUS_IGNORE);
  EXPECT_EQ(got, left);
}

TEST(RingForward, ProgressCallbackSeesEveryStep) {
  const int P = size_of(MPI_COMM_WORLD);
  Problem<double> g({1, 10, 10, 1, 1, 4}, shared_seed());
  std::vector<int> steps;
  DistOptions d;
  d.progress = [&](int step, int total) {
    steps.push_back(step);
    EXPECT_EQ(total, P);
  };
  sharded_dense_forward(MPI_COMM_WORLD, g, Options{}, d);
  ASSERT_EQ(int(steps.size()), P);
  for (int i = 0; i < P; ++i) EXPECT_EQ(steps[i], i + 1);
}

}  // namespace
}  // namespace test
}  // namespace kattn
