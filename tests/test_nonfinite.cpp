// NaN and Inf (README, "Hardening"): every algorithm makes NaN exactly the outputs the textbook
// algorithm (reference.cpp, in double) makes NaN, and agrees with it elsewhere:
//   - NaN in q row i: row i's o and lse. NaN in k row j: every row that sees key j (its score is
//     NaN, so its max is). NaN in v row j, element d: o[., d] of every row that sees key j, even
//     where j's weight underflows to 0 (0 * NaN = NaN), and of no row that does not see it.
//   - A row with a +Inf score: NaN (exp(s - max) = exp(inf - inf)). A row whose scores are all
//     -Inf: like a row that sees no key (o = 0, lse = -inf).
//   - Finite inputs never give NaN: large score gaps, scores near the float maximum, merges of
//     split partials far apart.
//   - The forward's NaN pattern is the same at every tile size (block_q, block_k) and split count.
//   - Backward: dQ, dK, dV are NaN exactly where the textbook backward makes them NaN, at every
//     tile size and dQ strategy, the spread through masked pairs (0 x NaN) included
//     (detail/backward_nonfinite.hpp).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "backward_support.hpp"
#include "kattn/attention.hpp"
#include "kattn/merge.hpp"
#include "support.hpp"

namespace kattn {
namespace test {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Sets one element of a rank-4 view (through a host mirror).
template <class View>
void set(const View& v, int b, int i, int h, int d, double x) {
  auto h_v = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  h_v(b, i, h, d) = static_cast<typename View::non_const_value_type>(x);
  Kokkos::deep_copy(v, h_v);
}

// The same NaN positions as the reference, and the same values elsewhere (tol, relative to
// values above 1: the lse of rows with scores of 1e5).
void expect_same_nans(const std::vector<double>& got, const std::vector<double>& want, const std::string& what,
                      double tol = kDoubleTol) {
  ASSERT_EQ(got.size(), want.size());
  int mismatches = 0, nans = 0;
  double max_abs = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    nans += std::isnan(want[i]);
    if (std::isnan(got[i]) != std::isnan(want[i])) {
      if (++mismatches <= 3)
        ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", the textbook algorithm gives " << want[i];
      continue;
    }
    if (std::isnan(want[i]) || (std::isinf(want[i]) && got[i] == want[i])) continue;
    max_abs = std::max(max_abs, std::abs(got[i] - want[i]) / std::max(1.0, std::abs(want[i])));
  }
  EXPECT_EQ(mismatches, 0) << what << ": elements whose NaN-ness differs from the textbook's (" << nans << " NaN there)";
  EXPECT_LE(max_abs, tol) << what;
}

enum class Algo { forward, splitkv2, splitkv7 };

const char* name(Algo a) { return a == Algo::forward ? "forward" : a == Algo::splitkv2 ? "splitkv(2)" : "splitkv(7)"; }

void run(Algo a, const Problem<double>& p, Options opt) {
  if (a == Algo::forward) {
    attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, one_split(opt));
  } else {
    opt.splits = a == Algo::splitkv2 ? 2 : 7;
    attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt);
  }
  Kokkos::fence();
}

// Tile sizes (query rows x keys; 0 = planned) from one tile holding every row and key down to
// a GPU's and odd ones: the NaN pattern must not depend on them.
const std::vector<std::pair<int, int>> kTiles = {{0, 0}, {64, 64}, {8, 8}, {5, 7}, {16, 4}};

