// Attention sinks (Options::sinks) on every path against the float64 textbook with the same sinks
// (one more logit per head, of no value): dense with every mask variant and split, decode row
// tiles, rows that see no key, ragged, paged, block-sparse, float and bf16, the backward's dq, dk,
// dv and dsinks (against the textbook and by finite differences), and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/block_mask.hpp"
#include "storage16_support.hpp"
#include "variant_support.hpp"

namespace kattn {
namespace test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Normal sinks of spread 2 around 1 per head; head 1 (when there is one) has none (-inf) and the
// last head one large enough to take most of each row's mass.
std::vector<double> random_sinks(int heads, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> n(1.0, 2.0);
  std::vector<double> s(static_cast<std::size_t>(heads));
  for (double& x : s) x = n(gen);
  if (heads > 1) s[1] = -kInf;
  if (heads > 2) s[heads - 1] = 9.0;
  return s;
}

template <class T>
void check_dense(const Shape& shape, Options opt, int splits) {
  const std::uint64_t seed = fresh_seed();
  opt.splits = splits;
  opt.sinks = random_sinks(shape.Hq, seed + 17);
  expect_dense_matches_textbook<T>(shape, opt, seed, "dense with sinks");
}

TEST(Sinks, DenseMatchesTextbookForEveryVariantAndSplit) {
  for (const Shape& shape : {Shape{2, 37, 53, 4, 2, 16}, Shape{1, 1, 300, 8, 1, 64}, Shape{3, 2, 40, 6, 3, 8}})
    for (const Options& opt : option_variants())
      for (int splits : {1, 3}) check_dense<double>(shape, opt, splits);
}

TEST(Sinks, FloatWithinRelativeBound) {
  for (const Options& opt : option_variants()) check_dense<float>(Shape{2, 33, 70, 4, 2, 32}, opt, 0);
}

TEST(Sinks, RowsThatSeeNoKeyGetZeroAndLseTheSink) {
  Options opt;
  opt.causal = true;  // Nq > Nk: the first Nq - Nk rows see no key
  const Shape shape{1, 12, 5, 3, 3, 8};
  Problem<double> p(shape, fresh_seed());
  opt.sinks = {0.5, -kInf, -2.0};
  attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt);
  Kokkos::fence();
  const auto o = to_host(p.o), lse = to_host(p.lse);
  for (int h = 0; h < 3; ++h)
    for (int i = 0; i < 7; ++i) {
      EXPECT_EQ(lse[h * 12 + i], opt.sinks[h]) << "head " << h << " row " << i;
      for (int d = 0; d < 8; ++d) EXPECT_EQ(o[(i * 3 + h) * 8 + d], 0.0);
    }
  expect_close(p, reference_of(p, opt), kDoubleTol, "rows that see no key");
}

TEST(Sinks, WithoutLseTheOutputIsTheSame) {
  const Shape shape{2, 19, 23, 4, 1, 16};
  Problem<double> p(shape, fresh_seed());
  Options opt;
  opt.causal = true;
  opt.sinks = random_sinks(4, 3);
  attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, View3<double>(), opt);
  Kokkos::fence();
  const Problem<double> ref = reference_of(p, opt);
  const Errors e = compare(to_host(p.o), to_host(ref.o));
  EXPECT_FALSE(e.nan_mismatch);
  EXPECT_LE(e.max_abs, kDoubleTol);
}

TEST(Sinks, MinusInfinityOnEveryHeadIsBitwiseNoSinks) {
  const Shape shape{1, 25, 31, 2, 2, 16};
  Problem<double> p(shape, fresh_seed()), plain(shape, 0);
  Kokkos::deep_copy(plain.q, p.q);
  Kokkos::deep_copy(plain.k, p.k);
  Kokkos::deep_copy(plain.v, p.v);
  Options opt;
  attention(TestSpace(), plain.q, kv::dense(plain.k, plain.v), plain.o, plain.lse, opt);
  opt.sinks = {-kInf, -kInf};
  attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt);
  Kokkos::fence();
  EXPECT_EQ(to_host(p.o), to_host(plain.o));
  EXPECT_EQ(to_host(p.lse), to_host(plain.lse));
}

