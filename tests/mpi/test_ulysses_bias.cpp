// A bias tensor (Options::bias) under ulysses (head sharding): each rank passes the bias of the
// scores it computes, its Hq/P query heads over every query row and key in global order,
// [B or 1, Hq/P or 1, Nq, Nk], and gets the same heads of dbias (a head dim of 1: the sum over its
// heads). o, dq, dk, dv and dbias against one rank's calls on the whole bias at 1e-12, with causal
// masks, windows, softcap, GQA (a rank's heads in several blocks too), both shardings, every
// broadcast and a bf16 bias; the deterministic mode bitwise one rank's (bf16 storage too); and the refusals (a bias of
// the ring's shape, a dbias of another shape) the same on every rank.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bias_slices.hpp"
#include "dist_grads.hpp"
#include "dist_support.hpp"
#include "kattn/attention.hpp"
#include "kattn/backward.hpp"
#include "kattn/distributed/attention.hpp"
#include "kattn/score_bias.hpp"
#include "storage16_support.hpp"

namespace kattn {
namespace test {
namespace {

struct BiasCase {
  int batch = 1;
  bool per_head = true;  // [Bb, Hq/P, ...] per rank; false: a head dim of 1
  bool bf16_bias = false;
};

// ulysses' o and gradients with this rank's heads of the bias against one rank's with the whole.
void check_ulysses_bias(const Shape& s, const Options& opt, const BiasCase& bc, DistOptions d) {
  d.scheme = dist::Scheme::ulysses;
  const std::uint64_t seed = shared_seed();
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  if (s.Hq % P != 0) return;
  const int count = s.Hq / P, first = rank * count;
  SCOPED_TRACE(describe(s, opt) + " bias batch " + std::to_string(bc.batch) + (bc.per_head ? " per head" : " 1 head") +
               (bc.bf16_bias ? " bf16" : "") + " " + dist::name(d.sharding) +
               (d.deterministic ? " deterministic" : "") + " seed=" + std::to_string(seed));
  // The whole bias of every head (a one-head bias repeated), in double and bf16 (the same values
  // when bf16_bias).
  View4<double> drawn("bias", bc.batch, bc.per_head ? s.Hq : 1, s.Nq, s.Nk);
  fill_normal(drawn, seed + 11);
  if (bc.bf16_bias) {
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), drawn);
    for (std::size_t i = 0; i < h.span(); ++i) h.data()[i] = widen(narrow<bf16>(h.data()[i]));
    Kokkos::deep_copy(drawn, h);
  }
  const View4<double> bias = bc.per_head ? drawn : every_head(drawn, s.Hq);
  Options whole = opt;
  whole.bias = score_bias(bias);
  Grads<double> g(s, seed, whole);
  View4<double> dbias("dbias", bc.batch, s.Hq, s.Nq, s.Nk);
  BackwardOptions one;
  one.dbias = score_bias_gradient(dbias);
  if (d.deterministic) {  // one rank's deterministic ulysses: its o and gradients
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
  // This rank's bias: its heads, or the one head they share.
  const View4<double> my_bias = bc.per_head ? heads_of(drawn, first, count) : drawn;
  const View4<bf16> my_bias16 = narrowed_bf16(my_bias);
  View4<double> my_dbias("my_dbias", bc.batch, bc.per_head ? count : 1, s.Nq, s.Nk);
  poison(my_dbias);
  Options mine = opt;
  mine.bias = bc.bf16_bias ? score_bias(my_bias16) : score_bias(my_bias);
  BackwardOptions b;
  b.dbias = score_bias_gradient(my_dbias);
  const SequenceLayout ql = dist::sharded_layout(s.Nq, P, d);
  View4<double> o;
  const LocalGrads<double> r =
      sharded_backward(MPI_COMM_WORLD, g, d, [&](const ShardedGrads<double>& x, LocalGrads<double>& out) {
        o = View4<double>("o", s.B, x.q.extent(1), s.Hq, s.D);
        View3<double> lse("lse", s.B, s.Hq, x.q.extent(1));
        dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), x.q, kv::dense(x.k, x.v), o, lse, mine, d);
        out.stats = dist::attention_backward(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), x.q, kv::dense(x.k, x.v),
                                             x.o, x.lse, x.dout, out.dq, out.dk, out.dv, mine, b, d);
      });
  // Bitwise in deterministic mode where no sum over heads is involved.
  const bool bits = d.deterministic;
  EXPECT_LE(max_abs_diff(o, shard(g.p.o, ql, rank, "o"), bits), bits ? 0.0 : kDoubleTol) << "o";
  const bool dbias_bits = bits && bc.per_head;
  EXPECT_LE(max_abs_diff(my_dbias, heads_of(dbias, first, count, !bc.per_head), dbias_bits),
            dbias_bits ? 0.0 : kDoubleTol)
      << "dbias";
  if (bits)
    expect_grads_bitwise(r, g, rank, "ulysses with a bias");
  else
    expect_grads(r, g, rank, kDoubleTol, "ulysses with a bias");
}

