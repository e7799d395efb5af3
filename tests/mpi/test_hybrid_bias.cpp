// A bias tensor (Options::bias) under hybrid (head sharding inside groups of U ranks, the ring
// across the P / U groups): each rank passes the bias of the scores it computes, its Hq/U query
// heads over its group's query rows (the ring's layout over the groups, in its local order) and
// every key in global order, [B or 1, Hq/U or 1, group rows, Nk], and gets the same slice of dbias
// (a head dim of 1: the sum over its heads). o, lse, dq, dk, dv and dbias against one rank's calls
// on the whole bias at 1e-12 on every grid U x R, with causal masks, windows, softcap, GQA (a
// rank's heads in several blocks too), both shardings, every broadcast and a bf16 bias; the
// deterministic mode bitwise one rank's (bf16 storage too); and the refusals of wrong shapes the
// same on every rank.
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

// The group sizes U that divide the rank count: every grid U x R.
std::vector<int> grid_sizes() {
  std::vector<int> u;
  for (int s = 1; s <= size_of(MPI_COMM_WORLD); ++s)
    if (size_of(MPI_COMM_WORLD) % s == 0) u.push_back(s);
  return u;
}

// Where this rank's scores lie in the whole problem under hybrid: its group's query rows (`rows`,
// the ring's layout over the groups, at rank `group`) and its query heads [first, first + count).
struct HybridScores {
  SequenceLayout rows;
  int group = 0, first = 0, count = 0;
};

HybridScores scores_of_rank(const Shape& s, const DistOptions& d) {
  const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD), U = d.ulysses_size;
  return {dist::sharded_layout(s.Nq, P / U, d), rank / U, (rank % U) * (s.Hq / U), s.Hq / U};
}

// This rank's slice of a bias-shaped array: its heads (or the one head, or their sum) over its
// group's rows.
View4<double> slice_of(const View4<double>& whole, const HybridScores& at, bool per_head, bool sum = false) {
  return bias_rows(per_head || sum ? heads_of(whole, at.first, at.count, sum) : whole, at.rows, at.group);
}

struct BiasCase {
  int batch = 1;
  bool per_head = true;  // [Bb, Hq/U, ...] per rank; false: a head dim of 1
  bool bf16_bias = false;
};

