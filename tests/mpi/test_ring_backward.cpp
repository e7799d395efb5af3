// Ring attention's backward against the one-rank backward (kattn::attention_backward on the whole sequence,
// itself tested against the textbook backward): dq on the query shards, dk and dv on the key
// shards, at 1e-12 in double, for both shardings, the variants, GQA and lengths that do not divide
// by the rank count, windows of every size; the deterministic mode bitwise the same for every rank
// count; bytes sent against the traffic model.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

#include "dist_grads.hpp"
#include "dist_support.hpp"
#include "kattn/backward.hpp"
#include "kattn/distributed/attention.hpp"
#include "kattn/distributed/traffic.hpp"
#include "kattn/attention.hpp"

namespace kattn {
namespace test {
namespace {

template <class T>
LocalGrads<T> run_ring_backward(MPI_Comm comm, const Grads<T>& g, const Options& opt, const DistOptions& d,
                                const BackwardOptions& b = {}) {
  return sharded_backward(comm, g, d, [&](const ShardedGrads<T>& x, LocalGrads<T>& r) {
    r.stats = dist::attention_backward(comm, Kokkos::DefaultExecutionSpace(), x.q, kv::dense(x.k, x.v), x.o, x.lse,
                                            x.dout, r.dq, r.dk, r.dv, opt, b, d);
  });
}

template <class T>
void check_backward(const Shape& s, const Options& opt, const DistOptions& d) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(describe(s, opt) + " sharding=" + dist::name(d.sharding) + " seed=" + std::to_string(seed));
  Grads<T> g(s, seed, opt);
  g.backward_one_rank(opt);
  const LocalGrads<T> r = run_ring_backward(MPI_COMM_WORLD, g, opt, d);
  expect_grads(r, g, rank_of(MPI_COMM_WORLD), std::is_same<T, double>::value ? kDoubleTol : 1e-5, "ring_attention_backward");
}

std::vector<Options> variants() {
  std::vector<Options> v = backward_variants();
  v.resize(6);
  v[5].causal = true, v[5].block_q = 5, v[5].block_k = 3;
  return v;
}

TEST(RingBackward, DoubleMatchesOneRankBackward) {
  const std::vector<Shape> shapes = {{1, 1, 1, 1, 1, 4},   {2, 37, 37, 2, 1, 16}, {1, 53, 53, 4, 2, 8},
                                     {1, 61, 23, 4, 2, 8}, {1, 23, 61, 8, 1, 8},  {1, 3, 3, 2, 1, 8}};
  for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
    DistOptions d;
    d.sharding = sh;
    for (const Shape& s : shapes)
      for (const Options& o : variants()) check_backward<double>(s, o, d);
  }
}

TEST(RingBackward, GqaFloatAndStaging) {
  for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
    DistOptions d;
    d.sharding = sh;
    for (int ratio : {1, 2, 8}) check_backward<double>({2, 29, 29, 2 * ratio, 2, 24}, variants()[1], d);
    check_backward<float>({1, 67, 67, 4, 2, 32}, variants()[3], d);
    d.staging = dist::Staging::host;
    check_backward<double>({1, 45, 45, 4, 2, 16}, variants()[1], d);
  }
}

// With sinks: the gradients of the one-rank backward, and the sinks' gradient (an exact sum over
// every rank's rows) the same bits at every rank count, on the ring and under head sharding.
TEST(RingBackward, SinksMatchOneRankWithTheSameGradientBits) {
  Options o;
  o.causal = true;
  o.sinks = {1.0, -2.0, 0.5, -std::numeric_limits<double>::infinity()};
  const Shape s{2, 37, 37, 4, 2, 16};
  Grads<double> g(s, shared_seed(), o);
  const BackwardInfo one = g.backward_one_rank(o);
  ASSERT_EQ(one.dsinks.size(), 4u);
  const int P = size_of(MPI_COMM_WORLD);
  for (dist::Scheme scheme : {dist::Scheme::ring, dist::Scheme::ulysses}) {
    if (scheme == dist::Scheme::ulysses && s.Hkv % P != 0) continue;  // whole KV heads per rank
    for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
      SCOPED_TRACE(std::string(dist::name(scheme)) + " " + dist::name(sh));
      DistOptions d = with_scheme(scheme, DistOptions{});
      d.sharding = sh;
      const LocalGrads<double> r = run_ring_backward(MPI_COMM_WORLD, g, o, d);
      expect_grads(r, g, rank_of(MPI_COMM_WORLD), kDoubleTol, "backward with sinks");
      EXPECT_EQ(r.stats.dsinks, one.dsinks);
    }
  }
}

// With ALiBi: the ring's and Ulysses' gradients those of the one-rank backward on every sharding
// (Ulysses' ranks take the slopes of their own heads).
TEST(RingBackward, AlibiMatchesOneRank) {
  for (bool causal : {false, true}) {
    Options o;
    o.causal = causal;
    o.alibi_slopes = {0.5, 0.0, 0.25, 1.5};
    const Shape s{2, 37, 37, 4, 2, 16};
    Grads<double> g(s, shared_seed(), o);
    g.backward_one_rank(o);
    const int P = size_of(MPI_COMM_WORLD);
    for (dist::Scheme scheme : {dist::Scheme::ring, dist::Scheme::ulysses}) {
      if (scheme == dist::Scheme::ulysses && s.Hq % P != 0) continue;
      for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
        SCOPED_TRACE(std::string(dist::name(scheme)) + " " + dist::name(sh) + (causal ? " causal" : ""));
        DistOptions d = with_scheme(scheme, DistOptions{});
        d.sharding = sh;
        const LocalGrads<double> r = run_ring_backward(MPI_COMM_WORLD, g, o, d);
        expect_grads(r, g, rank_of(MPI_COMM_WORLD), kDoubleTol, "backward with ALiBi");
      }
    }
  }
}

