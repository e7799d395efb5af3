// Head-sharded attention (DeepSpeed-Ulysses), forward against the float64 textbook reference and
// backward against the one-rank backward in double (itself tested against the textbook one): every
// rank checks its shard. 12 query heads divide over 1-4 ranks; the KV head counts make every GQA
// case: KV heads sharded (Hkv % P == 0), KV heads shared by two ranks, and one KV head for all.
// Uneven shards, ranks without positions, both shardings, staging, and the deterministic mode
// bitwise the same for every rank count.
#include <gtest/gtest.h>

#include <vector>

#include "dist_forward.hpp"
#include "dist_grads.hpp"
#include "dist_support.hpp"
#include "kattn/attention.hpp"
#include "kattn/distributed/detail/head_split.hpp"
#include "kattn/distributed/traffic.hpp"
#include "kattn/distributed/attention.hpp"

namespace kattn {
namespace test {
namespace {

template <class T>
using HeadShardedRun = ShardedRun<T>;

template <class T>
HeadShardedRun<T> run_ulysses(MPI_Comm comm, const Problem<T>& g, const Options& opt, const DistOptions& d) {
  return sharded_dense_forward(comm, g, opt, with_scheme(dist::Scheme::ulysses, d));
}

template <class T>
void check_forward(const Shape& s, const Options& opt, const DistOptions& d) {
  expect_sharded_forward_matches_reference<T>(s, opt, with_scheme(dist::Scheme::ulysses, d), "ulysses_attention");
}

std::vector<Options> variants() {
  std::vector<Options> v(7);
  v[1].causal = true;
  v[2].window_left = 5, v[2].window_right = 3;
  v[3].causal = true, v[3].window_left = 7;
  v[4].softcap = 2.5, v[4].scale = 0.3;
  v[5].causal = true, v[5].softcap = 30.0, v[5].scale = -0.2;
  v[6].causal = true, v[6].block_q = 5, v[6].block_k = 3;
  return v;
}

// 12 query heads over P = 1..4; KV heads 12, 6, 4, 3, 2, 1 (sharded, or shared by ranks).
const int kHeads = 12;
const std::vector<int> kKvHeads = {12, 6, 4, 3, 2, 1};

TEST(UlyssesForward, DoubleMatchesReferenceForEveryGqaRatio) {
  for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
    DistOptions d;
    d.sharding = sh;
    for (int hkv : kKvHeads)
      for (const Options& o : variants()) check_forward<double>({2, 37, 37, kHeads, hkv, 8}, o, d);
  }
}

TEST(UlyssesForward, CrossLengthsAndRanksWithoutTokens) {
  for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
    DistOptions d;
    d.sharding = sh;
    for (const Options& o : variants()) {
      check_forward<double>({1, 23, 61, kHeads, 4, 8}, o, d);
      check_forward<double>({1, 61, 23, kHeads, 3, 8}, o, d);
      for (int n : {1, 2, 3}) check_forward<double>({1, n, n, kHeads, 2, 8}, o, d);
    }
  }
}

TEST(UlyssesForward, FloatAndStaging) {
  DistOptions d;
  for (const Options& o : variants()) check_forward<float>({2, 131, 131, kHeads, 6, 32}, o, d);
  d.staging = dist::Staging::host;
  d.sharding = Sharding::zigzag;
  check_forward<double>({1, 45, 45, kHeads, 3, 16}, variants()[3], d);
}

TEST(UlyssesForward, SinksMatchReference) {
  Options o;
  o.causal = true;
  for (int h = 0; h < kHeads; ++h) o.sinks.push_back(0.5 * h - 2.0);
  check_forward<double>({1, 37, 41, kHeads, 4, 8}, o, DistOptions{});
  o.causal = false;
  check_forward<float>({2, 23, 23, kHeads, 12, 16}, o, DistOptions{});
}

TEST(UlyssesForward, AlibiMatchesReference) {
  // Each rank's heads take their own slopes, whether a block holds whole GQA groups or not.
  Options o;
  for (int h = 0; h < kHeads; ++h) o.alibi_slopes.push_back(0.1 * h);
  for (bool causal : {false, true}) {
    o.causal = causal;
    check_forward<double>({1, 37, 41, kHeads, 4, 8}, o, DistOptions{});
    check_forward<double>({2, 29, 29, kHeads, 3, 8}, o, DistOptions{});
  }
  o.sinks.assign(kHeads, 0.5);
  check_forward<float>({2, 23, 23, kHeads, 12, 16}, o, DistOptions{});
}

TEST(UlyssesForward, WithoutLse) {
  const std::uint64_t seed = shared_seed();
  const Shape s{1, 29, 29, kHeads, 4, 8};
  Problem<double> g(s, seed);
  const Problem<double> ref = reference_of(g, variants()[1]);
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  const SequenceLayout l(s.Nq, P, Sharding::contiguous);
  const View4<double> q = shard(g.q, l, rank, "q"), k = shard(g.k, l, rank, "k"), v = shard(g.v, l, rank, "v");
  View4<double> o("o", 1, l.local_length(rank), s.Hq, s.D);
  poison(o);
  dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), q, kv::dense(k, v), o, variants()[1],
                  with_scheme(dist::Scheme::ulysses));
  std::vector<double> mine, theirs;
  pair_rows(o, ref.o, l, rank, mine, theirs);
  const Errors e = compare(mine, theirs);
  EXPECT_FALSE(e.nan_mismatch);
  EXPECT_LE(e.max_abs, kDoubleTol);
}

