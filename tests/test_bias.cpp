// The bias tensor (Options::bias, kattn::score_bias) against the float64 textbook with the same
// bias: every mask variant and split, every broadcast shape and element type (float, double, bf16,
// fp16, bool), decode row tiles, progress pieces, block-sparse, rows the bias masks whole, float
// and bf16 storage, with ALiBi and sinks; the backward for every dq strategy; the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/block_mask.hpp"
#include "kattn/score_bias.hpp"
#include "storage16_support.hpp"
#include "variant_support.hpp"

namespace kattn {
namespace test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A bias [batch, heads, Nq, Nk] of element type B: normal values of spread 2 (for bool, true with
// probability 3/4); a few -inf where B can hold them.
template <class B>
View4<B> random_bias(int batch, int heads, int Nq, int Nk, std::uint64_t seed) {
  View4<B> v("bias", batch, heads, Nq, Nk);
  auto h = Kokkos::create_mirror_view(v);
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> n(0.0, 2.0);
  for (std::size_t e = 0; e < h.span(); ++e) {
    if constexpr (std::is_same_v<B, bool>) {
      h.data()[e] = gen() % 4 != 0;
    } else {
      const double x = gen() % 17 == 0 ? -kInf : n(gen);
      h.data()[e] = narrow<B>(x);
    }
  }
  Kokkos::deep_copy(v, h);
  return v;
}

template <class T, class B>
void check_dense(const Shape& shape, Options opt, int splits, int bias_batch, int bias_heads) {
  const std::uint64_t seed = fresh_seed();
  opt.splits = splits;
  const View4<B> bias = random_bias<B>(bias_batch, bias_heads, shape.Nq, shape.Nk, seed + 3);
  opt.bias = score_bias(bias);
  expect_dense_matches_textbook<T>(shape, opt, seed, "dense with a bias",
                                   " bias [" + std::to_string(bias_batch) + ", " + std::to_string(bias_heads) + "]");
}

TEST(Bias, DenseMatchesTextbookForEveryVariantSplitAndBroadcast) {
  for (const Shape& shape : {Shape{2, 37, 53, 4, 2, 16}, Shape{1, 1, 300, 8, 1, 64}, Shape{3, 41, 20, 6, 3, 8}})
    for (const Options& opt : option_variants())
      for (int splits : {1, 3}) {
        check_dense<double, double>(shape, opt, splits, shape.B, shape.Hq);
        check_dense<double, double>(shape, opt, splits, 1, 1);
        check_dense<double, float>(shape, opt, splits, shape.B, 1);
        check_dense<double, bool>(shape, opt, splits, 1, shape.Hq);
      }
}

TEST(Bias, SixteenBitBiasAndFloatStorage) {
  for (const Options& opt : option_variants()) {
    check_dense<double, bf16>(Shape{2, 30, 45, 4, 2, 16}, opt, 0, 2, 4);
    check_dense<double, fp16>(Shape{2, 30, 45, 4, 2, 16}, opt, 0, 1, 4);
    check_dense<float, float>(Shape{2, 33, 70, 4, 2, 32}, opt, 0, 2, 4);
    check_dense<float, bool>(Shape{2, 2, 200, 8, 2, 64}, opt, 0, 2, 1);  // decode
  }
}

TEST(Bias, WithAlibiSinksTilesAndProgressPieces) {
  Options opt;
  opt.causal = true;
  opt.alibi_slopes = {0.5, 0.0, 0.25, 1.0};
  opt.sinks = {0.5, -1.0, 2.0, 0.0};
  check_dense<double, double>(Shape{2, 29, 35, 4, 2, 16}, opt, 1, 2, 4);
  opt.block_q = 8, opt.block_k = 5;
  check_dense<double, float>(Shape{1, 45, 61, 4, 2, 16}, opt, 4, 1, 4);
  Options pieces;
  int calls = 0;
  pieces.progress = [&](double) { return ++calls > 0; };
  check_dense<double, double>(Shape{1, 700, 700, 2, 1, 8}, pieces, 1, 1, 2);
  EXPECT_GT(calls, 1);
}

// A bias of -inf over a whole row is a row that sees no key: o = 0, lse = -inf.
TEST(Bias, RowsTheBiasMasksWholeGetZeroAndMinusInfinity) {
  const Shape shape{1, 6, 40, 2, 1, 16};
  Problem<double> p(shape, fresh_seed());
  View4<bool> keep("keep", 1, 2, 6, 40);
  auto h = Kokkos::create_mirror_view(keep);
  for (int hd = 0; hd < 2; ++hd)
    for (int i = 0; i < 6; ++i)
      for (int j = 0; j < 40; ++j) h(0, hd, i, j) = i != 3;
  Kokkos::deep_copy(keep, h);
  Options opt;
  opt.bias = score_bias(keep);
  attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt);
  Kokkos::fence();
  const auto o = to_host(p.o), lse = to_host(p.lse);
  for (int hd = 0; hd < 2; ++hd) {
    EXPECT_EQ(lse[hd * 6 + 3], -kInf);
    for (int d = 0; d < 16; ++d) EXPECT_EQ(o[(3 * 2 + hd) * 16 + d], 0.0);
  }
  expect_close(p, reference_of(p, opt), kDoubleTol, "rows the bias masks whole");
}

TEST(Bias, BlockSparseMatchesMaskedTextbook) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const Problem<double> p(Shape{1, 40, 56, 4, 2, 16}, seed);
  const BlockMask mask = random_block_mask(40, 56, seed);
  const View4<double> bias = random_bias<double>(1, 4, 40, 56, seed + 1);
  Options opt = with_mask(Options{}, mask);
  opt.bias = score_bias(bias);
  expect_block_sparse_matches_masked(p, opt, "block-sparse with a bias");
}