std::vector<Options> variants() {
  std::vector<Options> v(4);
  v[1].causal = true;
  v[2].causal = true, v[2].window_left = 7, v[2].softcap = 4.0;
  v[3].window_left = 5, v[3].window_right = 3;
  return v;
}

TEST(UlyssesBias, MatchesOneRankForEveryBroadcast) {
  const std::vector<BiasCase> biases = {{2, true}, {1, true}, {2, false}, {1, false}, {2, true, true}};
  for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
    DistOptions d;
    d.sharding = sh;
    for (const Options& o : variants())
      for (const BiasCase& bc : biases) check_ulysses_bias({2, 37, 37, 12, 4, 8}, o, bc, d);  // GQA 3:1
    check_ulysses_bias({2, 23, 61, 12, 2, 8}, variants()[1], {1, true}, d);
    check_ulysses_bias({2, 61, 23, 12, 12, 8}, variants()[0], {2, false}, d);
  }
}

TEST(UlyssesBias, DeterministicBitsAreOneRanks) {
  for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
    DistOptions d;
    d.sharding = sh, d.deterministic = true, d.chunk = 8;
    for (const Options& o : {variants()[0], variants()[1], variants()[2]}) {
      check_ulysses_bias({2, 45, 45, 12, 12, 8}, o, {2, true}, d);
      check_ulysses_bias({2, 45, 45, 12, 12, 8}, o, {1, false}, d);
    }
  }
}

// bf16 q, k, v, o: each rank's heads of the bias give o with the bits of one rank's call on the
// whole bias (deterministic mode).
TEST(UlyssesBias, Bf16StorageDeterministicBitsAreOneRanks) {
  const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
  const Shape s{2, 45, 45, 12, 12, 16};
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE("bf16 seed=" + std::to_string(seed));
  Problem16<bf16> p(s, seed);
  View4<double> bias("bias", 1, s.Hq, s.Nq, s.Nk);
  fill_normal(bias, seed + 7);
  DistOptions d = with_scheme(dist::Scheme::ulysses);
  d.deterministic = true, d.chunk = 8;
  Options whole;
  whole.causal = true;
  whole.bias = score_bias(bias);
  const auto space = Kokkos::DefaultExecutionSpace();
  View4<bf16> o1("o1", s.B, s.Nq, s.Hq, s.D);
  dist::attention(MPI_COMM_SELF, space, p.q, kv::dense(p.k, p.v), o1, whole, d);
  const SequenceLayout l = dist::layout_of(s.Nq, P, d);
  const View4<bf16> q = shard(p.q, l, rank, "q"), k = shard(p.k, l, rank, "k"), v = shard(p.v, l, rank, "v");
  View4<bf16> o("o", s.B, q.extent(1), s.Hq, s.D);
  const View4<double> my_bias = heads_of(bias, rank * (s.Hq / P), s.Hq / P);
  Options mine = whole;
  mine.bias = score_bias(my_bias);
  dist::attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, mine, d);
  Kokkos::fence();
  EXPECT_EQ(max_abs_diff(o, shard(o1, l, rank, "o1"), true), 0.0) << "o differs from one rank's";
}

TEST(DistErrors, UlyssesBiasOfTheWrongShape) {
  const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
  const SequenceLayout l = dist::layout_of(30, P, DistOptions{});
  const std::size_t n = l.local_length(rank);
  const int H = 2 * P;
  View4<double> q("q", 1, n, H, 8), k("k", 1, n, P, 8), v("v", 1, n, P, 8), o("o", 1, n, H, 8);
  fill_normal(q, 1), fill_normal(k, 2), fill_normal(v, 3);
  const auto space = Kokkos::DefaultExecutionSpace();
  const DistOptions d = with_scheme(dist::Scheme::ulysses);
  const std::string h = std::to_string(H);
  // The ring's shape (every head, this rank's rows) instead of this rank's heads over every row.
  View4<double> rows("bias", 1, H, n, 30), mine("bias", 1, 2, 30, 30), other("dbias", 1, 1, 30, 30);
  Options opt;
  opt.bias = score_bias(rows);
  const std::string n0 = std::to_string(l.local_length(0));
  if (P > 1)
    expect_same_error([&] { dist::attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, opt, d); },
                      "bias: expected [1 or 1, 2 or 1, 30, 30], got [1, " + h + ", " + n0 + ", 30]");
  // A dbias of another shape than the bias.
  opt.bias = score_bias(mine);
  BackwardOptions b;
  b.dbias = score_bias_gradient(other);
  View3<double> lse("lse", 1, H, n);
  View4<double> dq("dq", 1, n, H, 8), dk("dk", 1, n, P, 8), dv("dv", 1, n, P, 8);
  expect_same_error(
      [&] {
        dist::attention_backward(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, lse, o, dq, dk, dv, opt, b, d);
      },
      "dbias: expected the bias's shape [1, 2, 30, 30], got [1, 1, 30, 30]");
}

}  // namespace
}  // namespace test
}  // namespace kattn
