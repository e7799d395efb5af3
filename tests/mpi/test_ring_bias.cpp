// A bias tensor (Options::bias) on the ring: each rank passes its query rows of the bias over every
// key of the sequence, [B or 1, Hq or 1, nq, Nk], and gets its rows of dbias. Forward, backward and
// dbias (every broadcast, a bf16 bias) against one rank's calls on the whole bias at 1e-12, with
// causal masks, windows and softcap, both shardings; the deterministic mode bitwise one rank's; and
// the refusals (a bias of the local keys, a scheme that would move N^2 bias values, a ragged batch)
// the same on every rank.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bias_slices.hpp"
#include "dist_grads.hpp"
#include "dist_support.hpp"
#include "kattn/attention.hpp"
#include "kattn/backward.hpp"
#include "kattn/distributed/attention.hpp"
#include "kattn/ragged.hpp"
#include "kattn/score_bias.hpp"
#include "ragged_support.hpp"

namespace kattn {
namespace test {
namespace {

struct BiasCase {
  int batch = 1, heads = 1;  // the bias's: 1 or the problem's
  bool bf16_bias = false;
};

// The ring's o, lse and gradients with this rank's bias rows against one rank's with the whole bias.
void check_ring_bias(const Shape& s, Options opt, const BiasCase& bc, const DistOptions& d) {
  const std::uint64_t seed = shared_seed();
  const int rank = rank_of(MPI_COMM_WORLD);
  SCOPED_TRACE(describe(s, opt) + " bias " + std::to_string(bc.batch) + "x" + std::to_string(bc.heads) +
               (bc.bf16_bias ? " bf16" : "") + " " + dist::name(d.sharding) +
               (d.deterministic ? " deterministic" : "") + " seed=" + std::to_string(seed));
  View4<double> bias("bias", bc.batch, bc.heads, s.Nq, s.Nk);
  fill_normal(bias, seed + 11);
  View4<bf16> bias16("bias16", bc.batch, bc.heads, s.Nq, s.Nk);
  if (bc.bf16_bias) {  // the same values on both sides: bias holds bf16 values
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bias);
    auto h16 = Kokkos::create_mirror_view(bias16);
    for (std::size_t i = 0; i < h.span(); ++i) h16.data()[i] = narrow<bf16>(h.data()[i]);
    Kokkos::deep_copy(bias16, h16);
  }
  Options whole = opt;
  whole.bias = bc.bf16_bias ? score_bias(bias16) : score_bias(bias);
  Grads<double> g(s, seed, whole);
  View4<double> dbias("dbias", bc.batch, bc.heads, s.Nq, s.Nk);
  BackwardOptions one;
  one.dbias = score_bias_gradient(dbias);
  if (d.deterministic) {  // one rank's deterministic ring: its o and gradients
    DistOptions alone = d;
    alone.sharding = Sharding::contiguous;
    const auto space = Kokkos::DefaultExecutionSpace();
    dist::attention(MPI_COMM_SELF, space, g.p.q, kv::dense(g.p.k, g.p.v), g.p.o, g.p.lse, whole, alone);
    dist::attention_backward(MPI_COMM_SELF, space, g.p.q, kv::dense(g.p.k, g.p.v), g.p.o, g.p.lse, g.dout, g.dq, g.dk,
                             g.dv, whole, one, alone);
    Kokkos::fence();
  } else {
    g.backward_one_rank(whole, one);
  }
  const SequenceLayout ql = dist::sharded_layout(s.Nq, size_of(MPI_COMM_WORLD), d);
  const View4<double> my_bias = bias_rows(bias, ql, rank);
  const View4<bf16> my_bias16 = bias_rows(bias16, ql, rank);
  View4<double> my_dbias("my_dbias", bc.batch, bc.heads, ql.local_length(rank), s.Nk);
  poison(my_dbias);
  Options mine = opt;
  mine.bias = bc.bf16_bias ? score_bias(my_bias16) : score_bias(my_bias);
  BackwardOptions b;
  b.dbias = score_bias_gradient(my_dbias);
  View4<double> o;
  const LocalGrads<double> r =
      sharded_backward(MPI_COMM_WORLD, g, d, [&](const ShardedGrads<double>& x, LocalGrads<double>& out) {
        o = View4<double>("o", s.B, x.q.extent(1), s.Hq, s.D);
        View3<double> lse("lse", s.B, s.Hq, x.q.extent(1));
        dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), x.q, kv::dense(x.k, x.v), o, lse, mine, d);
        out.stats = dist::attention_backward(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), x.q, kv::dense(x.k, x.v),
                                             x.o, x.lse, x.dout, out.dq, out.dk, out.dv, mine, b, d);
      });
  const bool bits = d.deterministic;
  EXPECT_LE(max_abs_diff(o, shard(g.p.o, ql, rank, "o"), bits), bits ? 0.0 : kDoubleTol) << "o";
  EXPECT_LE(max_abs_diff(my_dbias, bias_rows(dbias, ql, rank), bits), bits ? 0.0 : kDoubleTol) << "dbias";
  if (bits)
    expect_grads_bitwise(r, g, rank, "ring with a bias");
  else
    expect_grads(r, g, rank, kDoubleTol, "ring with a bias");
}