TEST(Bias, Bf16WithinTheSixteenBitRuleOnEveryCpuProductChoice) {
  for (CpuProducts products : {CpuProducts::widened, CpuProducts::bf16_dot, CpuProducts::amx})
    for (const Shape& shape : {Shape{2, 70, 95, 4, 2, 64}, Shape{2, 1, 130, 8, 2, 128}}) {
      const std::uint64_t seed = fresh_seed();
      SCOPED_TRACE(std::string(cpu_products_name(products)) + " Nq=" + std::to_string(shape.Nq) +
                   " seed=" + std::to_string(seed));
      Problem16<bf16> p(shape, seed);
      const View4<float> bias = random_bias<float>(2, shape.Hq, shape.Nq, shape.Nk, seed + 1);
      Options opt;
      opt.causal = true;
      opt.cpu_products = products;
      opt.bias = score_bias(bias);
      attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt);
      Kokkos::fence();
      const auto h = p.host();
      expect_16bit_rule<bf16>(h.params(), opt, to_host(p.o), to_host(p.lse), "bf16 with a bias");
    }
}

// The backward: dq, dk, dv against the textbook's for every variant and dq strategy.
TEST(Bias, BackwardMatchesTextbookGradients) {
  for (const Shape& shape : {Shape{2, 21, 29, 4, 2, 16}, Shape{1, 40, 23, 3, 1, 8}})
    for (const Options& variant : option_variants()) {
      const std::uint64_t seed = fresh_seed();
      Options opt = variant;
      const View4<double> bias = random_bias<double>(seed % 2 ? shape.B : 1, shape.Hq, shape.Nq, shape.Nk, seed);
      const View4<bool> keep = random_bias<bool>(1, 1, shape.Nq, shape.Nk, seed + 1);
      opt.bias = seed % 3 ? score_bias(bias) : score_bias(keep);
      if (seed % 5 == 0) opt.alibi_slopes.assign(static_cast<std::size_t>(shape.Hq), 0.25);
      SCOPED_TRACE(describe(shape, opt) + " seed=" + std::to_string(seed));
      expect_backward_matches_textbook(shape, opt, seed, "backward with a bias");
    }
}

TEST(Bias, FloatBackward) {
  const Shape shape{1, 48, 48, 4, 2, 32};
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const View4<float> bias = random_bias<float>(1, 4, 48, 48, seed);
  Options opt;
  opt.causal = true;
  opt.bias = score_bias(bias);
  GradProblem<float> f(shape, seed);
  f.forward(opt);
  f.backward(opt);
  expect_gradients_close(f, textbook_gradients(f, opt), grad_tolerance<float>(), "float backward with a bias");
}

TEST(Bias, BadBiasesAreRefusedByName) {
  const Shape shape{2, 4, 6, 3, 1, 8};
  GradProblem<double> p(shape, fresh_seed());
  const auto expect_refused = [&](const Options& opt, const std::string& message) {
    try {
      attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt);
      ADD_FAILURE() << "accepted: " << message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
    try {
      p.backward(opt);
      ADD_FAILURE() << "the backward accepted: " << message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  const View4<double> transposed("bias", 2, 3, 6, 4), wrong_heads("bias", 1, 2, 4, 6);
  Options opt;
  opt.bias = score_bias(transposed);
  expect_refused(opt, "bias: expected [2 or 1, 3 or 1, 4, 6], got [2, 3, 6, 4]");
  opt.bias = score_bias(wrong_heads);
  expect_refused(opt, "bias: expected [2 or 1, 3 or 1, 4, 6], got [1, 2, 4, 6]");
  const Kokkos::View<double****, Kokkos::LayoutLeft, TestMemory> keys_strided("bias", 2, 3, 4, 6);
  try {
    score_bias(keys_strided);
    ADD_FAILURE() << "accepted keys of stride " << keys_strided.stride(3);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bias: expected contiguous keys"), std::string::npos) << e.what();
  }
  // Ragged batches take none yet.
  const View4<double> fits("bias", 1, 1, 4, 6);
  opt.bias = score_bias(fits);
  RaggedProblem<double> r({4}, {6}, 3, 1, 8, 1);
  const auto layout = make_ragged_layout<TestMemory>(host_index(r.q_indptr()), host_index(r.kv_indptr()));
  try {
    attention(TestSpace(), r.q, kv::ragged(r.k, r.v, layout), r.o, r.lse, opt);
    ADD_FAILURE() << "a ragged batch accepted a bias";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bias: dense keys and values only"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace test
}  // namespace kattn