TEST(Sinks, RaggedAndPagedMatchTextbook) {
  for (bool causal : {false, true})
    for (int splits : {1, 4}) {
      const std::uint64_t seed = fresh_seed();
      Options opt;
      opt.causal = causal;
      opt.splits = splits;
      opt.sinks = random_sinks(6, seed);
      SCOPED_TRACE("causal=" + std::to_string(causal) + " splits=" + std::to_string(splits) +
                   " seed=" + std::to_string(seed));
      expect_ragged_and_paged_match({1, 0, 7, 1, 30}, {40, 3, 7, 0, 61}, 6, 2, opt, seed, "with sinks");
    }
}

TEST(Sinks, BlockSparseMatchesMaskedTextbook) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const Problem<double> p(Shape{1, 40, 56, 4, 2, 16}, seed);
  const BlockMask mask = random_block_mask(40, 56, seed, [](std::vector<int>& keep) {
    for (int c = 0; c < 7; ++c) keep[c] = 0;  // the first query block sees nothing but its sink
  });
  Options opt = with_mask(Options{}, mask);
  opt.sinks = random_sinks(4, seed + 1);
  expect_block_sparse_matches_masked(p, opt, "block-sparse with sinks");
}

TEST(Sinks, Bf16WithinTheSixteenBitRule) {
  for (bool causal : {false, true}) {
    const Shape shape{2, 30, 45, 4, 2, 64};
    const std::uint64_t seed = fresh_seed();
    SCOPED_TRACE("causal=" + std::to_string(causal) + " seed=" + std::to_string(seed));
    Problem16<bf16> p(shape, seed);
    Options opt;
    opt.causal = causal;
    opt.sinks = random_sinks(4, seed + 3);
    attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt);
    Kokkos::fence();
    const auto h = p.host();
    // The sink's merge rounds o to bf16 a second time: half an ulp of o beyond the textbook's.
    expect_16bit_rule<bf16>(h.params(), opt, to_host(p.o), to_host(p.lse), "bf16 with sinks", 4e-3);
  }
}

// The backward: dq, dk, dv and dsinks against the textbook's for every strategy.
TEST(Sinks, BackwardMatchesTextbookGradients) {
  for (const Options& variant : option_variants()) {
    const std::uint64_t seed = fresh_seed();
    const Shape shape{2, 21, 29, 4, 2, 16};
    Options opt = variant;
    opt.sinks = random_sinks(4, seed + 9);
    SCOPED_TRACE(describe(shape, opt) + " seed=" + std::to_string(seed));
    GradProblem<double> p(shape, seed);
    p.forward(opt);
    GradProblem<double> ref(shape, 0);
    copy_converted(p.q, ref.q);
    copy_converted(p.k, ref.k);
    copy_converted(p.v, ref.v);
    copy_converted(p.dout, ref.dout);
    const std::vector<double> dsinks_ref =
        reference_backward(TestSpace(), ref.q, ref.k, ref.v, ref.dout, ref.dq, ref.dk, ref.dv, opt);
    for (DqStrategy dq : {DqStrategy::key_chunks, DqStrategy::query_pass, DqStrategy::atomic}) {
      BackwardOptions b;
      b.dq = dq;
      p.poison_gradients();
      const BackwardInfo info = p.backward(opt, b);
      expect_gradients_close(p, ref, kGradDoubleTol, "backward with sinks");
      ASSERT_EQ(info.dsinks.size(), 4u);
      for (int h = 0; h < 4; ++h)
        EXPECT_NEAR(info.dsinks[h], dsinks_ref[h], 1e-10 * std::max(1.0, std::abs(dsinks_ref[h]))) << "head " << h;
      EXPECT_EQ(info.dsinks[1], 0.0) << "a head without a sink has no gradient for it";
    }
  }
}

// dsinks against central differences (L(sink + h) - L(sink - h)) / 2h of loss(options) per head,
// within 1e-8 (relative above 1 when `relative`).
template <class Loss>
void expect_dsinks_match_differences(const std::vector<double>& dsinks, const Options& opt, const Loss& loss,
                                     bool relative) {
  const double h = 1e-5;
  for (std::size_t head = 0; head < opt.sinks.size(); ++head) {
    Options up = opt, down = opt;
    up.sinks[head] += h;
    down.sinks[head] -= h;
    const double fd = (loss(up) - loss(down)) / (2 * h);
    EXPECT_NEAR(dsinks[head], fd, 1e-8 * (relative ? std::max(1.0, std::abs(fd)) : 1.0)) << "head " << head;
  }
}