std::vector<Options> variants() {
  std::vector<Options> v(4);
  v[1].causal = true;
  v[2].causal = true, v[2].window_left = 7, v[2].softcap = 4.0;
  v[3].window_left = 5, v[3].window_right = 3;
  return v;
}

TEST(RingBias, MatchesOneRankForEveryBroadcast) {
  const std::vector<BiasCase> biases = {{2, 4}, {1, 4}, {2, 1}, {1, 1}, {2, 4, true}};
  for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
    DistOptions d;
    d.sharding = sh;
    for (const Options& o : variants())
      for (const BiasCase& bc : biases) check_ring_bias({2, 37, 37, 4, 2, 16}, o, bc, d);
    check_ring_bias({2, 23, 61, 4, 2, 8}, variants()[1], {1, 4}, d);
    check_ring_bias({2, 61, 23, 4, 2, 8}, variants()[0], {2, 1}, d);
  }
}

TEST(RingBias, DeterministicBitsAreOneRanks) {
  for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
    DistOptions d;
    d.sharding = sh, d.deterministic = true, d.chunk = 8;
    for (const Options& o : {variants()[0], variants()[1], variants()[2]}) {
      check_ring_bias({2, 45, 45, 4, 2, 8}, o, {2, 4}, d);
      check_ring_bias({2, 45, 45, 4, 2, 8}, o, {1, 1}, d);
    }
  }
}

TEST(DistErrors, RingBiasOfTheWrongShapeOrScheme) {
  const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
  const SequenceLayout l = dist::layout_of(30, P, DistOptions{});
  const std::size_t n = l.local_length(rank);
  View4<double> q("q", 1, n, 2, 8), k("k", 1, n, 1, 8), v("v", 1, n, 1, 8), o("o", 1, n, 2, 8);
  fill_normal(q, 1), fill_normal(k, 2), fill_normal(v, 3);
  const auto space = Kokkos::DefaultExecutionSpace();
  // Not the sequence's 30 keys (every rank's rows wrong: the lowest rank's error everywhere).
  View4<double> wrong_keys("bias", 1, 2, n, 29), all_keys("bias", 1, 2, n, 30);
  Options opt;
  opt.bias = score_bias(wrong_keys);
  const std::string n0 = std::to_string(l.local_length(0));
  expect_same_error([&] { dist::attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, opt); },
                    "bias: expected [1 or 1, 2 or 1, " + n0 + ", 30], got [1, 2, " + n0 + ", 29]");
  opt.bias = score_bias(all_keys);
  expect_same_error(
      [&] { dist::attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, opt, with_scheme(dist::Scheme::grid)); },
      "bias: the distributed calls take one with scheme ring, ulysses, hybrid or sharded-kv, got grid");
  View3<double> q3("q3", n, 2, 8), k3("k3", n, 1, 8), o3("o3", n, 2, 8);
  const std::int64_t ln = static_cast<std::int64_t>(n);
  const auto layout = make_ragged_layout<TestMemory>(indptr_view({0, ln}), indptr_view({0, ln}));
  expect_same_error([&] { dist::attention(MPI_COMM_WORLD, space, q3, kv::ragged(k3, k3, layout), o3, opt); },
                    "bias: not supported with a ragged batch over MPI");
}

}  // namespace
}  // namespace test
}  // namespace kattn
