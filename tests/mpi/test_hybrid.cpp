// Hybrid attention (head sharding inside groups of U ranks, the ring across the groups) on every
// grid U x R of the rank count: forward against the float64 textbook reference, backward against
// the one-rank backward in double, and the deterministic mode bitwise equal to the ring's
// deterministic mode on one rank. Collective errors for grids and head counts that do not divide.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dist_forward.hpp"
#include "dist_grads.hpp"
#include "dist_support.hpp"
#include "kattn/attention.hpp"
#include "kattn/distributed/attention.hpp"
#include "kattn/distributed/traffic.hpp"

namespace kattn {
namespace test {
namespace {

// The group sizes U that divide the rank count: every grid U x R.
std::vector<int> grid_sizes() {
  std::vector<int> u;
  for (int s = 1; s <= size_of(MPI_COMM_WORLD); ++s)
    if (size_of(MPI_COMM_WORLD) % s == 0) u.push_back(s);
  return u;
}

template <class T>
ShardedRun<T> run_hybrid(const Problem<T>& g, const Options& opt, const DistOptions& d) {
  const int P = size_of(MPI_COMM_WORLD);
  return sharded_forward(MPI_COMM_WORLD, g, dist::hybrid_layout(g.shape.Nq, P, d),
                         dist::hybrid_layout(g.shape.Nk, P, d),
                         [&](const auto& q, const auto& k, const auto& v, const auto& o, const auto& lse) {
                           return dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), q,
                                                         kv::dense(k, v), o, lse, opt, with_scheme(dist::Scheme::hybrid, d));
                         });
}

template <class T>
void check_forward(const Shape& s, const Options& opt, const DistOptions& d) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(describe(s, opt) + " U=" + std::to_string(d.ulysses_size) + " sharding=" + dist::name(d.sharding) +
               " seed=" + std::to_string(seed));
  Problem<T> g(s, seed);
  const ShardedRun<T> r = run_hybrid(g, opt, d);
  expect_shard_close(r.o, r.lse, reference_of(g, opt), r.q_layout, rank_of(MPI_COMM_WORLD), tolerance<T>(),
                     "hybrid_attention");
}

std::vector<Options> variants() {
  std::vector<Options> v = backward_variants();
  v.resize(6);
  // ALiBi: each group's ranks take the slopes of their own heads.
  v[5].causal = true;
  for (int h = 0; h < 12; ++h) v[5].alibi_slopes.push_back(0.05 * h);
  return v;
}

TEST(HybridForward, DoubleMatchesReferenceOnEveryGrid) {
  for (int U : grid_sizes())
    for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
      DistOptions d;
      d.sharding = sh, d.ulysses_size = U;
      for (const Options& o : variants()) {
        for (int hkv : {12, 3, 1}) check_forward<double>({2, 37, 37, 12, hkv, 8}, o, d);
        check_forward<double>({1, 23, 41, 12, 4, 8}, o, d);
        check_forward<double>({1, 2, 2, 12, 2, 8}, o, d);
      }
    }
}

TEST(HybridForward, Float) {
  for (int U : grid_sizes()) {
    DistOptions d;
    d.ulysses_size = U;
    check_forward<float>({1, 131, 131, 12, 6, 32}, variants()[3], d);
  }
}

template <class T>
LocalGrads<T> run_hybrid_backward(const Grads<T>& g, const Options& opt, const DistOptions& d,
                                  const BackwardOptions& b = {}) {
  const int P = size_of(MPI_COMM_WORLD);
  return sharded_backward(MPI_COMM_WORLD, g, dist::hybrid_layout(g.p.shape.Nq, P, d),
                          dist::hybrid_layout(g.p.shape.Nk, P, d), [&](const ShardedGrads<T>& x, LocalGrads<T>& r) {
                            r.stats = dist::attention_backward(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(),
                                                                      x.q, kv::dense(x.k, x.v), x.o, x.lse, x.dout,
                                                                      r.dq, r.dk, r.dv, opt, b, with_scheme(dist::Scheme::hybrid, d));
                          });
}

TEST(HybridBackward, DoubleMatchesOneRankOnEveryGrid) {
  for (int U : grid_sizes())
    for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
      DistOptions d;
      d.sharding = sh, d.ulysses_size = U;
      for (const Options& o : variants())
        for (const Shape& s : std::vector<Shape>{{2, 29, 29, 12, 4, 8}, {1, 23, 41, 12, 3, 8}, {1, 3, 3, 12, 1, 8}}) {
          const std::uint64_t seed = shared_seed();
          SCOPED_TRACE(describe(s, o) + " U=" + std::to_string(U) + " sharding=" + dist::name(sh) +
                       " seed=" + std::to_string(seed));
          Grads<double> g(s, seed, o);
          g.backward_one_rank(o);
          expect_grads(run_hybrid_backward(g, o, d), g, rank_of(MPI_COMM_WORLD), kDoubleTol,
                       "hybrid_attention_backward");
        }
    }
}