// hybrid's o, lse and gradients with this rank's slice of the bias against one rank's with the
// whole: the local door, or in deterministic mode the deterministic ring (whose bits hybrid's are).
void check_hybrid_bias(const Shape& s, const Options& opt, const BiasCase& bc, DistOptions d) {
  d.scheme = dist::Scheme::hybrid;
  const std::uint64_t seed = shared_seed();
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  if (s.Hq % d.ulysses_size != 0) return;
  if (d.deterministic && s.Hkv % d.ulysses_size != 0) return;  // refused: parts of GQA groups
  const HybridScores at = scores_of_rank(s, d);
  SCOPED_TRACE(describe(s, opt) + " U=" + std::to_string(d.ulysses_size) + " bias batch " + std::to_string(bc.batch) +
               (bc.per_head ? " per head" : " 1 head") + (bc.bf16_bias ? " bf16" : "") + " " + dist::name(d.sharding) +
               (d.deterministic ? " deterministic" : "") + " seed=" + std::to_string(seed));
  // The whole bias of every head (a one-head bias repeated), the same values in bf16 when bf16_bias.
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
  if (d.deterministic) {  // the deterministic ring on one rank: its o and gradients
    DistOptions alone = d;
    alone.scheme = dist::Scheme::ring, alone.ulysses_size = 0, alone.sharding = Sharding::contiguous;
    const auto space = Kokkos::DefaultExecutionSpace();
    dist::attention(MPI_COMM_SELF, space, g.p.q, kv::dense(g.p.k, g.p.v), g.p.o, g.p.lse, whole, alone);
    dist::attention_backward(MPI_COMM_SELF, space, g.p.q, kv::dense(g.p.k, g.p.v), g.p.o, g.p.lse, g.dout, g.dq, g.dk,
                             g.dv, whole, one, alone);
    Kokkos::fence();
  } else {
    g.backward_one_rank(whole, one);
  }
  const View4<double> my_bias = slice_of(drawn, at, bc.per_head);
  View4<double> my_dbias("my_dbias", bc.batch, bc.per_head ? at.count : 1, at.rows.local_length(at.group), s.Nk);
  poison(my_dbias);
  Options mine = opt;
  const View4<bf16> my_bias16 = narrowed_bf16(my_bias);  // held: a ScoreBias does not own its values
  mine.bias = bc.bf16_bias ? score_bias(my_bias16) : score_bias(my_bias);
  BackwardOptions b;
  b.dbias = score_bias_gradient(my_dbias);
  const SequenceLayout ql = dist::hybrid_layout(s.Nq, P, d), kl = dist::hybrid_layout(s.Nk, P, d);
  View4<double> o;
  View3<double> lse;
  const LocalGrads<double> r =
      sharded_backward(MPI_COMM_WORLD, g, ql, kl, [&](const ShardedGrads<double>& x, LocalGrads<double>& out) {
        o = View4<double>("o", s.B, x.q.extent(1), s.Hq, s.D);
        lse = View3<double>("lse", s.B, s.Hq, x.q.extent(1));
        dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), x.q, kv::dense(x.k, x.v), o, lse, mine, d);
        out.stats = dist::attention_backward(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), x.q, kv::dense(x.k, x.v),
                                             x.o, x.lse, x.dout, out.dq, out.dk, out.dv, mine, b, d);
      });
  // Bitwise in deterministic mode where no sum over heads is involved.
  const bool bits = d.deterministic;
  EXPECT_LE(max_abs_diff(o, shard(g.p.o, ql, rank, "o"), bits), bits ? 0.0 : kDoubleTol) << "o";
  EXPECT_LE(max_abs_diff(lse, shard_lse(g.p.lse, ql, rank), bits), bits ? 0.0 : kDoubleTol) << "lse";
  const bool dbias_bits = bits && bc.per_head;
  EXPECT_LE(max_abs_diff(my_dbias, slice_of(dbias, at, bc.per_head, !bc.per_head), dbias_bits),
            dbias_bits ? 0.0 : kDoubleTol)
      << "dbias";
  if (bits)
    expect_grads_bitwise(r, g, rank, "hybrid with a bias");
  else
    expect_grads(r, g, rank, kDoubleTol, "hybrid with a bias");
}

std::vector<Options> variants() {
  std::vector<Options> v(4);
  v[1].causal = true;
  v[2].causal = true, v[2].window_left = 7, v[2].softcap = 4.0;
  v[3].window_left = 5, v[3].window_right = 3;
  return v;
}

TEST(HybridBias, MatchesOneRankForEveryBroadcast) {
  const std::vector<BiasCase> biases = {{2, true}, {1, true}, {2, false}, {1, false}, {2, true, true}};
  for (int U : grid_sizes())
    for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
      DistOptions d;
      d.sharding = sh, d.ulysses_size = U;
      for (const Options& o : variants())
        for (const BiasCase& bc : biases) check_hybrid_bias({2, 37, 37, 12, 4, 8}, o, bc, d);  // GQA 3:1
      // GQA 4:1 over 2 or 4 members: a rank's heads in two blocks (a head-broadcast dbias summed
      // over both).
      check_hybrid_bias({2, 29, 29, 12, 3, 8}, variants()[1], {2, false}, d);
      check_hybrid_bias({2, 29, 29, 12, 3, 8}, variants()[2], {1, true}, d);
      check_hybrid_bias({2, 23, 61, 12, 2, 8}, variants()[1], {1, true}, d);
      check_hybrid_bias({2, 61, 23, 12, 12, 8}, variants()[0], {2, false}, d);
    }
}

TEST(HybridBias, DeterministicBitsAreOneRanks) {
  for (int U : grid_sizes())
    for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
      DistOptions d;
      d.sharding = sh, d.ulysses_size = U, d.deterministic = true, d.chunk = 8;
      for (const Options& o : {variants()[0], variants()[1], variants()[2]}) {
        check_hybrid_bias({2, 45, 45, 12, 12, 8}, o, {2, true}, d);
        check_hybrid_bias({2, 45, 45, 12, 4, 8}, o, {1, false}, d);
      }
    }
}