TEST(RingBackward, BytesSent) {
  // Dense: K and V out to P - 1 ranks, dK and dV back from them.
  const int P = size_of(MPI_COMM_WORLD);
  const Shape s{1, 8 * P, 8 * P, 4, 2, 16};
  Grads<double> g(s, shared_seed(), Options{});
  const LocalGrads<double> r = run_ring_backward(MPI_COMM_WORLD, g, Options{}, DistOptions{});
  const std::int64_t shard = 8 * 2 * 16 * sizeof(double);
  EXPECT_EQ(r.stats.bytes_sent, 4 * shard * (P - 1));
}

// Windows of every size against the shard length, with and without a causal mask, both modes:
// the gradients as on one rank, and exactly the bytes of the traffic model sent.
TEST(RingBackward, WindowsMatchOneRankAndSendOnlyWhatIsSeen) {
  std::vector<Options> w(8);
  w[0].window_left = 0, w[0].window_right = 0;
  w[1].window_left = 1, w[1].window_right = 1;
  w[2].window_left = 6, w[2].window_right = 2;
  w[3].window_left = 45, w[3].window_right = 0;
  w[4].window_left = -1, w[4].window_right = 3;
  w[5].window_left = 4, w[5].window_right = -1;
  w[6].causal = true, w[6].window_left = 1;
  w[7].causal = true, w[7].window_left = 30;
  const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
  const std::vector<Shape> shapes = {{2, 16 * P + 3, 16 * P + 3, 4, 2, 8}, {1, 11 * P, 23 * P + 1, 8, 1, 8},
                                     {1, 23 * P + 1, 11 * P, 2, 2, 8},     {1, 3, 3, 2, 1, 8}};
  for (bool det : {false, true})
    for (Sharding sh : {Sharding::contiguous, Sharding::zigzag})
      for (const Shape& s : shapes)
        for (const Options& o : w) {
          DistOptions d;
          d.sharding = sh, d.deterministic = det, d.chunk = 4;
          const std::uint64_t seed = shared_seed();
          SCOPED_TRACE(describe(s, o) + " sharding=" + dist::name(sh) + " deterministic=" + std::to_string(det) +
                       " seed=" + std::to_string(seed));
          Grads<double> g(s, seed, o);
          g.backward_one_rank(o);
          const LocalGrads<double> r = run_ring_backward(MPI_COMM_WORLD, g, o, d);
          expect_grads(r, g, rank, kDoubleTol, "windowed ring_attention_backward");
          EXPECT_EQ(r.stats.bytes_sent, modelled_sent(s, sizeof(double), o, d, dist::Pass::backward));
        }
}

template <class T>
void check_backward_invariance(const Shape& s, const Options& opt, std::int64_t chunk, const BackwardOptions& b) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(describe(s, opt) + " chunk=" + std::to_string(chunk) + " dq=" + name(b.dq) +
               " seed=" + std::to_string(seed));
  // The forward outputs must be the deterministic mode's too; one rank on MPI_COMM_SELF.
  DistOptions d;
  d.deterministic = true;
  d.chunk = chunk;
  Grads<T> g(s, seed, opt);
  {
    const SequenceLayout one(s.Nq, 1, Sharding::contiguous, chunk);
    dist::attention(MPI_COMM_SELF, Kokkos::DefaultExecutionSpace(), g.p.q, kv::dense(g.p.k, g.p.v), g.p.o, g.p.lse, opt, d);
  }
  // One rank, deterministic: the bits every run must reproduce; close to the one-rank backward.
  const LocalGrads<T> one = run_ring_backward(MPI_COMM_SELF, g, opt, d, b);
  Grads<T> ref = g;
  ref.dq = View4<T>("dq", s.B, s.Nq, s.Hq, s.D);
  ref.dk = View4<T>("dk", s.B, s.Nk, s.Hkv, s.D);
  ref.dv = View4<T>("dv", s.B, s.Nk, s.Hkv, s.D);
  ref.backward_one_rank(opt);
  if (std::is_same<T, double>::value) expect_grads(one, ref, 0, kDoubleTol, "deterministic, one rank");
  Grads<T> bits = g;
  bits.dq = one.dq, bits.dk = one.dk, bits.dv = one.dv;
  for (MPI_Comm comm : prefixes()) {
    if (comm == MPI_COMM_NULL) continue;
    for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
      DistOptions dd = d;
      dd.sharding = sh;
      const LocalGrads<T> r = run_ring_backward(comm, g, opt, dd, b);
      expect_grads_bitwise(r, bits, rank_of(comm), "P=" + std::to_string(size_of(comm)) + " " + dist::name(sh));
    }
    MPI_Comm_free(&comm);
  }
}

TEST(Deterministic, RingBackwardBitwiseEqualForEveryRankCount) {
  std::vector<Options> v(5);
  v[1].causal = true;
  v[2].causal = true, v[2].window_left = 20, v[2].softcap = 5.0;
  v[3].window_left = 0, v[3].window_right = 0;
  v[4].window_left = 3, v[4].window_right = -1;
  BackwardOptions chunks, query;
  chunks.dq = DqStrategy::key_chunks;
  query.dq = DqStrategy::query_pass;
  for (const Options& o : v) {
    check_backward_invariance<double>({1, 77, 77, 2, 1, 16}, o, 16, chunks);
    check_backward_invariance<double>({2, 40, 40, 4, 2, 8}, o, 7, query);
    check_backward_invariance<float>({1, 50, 50, 4, 4, 32}, o, 12, BackwardOptions{});
  }
}

}  // namespace
}  // namespace test
}  // namespace kattn