// The traffic model (dist/hybrid_traffic.hpp: the group's head exchanges and the ring's K/V) is
// what the calls send, forward and backward, on every grid, with masks that cut the ring's traffic
// and in deterministic mode (the ring's tours).
template <class T>
void expect_traffic(const Shape& s, const Options& o, const DistOptions& d) {
  SCOPED_TRACE(describe(s, o) + " U=" + std::to_string(d.ulysses_size) + " sharding=" + dist::name(d.sharding));
  Grads<T> g(s, shared_seed(), o);
  const DistOptions hd = with_scheme(dist::Scheme::hybrid, d);
  EXPECT_EQ(run_hybrid(g.p, o, d).stats.bytes_sent, modelled_sent(s, sizeof(T), o, hd, dist::Pass::forward));
  EXPECT_EQ(run_hybrid_backward(g, o, d).stats.bytes_sent, modelled_sent(s, sizeof(T), o, hd, dist::Pass::backward));
}

TEST(HybridTraffic, BytesSentEqualTheModelOnEveryGrid) {
  for (int U : grid_sizes())
    for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
      DistOptions d;
      d.sharding = sh, d.ulysses_size = U;
      for (const Options& o : {variants()[0], variants()[1], variants()[2]}) {
        for (int hkv : {12, 3, 1}) expect_traffic<double>({2, 37, 37, 12, hkv, 8}, o, d);
        expect_traffic<float>({1, 23, 41, 12, 4, 16}, o, d);
      }
      DistOptions det = d;
      det.deterministic = true, det.chunk = 8;
      expect_traffic<double>({1, 45, 45, 12, 12, 8}, variants()[1], det);  // whole GQA groups per rank
    }
}

// Deterministic: the bits of ring attention's deterministic mode on one rank, on every grid.
TEST(Deterministic, HybridBitwiseEqualToTheDeterministicRing) {
  const Shape s{1, 77, 77, 24, 12, 16};
  for (Options o : variants()) {
    if (!o.alibi_slopes.empty()) {  // one slope for each of the 24 heads
      o.alibi_slopes.clear();
      for (int h = 0; h < s.Hq; ++h) o.alibi_slopes.push_back(0.03 * h);
    }
    const std::uint64_t seed = shared_seed();
    SCOPED_TRACE(describe(s, o) + " seed=" + std::to_string(seed));
    DistOptions d;
    d.deterministic = true, d.chunk = 16;
    Grads<double> g(s, seed, o);
    const SequenceLayout one(s.Nq, 1, Sharding::contiguous, 16);
    const ShardedRun<double> ring =
        sharded_forward(MPI_COMM_SELF, g.p, one, one,
                        [&](const auto& q, const auto& k, const auto& v, const auto& out, const auto& lse) {
                          return dist::attention(MPI_COMM_SELF, Kokkos::DefaultExecutionSpace(), q,
                                                      kv::dense(k, v), out, lse, o, d);
                        });
    const LocalGrads<double> ring_grads =
        sharded_backward(MPI_COMM_SELF, g, d, [&](const ShardedGrads<double>& x, LocalGrads<double>& r) {
          r.stats = dist::attention_backward(MPI_COMM_SELF, Kokkos::DefaultExecutionSpace(), x.q,
                                                  kv::dense(x.k, x.v), x.o, x.lse, x.dout, r.dq, r.dk, r.dv, o, {}, d);
        });
    Grads<double> bits = g;
    bits.dq = ring_grads.dq, bits.dk = ring_grads.dk, bits.dv = ring_grads.dv;
    for (int U : grid_sizes())
      for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
        DistOptions dd = d;
        dd.ulysses_size = U, dd.sharding = sh;
        const std::string what = "U=" + std::to_string(U) + " " + dist::name(sh);
        const ShardedRun<double> r = run_hybrid(g.p, o, dd);
        expect_shard_bitwise(r.o, r.lse, ring.o, ring.lse, r.q_layout, rank_of(MPI_COMM_WORLD), what);
        expect_grads_bitwise(run_hybrid_backward(g, o, dd), bits, rank_of(MPI_COMM_WORLD), what);
      }
  }
}

TEST(DistErrors, HybridGridMustDivideTheRanks) {
  const int P = size_of(MPI_COMM_WORLD);
  Problem<double> g({1, 20, 20, 4 * (P + 1), 1, 8}, 1);
  DistOptions d;
  d.ulysses_size = P + 1;
  const SequenceLayout l(20, P, Sharding::contiguous);
  expect_same_error(
      [&] {
        sharded_forward(MPI_COMM_WORLD, g, l, l,
                        [&](const auto& q, const auto& k, const auto& v, const auto& o, const auto& lse) {
                          return dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), q,
                                                        kv::dense(k, v), o, lse, Options{}, with_scheme(dist::Scheme::hybrid, d));
                        });
      },
      "ulysses_size: expected a divisor of the " + std::to_string(P) + " ranks, got " + std::to_string(P + 1));
}

TEST(DistErrors, HybridHeadsMustDivideOverTheGroup) {
  const int P = size_of(MPI_COMM_WORLD);
  if (P < 2) GTEST_SKIP() << "every head count divides over one rank";
  DistOptions d;
  d.ulysses_size = P;
  Problem<double> g({1, 20, 20, P + 1, 1, 8}, 1);
  expect_same_error([&] { run_hybrid(g, Options{}, d); },
                    "q: expected a number of heads that is a multiple of the " + std::to_string(P) +
                        " ranks sharing them (head sharding), got " + std::to_string(P + 1));
}

}  // namespace
}  // namespace test
}  // namespace kattn