// bf16 q, k, v, o: each rank's slice of the bias gives o with the bits of the deterministic ring's
// on one rank with the whole bias, on every grid.
TEST(HybridBias, Bf16StorageDeterministicBitsAreOneRanks) {
  const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
  const Shape s{2, 45, 45, 12, 12, 16};
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE("bf16 seed=" + std::to_string(seed));
  Problem16<bf16> p(s, seed);
  View4<double> bias("bias", 1, s.Hq, s.Nq, s.Nk);
  fill_normal(bias, seed + 7);
  DistOptions d;  // the deterministic ring on one rank first
  d.deterministic = true, d.chunk = 8;
  Options whole;
  whole.causal = true;
  whole.bias = score_bias(bias);
  const auto space = Kokkos::DefaultExecutionSpace();
  View4<bf16> o1("o1", s.B, s.Nq, s.Hq, s.D);
  dist::attention(MPI_COMM_SELF, space, p.q, kv::dense(p.k, p.v), o1, whole, d);
  d.scheme = dist::Scheme::hybrid;
  for (int U : grid_sizes()) {
    d.ulysses_size = U;
    SCOPED_TRACE("U=" + std::to_string(U));
    const SequenceLayout l = dist::hybrid_layout(s.Nq, P, d);
    const View4<bf16> q = shard(p.q, l, rank, "q"), k = shard(p.k, l, rank, "k"), v = shard(p.v, l, rank, "v");
    View4<bf16> o("o", s.B, q.extent(1), s.Hq, s.D);
    Options mine = whole;
    const View4<double> my_bias = slice_of(bias, scores_of_rank(s, d), true);
    mine.bias = score_bias(my_bias);
    dist::attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, mine, d);
    Kokkos::fence();
    EXPECT_EQ(max_abs_diff(o, shard(o1, l, rank, "o1"), true), 0.0) << "o differs from one rank's";
  }
}

TEST(DistErrors, HybridBiasOfTheWrongShape) {
  const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
  const int U = P % 2 == 0 ? 2 : 1, H = 2 * U;
  DistOptions d = with_scheme(dist::Scheme::hybrid);
  d.ulysses_size = U;
  const SequenceLayout l = dist::hybrid_layout(30, P, d);
  const std::size_t n = l.local_length(rank);
  View4<double> q("q", 1, n, H, 8), k("k", 1, n, U, 8), v("v", 1, n, U, 8), o("o", 1, n, H, 8);
  fill_normal(q, 1), fill_normal(k, 2), fill_normal(v, 3);
  const auto space = Kokkos::DefaultExecutionSpace();
  const std::string rows = std::to_string(dist::sharded_layout(30, P / U, d).local_length(0));
  const std::string n0 = std::to_string(l.local_length(0));
  // The ring's shape (every head, this rank's own rows) instead of its heads over its group's rows.
  View4<double> ring_shape("bias", 1, H, n, 30);
  Options opt;
  opt.bias = score_bias(ring_shape);
  if (U > 1)
    expect_same_error(
        [&] { dist::attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, opt, d); },
        "bias: expected [1 or 1, 2 or 1, " + rows + ", 30], got [1, " + std::to_string(H) + ", " + n0 + ", 30]");
  // A dbias of another shape than the bias.
  const std::int64_t mine_rows = dist::sharded_layout(30, P / U, d).local_length(rank / U);
  View4<double> mine("bias", 1, 2, mine_rows, 30), other("dbias", 1, 1, mine_rows, 30);
  opt.bias = score_bias(mine);
  BackwardOptions b;
  b.dbias = score_bias_gradient(other);
  View3<double> lse("lse", 1, H, n);
  View4<double> dq("dq", 1, n, H, 8), dk("dk", 1, n, U, 8), dv("dv", 1, n, U, 8);
  expect_same_error(
      [&] { dist::attention_backward(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, lse, o, dq, dk, dv, opt, b, d); },
      "dbias: expected the bias's shape [1, 2, " + rows + ", 30], got [1, 1, " + rows + ", 30]");
  // The grid's blocks are not refused by shape but by scheme.
  expect_same_error(
      [&] { dist::attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, opt, with_scheme(dist::Scheme::grid)); },
      "bias: the distributed calls take one with scheme ring, ulysses, hybrid or sharded-kv, got grid");
}

}  // namespace
}  // namespace test
}  // namespace kattn