TEST(UlyssesForward, BytesSent) {
  // Dense, contiguous, N = 8 P: to every other rank r, this rank's 8 positions of r's query heads
  // (q) and KV heads (k, v), and r's 8 positions of this rank's query heads (o, lse).
  const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
  const Shape s{1, 8 * P, 8 * P, kHeads, 4, 16};
  Problem<double> g(s, shared_seed());
  const HeadShardedRun<double> r = run_ulysses(MPI_COMM_WORLD, g, Options{}, DistOptions{});
  const auto kv_heads = dist::detail::kv_ranges(kHeads, 4, P);
  const std::int64_t row = 16 * sizeof(double), q_heads = kHeads / P;
  std::int64_t expected = 0;
  for (int to = 0; to < P; ++to)
    if (to != rank) expected += 8 * (2 * q_heads * row + q_heads * sizeof(double) + 2 * kv_heads[to].count * row);
  EXPECT_EQ(r.stats.bytes_sent, expected);
}

// Deterministic forward: the bits of one rank (MPI_COMM_SELF) on every rank count and sharding.
template <class T>
void check_forward_invariance(const Shape& s, const Options& opt, std::int64_t chunk) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(describe(s, opt) + " chunk=" + std::to_string(chunk) + " seed=" + std::to_string(seed));
  DistOptions d;
  d.deterministic = true;
  d.chunk = chunk;
  Problem<T> g(s, seed);
  const HeadShardedRun<T> one = run_ulysses(MPI_COMM_SELF, g, opt, d);
  if (std::is_same<T, double>::value)
    expect_shard_close(one.o, one.lse, reference_of(g, opt), one.q_layout, 0, kDoubleTol, "one rank");
  for (MPI_Comm comm : prefixes()) {
    if (comm == MPI_COMM_NULL) continue;
    for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
      DistOptions dd = d;
      dd.sharding = sh;
      const HeadShardedRun<T> r = run_ulysses(comm, g, opt, dd);
      expect_shard_bitwise(r.o, r.lse, one.o, one.lse, r.q_layout, rank_of(comm),
                           "P=" + std::to_string(size_of(comm)) + " " + dist::name(sh));
    }
    MPI_Comm_free(&comm);
  }
}

TEST(Deterministic, UlyssesForwardBitwiseEqualForEveryRankCount) {
  for (const Options& o : variants()) {
    check_forward_invariance<double>({1, 77, 77, kHeads, 2, 16}, o, 16);
    check_forward_invariance<double>({2, 40, 40, kHeads, 12, 8}, o, 7);
    check_forward_invariance<float>({1, 50, 50, kHeads, 3, 32}, o, 12);
  }
}

template <class T>
LocalGrads<T> run_ulysses_backward(MPI_Comm comm, const Grads<T>& g, const Options& opt, const DistOptions& d,
                                   const BackwardOptions& b = {}) {
  return sharded_backward(comm, g, d, [&](const ShardedGrads<T>& x, LocalGrads<T>& r) {
    r.stats = dist::attention_backward(comm, Kokkos::DefaultExecutionSpace(), x.q, kv::dense(x.k, x.v), x.o,
                                               x.lse, x.dout, r.dq, r.dk, r.dv, opt, b, with_scheme(dist::Scheme::ulysses, d));
  });
}

// The traffic model (dist/hybrid_traffic.hpp) is what the calls send: forward and backward, GQA
// ratios with KV heads sharded and shared, uneven and crossed lengths, both shardings, float and
// double, deterministic mode.
template <class T>
void expect_traffic(const Shape& s, const DistOptions& d) {
  SCOPED_TRACE(describe(s, Options{}) + " sharding=" + dist::name(d.sharding) +
               " deterministic=" + std::to_string(d.deterministic));
  Grads<T> g(s, shared_seed(), Options{});
  const DistOptions ud = with_scheme(dist::Scheme::ulysses, d);
  EXPECT_EQ(run_ulysses(MPI_COMM_WORLD, g.p, Options{}, d).stats.bytes_sent,
            modelled_sent(s, sizeof(T), Options{}, ud, dist::Pass::forward));
  EXPECT_EQ(run_ulysses_backward(MPI_COMM_WORLD, g, Options{}, d).stats.bytes_sent,
            modelled_sent(s, sizeof(T), Options{}, ud, dist::Pass::backward));
}