// d(sum(o * dout)) / d(sink) by central differences of the forward.
TEST(Sinks, GradientMatchesCentralFiniteDifferences) {
  for (bool causal : {false, true}) {
    const std::uint64_t seed = fresh_seed();
    const Shape shape{2, 9, 13, 3, 1, 8};
    Options opt;
    opt.causal = causal;
    opt.sinks = {0.3, -1.2, 2.0};
    SCOPED_TRACE("causal=" + std::to_string(causal) + " seed=" + std::to_string(seed));
    GradProblem<double> p(shape, seed);
    p.forward(opt);
    const BackwardInfo info = p.backward(opt);
    expect_dsinks_match_differences(info.dsinks, opt, [&](const Options& o) {
      p.forward(o);
      return output_loss(p);
    }, true);
  }
}

TEST(Sinks, ReferenceBackwardMatchesFiniteDifferencesOfTheReference) {
  const Shape shape{1, 6, 9, 2, 2, 4};
  GradProblem<double> p(shape, fresh_seed());
  Options opt;
  opt.sinks = {1.1, -0.4};
  const std::vector<double> dsinks = reference_backward(TestSpace(), p.q, p.k, p.v, p.dout, p.dq, p.dk, p.dv, opt);
  expect_dsinks_match_differences(dsinks, opt, [&](const Options& o) { return textbook_loss(p, o); }, false);
}

// bf16 storage: the backward runs in float on widened copies, so its dsinks are the float
// backward's on the same (bf16) values, to float accuracy.
TEST(Sinks, Bf16BackwardGivesTheFloatGradientOfItsSinks) {
  const Shape shape{1, 24, 24, 2, 1, 32};
  GradProblem<float> f(shape, fresh_seed());
  View4<bf16> q("q16", 1, 24, 2, 32), k("k16", 1, 24, 1, 32), v("v16", 1, 24, 1, 32), o("o16", 1, 24, 2, 32),
      dout("do16", 1, 24, 2, 32), dq("dq16", 1, 24, 2, 32), dk("dk16", 1, 24, 1, 32), dv("dv16", 1, 24, 1, 32);
  View3<float> lse("lse16", 1, 2, 24);
  const auto round_into = [](const View4<float>& x, const View4<bf16>& x16) {  // both hold the bf16 values
    auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
    auto h16 = Kokkos::create_mirror_view(x16);
    for (std::size_t i = 0; i < hx.span(); ++i) h16.data()[i] = narrow<bf16>(hx.data()[i]), hx.data()[i] = widen(h16.data()[i]);
    Kokkos::deep_copy(x, hx);
    Kokkos::deep_copy(x16, h16);
  };
  round_into(f.q, q);
  round_into(f.k, k);
  round_into(f.v, v);
  round_into(f.dout, dout);
  Options opt;
  opt.causal = true;
  opt.sinks = {0.7, 1.5};
  f.forward(opt);
  const BackwardInfo fi = f.backward(opt);
  attention(TestSpace(), q, kv::dense(k, v), o, lse, opt);
  const BackwardInfo bi = attention_backward(TestSpace(), q, kv::dense(k, v), o, lse, dout, dq, dk, dv, opt);
  ASSERT_EQ(bi.dsinks.size(), 2u);
  for (int h = 0; h < 2; ++h)  // o in bf16 (D = dO . o reads it): bf16's precision
    EXPECT_NEAR(bi.dsinks[h], fi.dsinks[h], 2e-2 * std::max(1.0, std::abs(fi.dsinks[h]))) << "head " << h;
}

TEST(Sinks, AWrongCountIsRefusedByName) {
  const Shape shape{1, 4, 4, 3, 1, 8};
  GradProblem<double> p(shape, fresh_seed());
  Options opt;
  opt.sinks = {0.0, 1.0};
  const auto expect_refused = [](const auto& call) {
    try {
      call();
      ADD_FAILURE() << "accepted two sinks for three query heads";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("sinks: expected one logit per query head (3), got 2"), std::string::npos)
          << e.what();
    }
  };
  expect_refused([&] { attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt); });
  expect_refused([&] { p.backward(opt); });
  expect_refused([&] { reference(TestSpace(), p.q, p.k, p.v, p.o, p.lse, opt); });
}

}  // namespace
}  // namespace test
}  // namespace kattn