// Runs every algorithm at every tile size on p (after `poke` has put its non-finite values in)
// against the textbook, o within tol.
template <class Poke>
void check_against_textbook(const Shape& s, const Options& mask, const Poke& poke, const std::string& what,
                            double tol = kDoubleTol) {
  const std::uint64_t seed = fresh_seed();
  for (const auto& tile : kTiles)
    for (Algo a : {Algo::forward, Algo::splitkv2, Algo::splitkv7}) {
      Options opt = mask;
      opt.block_q = tile.first;
      opt.block_k = tile.second;
      SCOPED_TRACE(what + " " + name(a) + " " + describe(s, opt) + " seed=" + std::to_string(seed));
      Problem<double> p(s, seed);
      poke(p);
      Problem<double> ref = reference_of(p, mask);
      run(a, p, opt);
      expect_same_nans(to_host(p.o), to_host(ref.o), "o", tol);
      expect_same_nans(to_host(p.lse), to_host(ref.lse), "lse");
    }
}

std::vector<Options> masks() {
  std::vector<Options> v(4);
  v[1].causal = true;
  v[2].window_left = 6, v[2].window_right = 2;
  v[3].causal = true, v[3].softcap = 5;
  return v;
}

const Shape kShape{2, 37, 53, 4, 2, 16};  // tiles do not divide the lengths; GQA 2
// Decode shapes (one or three queries per sequence) run the row-tiled kernel on the host.
const Shape kDecode{2, 1, 53, 8, 2, 16}, kAppend{2, 3, 70, 4, 1, 8};

TEST(NonFinite, NaNInAQueryRowMakesThatRowNaN) {
  for (const Options& opt : masks())
    check_against_textbook(kShape, opt, [](const Problem<double>& p) { set(p.q, 1, 20, 3, 5, kNaN); }, "q NaN");
}

TEST(NonFinite, NaNInAKeyRowMakesTheRowsThatSeeItNaN) {
  for (const Options& opt : masks())
    check_against_textbook(kShape, opt, [](const Problem<double>& p) { set(p.k, 0, 30, 1, 0, kNaN); }, "k NaN");
}

TEST(NonFinite, NaNInAValueRowReachesOnlyTheRowsThatSeeIt) {
  for (const Shape& shape : {kShape, kDecode, kAppend})
    for (const Options& opt : masks())
      check_against_textbook(shape, opt, [](const Problem<double>& p) { set(p.v, 1, 40, 0, 7, kNaN); }, "v NaN");
}

TEST(NonFinite, InfInAValueRowReachesOnlyTheRowsThatSeeIt) {
  for (const Shape& shape : {kShape, kDecode, kAppend})
    for (const Options& opt : masks())
      check_against_textbook(shape, opt, [](const Problem<double>& p) { set(p.v, 0, 10, 0, 3, kInf); }, "v Inf");
}

// A NaN value whose key's weight underflows to exactly 0 still makes the row NaN (0 * NaN).
TEST(NonFinite, NaNValueUnderAZeroWeightStillPropagates) {
  // Scores of 1e5 are rounded by up to 1e5 x 2^-53 = 1.1e-11 in both algorithms, which moves a
  // row's weights, and so its o, by as much relative: o is checked at 1e-10 (seen: 1.14e-12).
  for (const Options& opt : masks())
    check_against_textbook(
        kShape, opt,
        [](const Problem<double>& p) {
          auto k = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.k);
          for (int d = 0; d < 16; ++d) k(0, 5, 0, d) = -1e4 * (d % 2 ? 1 : -1);  // score ~ -1e5 for some rows
          Kokkos::deep_copy(p.k, k);
          set(p.v, 0, 5, 0, 2, kNaN);
        },
        "v NaN under p = 0", 1e-10);
}

// q row (b, i, h) = (+-inf, finite...) and key 0 components all positive: scores +-inf.
void infinite_scores(const Problem<double>& p, double sign) {
  auto q = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.q);
  auto k = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.k);
  q(0, 30, 1, 0) = sign * kInf;
  for (int j = 0; j < p.shape.Nk; ++j) k(0, j, 0, 0) = std::abs(k(0, j, 0, 0)) + 0.1;
  Kokkos::deep_copy(p.q, q);
  Kokkos::deep_copy(p.k, k);
}