TEST(UlyssesTraffic, BytesSentEqualTheModel) {
  for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
    DistOptions d;
    d.sharding = sh;
    for (int hkv : kKvHeads) expect_traffic<double>({2, 29, 29, kHeads, hkv, 8}, d);
    expect_traffic<float>({1, 23, 41, kHeads, 3, 16}, d);
    expect_traffic<double>({1, 2, 2, kHeads, 2, 8}, d);
  }
  DistOptions d;
  d.deterministic = true, d.chunk = 4;
  expect_traffic<double>({1, 37, 37, kHeads, 12, 8}, d);
}

// Float runs compare with the one-rank backward in double on the same (rounded) inputs.
template <class T>
void check_backward(const Shape& s, const Options& opt, const DistOptions& d) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(describe(s, opt) + " sharding=" + dist::name(d.sharding) + " seed=" + std::to_string(seed));
  Grads<T> g(s, seed, opt);
  const LocalGrads<T> r = run_ulysses_backward(MPI_COMM_WORLD, g, opt, d);
  Grads<double> ref(s, seed, opt);
  ref.p = as_double(g.p);
  Kokkos::deep_copy(ref.dout, widened(g.dout));
  attention(Kokkos::DefaultExecutionSpace(), ref.p.q, kv::dense(ref.p.k, ref.p.v), ref.p.o, ref.p.lse, one_split(opt));
  ref.backward_one_rank(opt);
  LocalGrads<double> mine;
  mine.dq = widened(r.dq), mine.dk = widened(r.dk), mine.dv = widened(r.dv);
  mine.ql = r.ql, mine.kl = r.kl;
  expect_grads(mine, ref, rank_of(MPI_COMM_WORLD), std::is_same<T, double>::value ? kDoubleTol : 1e-5,
               "ulysses_attention_backward");
}

TEST(UlyssesBackward, DoubleMatchesOneRankForEveryGqaRatio) {
  std::vector<Options> v = variants();
  for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
    DistOptions d;
    d.sharding = sh;
    for (int hkv : kKvHeads)
      for (const Options& o : v) check_backward<double>({2, 29, 29, kHeads, hkv, 8}, o, d);
  }
}

TEST(UlyssesBackward, CrossLengthsRanksWithoutTokensFloatAndStaging) {
  DistOptions d;
  for (const Options& o : variants()) {
    check_backward<double>({1, 23, 41, kHeads, 4, 8}, o, d);
    check_backward<double>({1, 41, 23, kHeads, 3, 8}, o, d);
    for (int n : {1, 3}) check_backward<double>({1, n, n, kHeads, 2, 8}, o, d);
  }
  check_backward<float>({1, 67, 67, kHeads, 6, 32}, variants()[3], d);
  d.staging = dist::Staging::host;
  d.sharding = Sharding::zigzag;
  check_backward<double>({1, 45, 45, kHeads, 3, 16}, variants()[1], d);
}

// Deterministic backward: with whole GQA groups on each rank (Hkv % P == 0), the bits of one rank.
template <class T>
void check_backward_invariance(const Shape& s, const Options& opt, std::int64_t chunk, const BackwardOptions& b) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(describe(s, opt) + " chunk=" + std::to_string(chunk) + " dq=" + name(b.dq) +
               " seed=" + std::to_string(seed));
  DistOptions d;
  d.deterministic = true;
  d.chunk = chunk;
  Grads<T> g(s, seed, opt);
  const LocalGrads<T> one = run_ulysses_backward(MPI_COMM_SELF, g, opt, d, b);
  Grads<T> bits = g;
  bits.dq = one.dq, bits.dk = one.dk, bits.dv = one.dv;
  for (MPI_Comm comm : prefixes()) {
    if (comm == MPI_COMM_NULL) continue;
    for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
      DistOptions dd = d;
      dd.sharding = sh;
      const LocalGrads<T> r = run_ulysses_backward(comm, g, opt, dd, b);
      expect_grads_bitwise(r, bits, rank_of(comm), "P=" + std::to_string(size_of(comm)) + " " + dist::name(sh));
    }
    MPI_Comm_free(&comm);
  }
}

TEST(Deterministic, UlyssesBackwardBitwiseEqualForEveryRankCount) {
  BackwardOptions chunks, query;
  chunks.dq = DqStrategy::key_chunks;
  query.dq = DqStrategy::query_pass;
  for (const Options& o : variants()) {
    check_backward_invariance<double>({1, 77, 77, 2 * kHeads, kHeads, 16}, o, 16, BackwardOptions{});
    check_backward_invariance<double>({2, 40, 40, kHeads, kHeads, 8}, o, 7, query);
    check_backward_invariance<float>({1, 50, 50, 2 * kHeads, kHeads, 32}, o, 12, chunks);
  }
}

}  // namespace
}  // namespace test
}  // namespace kattn