TEST(NonFinite, ARowWithPlusInfScoresIsNaNAsInTheTextbook) {
  for (const Options& opt : masks())
    check_against_textbook(kShape, opt, [](const Problem<double>& p) { infinite_scores(p, 1); }, "+inf scores");
}

TEST(NonFinite, ARowOfMinusInfScoresIsARowThatSeesNoKey) {
  for (const Options& opt : masks()) {
    check_against_textbook(kShape, opt, [](const Problem<double>& p) { infinite_scores(p, -1); }, "-inf scores");
  }
  // And explicitly: o = 0, lse = -inf.
  Problem<double> p(kShape, fresh_seed());
  infinite_scores(p, -1);
  run(Algo::splitkv7, p, Options{});
  auto o = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.o);
  auto lse = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.lse);
  EXPECT_EQ(lse(0, 1, 30), -kInf);
  for (int d = 0; d < kShape.D; ++d) EXPECT_EQ(o(0, 30, 1, d), 0.0);
}

// Finite float inputs with scores up to ~1e37 (log2 units stay below FLT_MAX) and gaps of the
// same size: outputs finite, every o a convex combination of v rows, in every algorithm.
TEST(NonFinite, FiniteInputsWithHugeScoresAndGapsNeverGiveNaN) {
  const Shape s{1, 33, 300, 2, 1, 8};
  for (Algo a : {Algo::forward, Algo::splitkv2, Algo::splitkv7}) {
    for (const Options& opt : masks()) {
      const std::uint64_t seed = fresh_seed();
      SCOPED_TRACE(std::string(name(a)) + " " + describe(s, opt) + " seed=" + std::to_string(seed));
      Problem<float> p(s, seed);
      auto q = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.q);
      auto k = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.k);
      for (std::size_t i = 0; i < q.span(); ++i) q.data()[i] *= 1e18f;
      for (std::size_t i = 0; i < k.span(); ++i) k.data()[i] *= (i / 8) % 3 == 0 ? 1e18f : 1e-18f;
      Kokkos::deep_copy(p.q, q);
      Kokkos::deep_copy(p.k, k);
      Options o = opt;
      o.splits = a == Algo::forward ? 0 : (a == Algo::splitkv2 ? 2 : 7);
      if (a == Algo::forward)
        attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, one_split(o));
      else
        attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, o);
      Kokkos::fence();
      const std::vector<double> out = to_host(p.o), lse = to_host(p.lse), v = to_host(p.v);
      double vmax = 0;
      for (double x : v) vmax = std::max(vmax, std::abs(x));
      for (double x : out) {
        ASSERT_TRUE(std::isfinite(x));
        ASSERT_LE(std::abs(x), vmax * (1 + 1e-5));
      }
      for (double x : lse) ASSERT_FALSE(std::isnan(x));
    }
  }
}

// The public merge on partial states far apart, near the float maximum (natural-log lse up to
// FLT_MAX / log2(e), so that log2 units stay finite): finite, and the larger part wins.
TEST(NonFinite, MergeOfFarApartStatesIsFinite) {
  const float big = std::numeric_limits<float>::max() / 1.4427f * 0.999f;
  const std::vector<std::pair<float, float>> cases = {{big, -big}, {-big, big}, {big, big}, {1e30f, -1e30f},
                                                      {0.f, -big},  {-big, -big}};
  for (const auto& c : cases) {
    View3<float> oa("oa", 1, 1, 4), ob("ob", 1, 1, 4), o("o", 1, 1, 4);
    View2<float> la("la", 1, 1), lb("lb", 1, 1), lse("lse", 1, 1);
    Kokkos::deep_copy(oa, 1.0f);
    Kokkos::deep_copy(ob, 2.0f);
    Kokkos::deep_copy(la, c.first);
    Kokkos::deep_copy(lb, c.second);
    merge(TestSpace(), oa, la, ob, lb, o, lse);
    Kokkos::fence();
    auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o);
    auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
    SCOPED_TRACE(std::to_string(c.first) + " vs " + std::to_string(c.second));
    EXPECT_TRUE(std::isfinite(hl(0, 0)));
    for (int d = 0; d < 4; ++d) {
      EXPECT_TRUE(std::isfinite(ho(0, 0, d)));
      if (c.first > c.second + 1e6f) {
        EXPECT_EQ(ho(0, 0, d), 1.0f);
      }
      if (c.second > c.first + 1e6f) {
        EXPECT_EQ(ho(0, 0, d), 2.0f);
      }
    }
  }
}

// Runs forward and backward on a problem of shape s after `poke` has put its non-finite values in,
// under every mask, tile size and dQ strategy, and compares the gradients' NaN pattern and values
// with the textbook backward.
template <class Poke>
void check_backward_against_textbook(const Poke& poke, const std::string& what) {
  const Shape s{1, 29, 41, 4, 2, 8};
  for (const Options& mask : masks())
    for (const auto& tile : kTiles)
      for (DqStrategy dq : {DqStrategy::key_chunks, DqStrategy::query_pass, DqStrategy::atomic}) {
        Options opt = mask;
        opt.block_q = tile.first;
        opt.block_k = tile.second;
        BackwardOptions bopt;
        bopt.dq = dq;
        bopt.deterministic = dq != DqStrategy::atomic;
        const std::uint64_t seed = fresh_seed();
        SCOPED_TRACE(what + " " + describe(s, opt) + " tiles " + std::to_string(tile.first) + " x " +
                     std::to_string(tile.second) + " dq " + std::to_string(static_cast<int>(dq)) +
                     " seed=" + std::to_string(seed));
        GradProblem<double> p(s, seed);
        poke(p);
        p.forward(opt);
        p.backward(opt, bopt);
        Kokkos::fence();
        const GradProblem<double> ref = textbook_gradients(p, mask);
        expect_same_nans(to_host(p.dq), to_host(ref.dq), "dq");
        expect_same_nans(to_host(p.dk), to_host(ref.dk), "dk");
        expect_same_nans(to_host(p.dv), to_host(ref.dv), "dv");
      }
}

// Backward: a NaN in one query row reaches exactly the gradients the textbook backward makes NaN:
// that row's dQ, and dK and dV of every key of its KV head (through the masked pairs too).
TEST(NonFinite, BackwardNaNInAQueryRowMatchesTheTextbook) {
  check_backward_against_textbook([](GradProblem<double>& p) { set(p.q, 0, 12, 1, 3, kNaN); }, "q NaN");
}

// Backward: a NaN or Inf in the V row of a key that some rows do not see (window, causal) reaches
// exactly the gradients the textbook backward makes NaN; the rows that do not see the key keep
// finite gradients (a masked entry's dP is 0, as in the textbook, never 0 x NaN).
TEST(NonFinite, BackwardNaNInAValueRowReachesOnlyWhatTheTextbookReaches) {
  for (double bad : {kNaN, kInf})
    // Key 30: causal rows before it, and window rows far from it, do not see it.
    check_backward_against_textbook([&](GradProblem<double>& p) { set(p.v, 0, 30, 1, 5, bad); },
                                    "v " + std::to_string(bad));
}

// Backward: a NaN in a K row (every dQ of its KV head, through 0 x NaN where a row does not see the
// key) and in a dO row (dK and dV of every key, that row's dQ) as in the textbook.
TEST(NonFinite, BackwardNaNInAKeyOrOutputGradientRowMatchesTheTextbook) {
  check_backward_against_textbook([](GradProblem<double>& p) { set(p.k, 0, 30, 0, 2, kNaN); }, "k NaN");
  check_backward_against_textbook([](GradProblem<double>& p) { set(p.dout, 0, 7, 2, 1, kNaN); }, "dO NaN");
}

}  // namespace
}  // namespace test
}  // namespace kattn
