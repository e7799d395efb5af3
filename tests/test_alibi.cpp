// ALiBi (Options::alibi_slopes) on every forward path against the float64 textbook with the same
// slopes: dense with every mask variant and split, decode row tiles, progress pieces (which move
// the diagonal), ragged, paged, block-sparse, float, bf16 on each CPU product choice, with sinks;
// the backward's dq, dk, dv for every dq strategy (against the textbook, whose own gradients are
// checked by finite differences); the paper's standard slopes; and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/block_mask.hpp"
#include "kattn/core/alibi.hpp"
#include "storage16_support.hpp"
#include "variant_support.hpp"

namespace kattn {
namespace test {
namespace {

// Uniform slopes in [0, 0.6) per head; head 1 (when there is one) has slope 0 and the last head a
// steep one that leaves each row little beyond its diagonal.
std::vector<double> random_slopes(int heads, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(0.0, 0.6);
  std::vector<double> s(static_cast<std::size_t>(heads));
  for (double& x : s) x = u(gen);
  if (heads > 1) s[1] = 0.0;
  if (heads > 2) s[heads - 1] = 4.0;
  return s;
}

template <class T>
void check_dense(const Shape& shape, Options opt, int splits) {
  const std::uint64_t seed = fresh_seed();
  opt.splits = splits;
  opt.alibi_slopes = random_slopes(shape.Hq, seed + 11);
  expect_dense_matches_textbook<T>(shape, opt, seed, "dense with ALiBi");
}

TEST(Alibi, DenseMatchesTextbookForEveryVariantAndSplit) {
  // Prefill column tiles, decode row tiles (one query, GQA 8:1), and a GQA prefill with Nq > Nk.
  for (const Shape& shape : {Shape{2, 37, 53, 4, 2, 16}, Shape{1, 1, 300, 8, 1, 64}, Shape{3, 41, 20, 6, 3, 8}})
    for (const Options& opt : option_variants())
      for (int splits : {1, 3}) check_dense<double>(shape, opt, splits);
}

TEST(Alibi, FloatWithinRelativeBound) {
  for (const Options& opt : option_variants()) {
    check_dense<float>(Shape{2, 33, 70, 4, 2, 32}, opt, 0);
    check_dense<float>(Shape{2, 2, 200, 8, 2, 64}, opt, 0);  // decode
  }
}

TEST(Alibi, TilesThatDoNotDivideTheSequence) {
  Options opt;
  opt.causal = true;
  opt.block_q = 8;
  opt.block_k = 16;
  check_dense<double>(Shape{1, 45, 45, 2, 1, 16}, opt, 1);
  opt.block_k = 5;
  check_dense<double>(Shape{1, 45, 61, 2, 2, 16}, opt, 4);
}

// Progress pieces run query positions as problems of their own, placed by the diagonal shift:
// ALiBi's distances move with it.
TEST(Alibi, ProgressPiecesKeepTheDistances) {
  Options opt;
  opt.causal = true;
  int calls = 0;
  opt.progress = [&](double) { return ++calls > 0; };
  check_dense<double>(Shape{1, 700, 700, 2, 1, 8}, opt, 1);
  EXPECT_GT(calls, 1);
}

TEST(Alibi, WithSinksMatchesTextbook) {
  for (bool causal : {false, true}) {
    Options opt;
    opt.causal = causal;
    opt.sinks = {0.5, -1.0, 3.0, 1.0};
    check_dense<double>(Shape{2, 29, 35, 4, 2, 16}, opt, 1);
    check_dense<double>(Shape{2, 1, 90, 4, 1, 16}, opt, 3);
  }
}

TEST(Alibi, RaggedAndPagedMatchTextbook) {
  for (bool causal : {false, true})
    for (int splits : {1, 4}) {
      const std::uint64_t seed = fresh_seed();
      Options opt;
      opt.causal = causal;
      opt.splits = splits;
      opt.alibi_slopes = random_slopes(6, seed);
      SCOPED_TRACE("causal=" + std::to_string(causal) + " splits=" + std::to_string(splits) +
                   " seed=" + std::to_string(seed));
      expect_ragged_and_paged_match({1, 0, 7, 1, 30}, {40, 3, 7, 0, 61}, 6, 2, opt, seed, "with ALiBi");
    }
}

TEST(Alibi, BlockSparseMatchesMaskedTextbook) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  const Problem<double> p(Shape{1, 40, 56, 4, 2, 16}, seed);
  const BlockMask mask = random_block_mask(40, 56, seed);
  Options opt = with_mask(Options{}, mask);
  opt.causal = true;
  opt.alibi_slopes = random_slopes(4, seed + 1);
  expect_block_sparse_matches_masked(p, opt, "block-sparse with ALiBi");
}

// bf16 on each CPU product choice (the widened float path, the bf16 pair products, the AMX tile
// layout: on a CPU without AMX its layout runs on the pair products), prefill and decode.
TEST(Alibi, Bf16WithinTheSixteenBitRuleOnEveryCpuProductChoice) {
  for (CpuProducts products : {CpuProducts::widened, CpuProducts::bf16_dot, CpuProducts::amx})
    for (bool causal : {false, true})
      for (const Shape& shape : {Shape{2, 70, 95, 4, 2, 64}, Shape{2, 1, 130, 8, 2, 128}}) {
        const std::uint64_t seed = fresh_seed();
        SCOPED_TRACE(std::string(cpu_products_name(products)) + " causal=" + std::to_string(causal) +
                     " Nq=" + std::to_string(shape.Nq) + " seed=" + std::to_string(seed));
        Problem16<bf16> p(shape, seed);
        Options opt;
        opt.causal = causal;
        opt.cpu_products = products;
        opt.alibi_slopes = random_slopes(shape.Hq, seed + 3);
        attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt);
        Kokkos::fence();
        const auto h = p.host();
        expect_16bit_rule<bf16>(h.params(), opt, to_host(p.o), to_host(p.lse), "bf16 with ALiBi");
      }
}

// The backward: dq, dk, dv against the textbook's for every variant (softcap included: the bias
// comes after it) and every dq strategy, with sinks on some.
TEST(Alibi, BackwardMatchesTextbookGradients) {
  for (const Shape& shape : {Shape{2, 21, 29, 4, 2, 16}, Shape{1, 40, 23, 3, 1, 8}})
    for (const Options& variant : option_variants()) {
      const std::uint64_t seed = fresh_seed();
      Options opt = variant;
      opt.alibi_slopes = random_slopes(shape.Hq, seed + 9);
      if (seed % 2) opt.sinks = std::vector<double>(static_cast<std::size_t>(shape.Hq), 0.5);
      SCOPED_TRACE(describe(shape, opt) + " seed=" + std::to_string(seed));
      expect_backward_matches_textbook(shape, opt, seed, "backward with ALiBi");
    }
}

TEST(Alibi, FloatAndBlockSparseBackward) {
  const Shape shape{1, 48, 48, 4, 2, 32};
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  Options opt;
  opt.causal = true;
  opt.alibi_slopes = random_slopes(4, seed);
  GradProblem<float> f(shape, seed);
  f.forward(opt);
  f.backward(opt);
  expect_gradients_close(f, textbook_gradients(f, opt), grad_tolerance<float>(), "float backward with ALiBi");
  std::vector<int> keep(6 * 6, 1);
  keep[3] = keep[8] = keep[20] = 0;
  const BlockMask mask = BlockMask::from_dense(8, 1, 6, 6, keep);
  const Options masked = with_mask(opt, mask);
  GradProblem<double> p(shape, seed + 1);
  p.forward(masked);
  p.backward(masked);
  // The textbook backward has no block mask: dq against central differences of the block-sparse
  // forward (itself checked against the masked textbook above) instead.
  GradProblem<double> plain(shape, seed + 1);  // the same inputs
  const double h = 1e-6;
  auto hq = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.q);
  const auto dq = to_host(p.dq);
  for (std::size_t e : {std::size_t(5), std::size_t(777), hq.span() - 3}) {
    const double x = hq.data()[e];
    const auto loss_at = [&](double v) {
      hq.data()[e] = v;
      Kokkos::deep_copy(plain.q, hq);
      plain.forward(masked);
      return output_loss(plain);
    };
    const double fd = (loss_at(x + h) - loss_at(x - h)) / (2 * h);
    hq.data()[e] = x;
    EXPECT_NEAR(dq[e], fd, 1e-7 * std::max(1.0, std::abs(fd))) << "dq element " << e;
  }
}

// The textbook's own gradients with ALiBi (which the kernels are checked against) by central
// differences of the textbook forward, on every input element of a small problem.
TEST(Alibi, ReferenceGradientsMatchFiniteDifferences) {
  for (double softcap : {0.0, 3.0}) {
    const Shape shape{1, 5, 7, 2, 1, 4};
    GradProblem<double> p(shape, fresh_seed());
    Options opt;
    opt.causal = true;
    opt.softcap = softcap;
    opt.alibi_slopes = {0.7, 0.2};
    reference_backward(TestSpace(), p.q, p.k, p.v, p.dout, p.dq, p.dk, p.dv, opt);
    const double h = 1e-6;
    const auto check = [&](const View4<double>& x, const View4<double>& grad, const char* name) {
      auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
      const auto g = to_host(grad);
      for (std::size_t e = 0; e < hx.span(); ++e)
        EXPECT_NEAR(g[e], central_difference(p, opt, x, hx, e, h), 1e-8)
            << name << " element " << e << " softcap " << softcap;
    };
    check(p.q, p.dq, "dq");
    check(p.k, p.dk, "dk");
    check(p.v, p.dv, "dv");
  }
}

TEST(Alibi, StandardSlopesAreThePapers) {
  EXPECT_TRUE(alibi_standard_slopes(0).empty());
  EXPECT_EQ(alibi_standard_slopes(1), std::vector<double>{std::exp2(-8.0)});
  const std::vector<double> eight = alibi_standard_slopes(8);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(eight[h], std::exp2(-(h + 1.0))) << "head " << h;
  // 12 heads: the 8-head slopes, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 (every other of 16 heads').
  const std::vector<double> twelve = alibi_standard_slopes(12);
  ASSERT_EQ(twelve.size(), 12u);
  for (int h = 0; h < 8; ++h) EXPECT_EQ(twelve[h], eight[h]);
  for (int h = 0; h < 4; ++h) EXPECT_DOUBLE_EQ(twelve[8 + h], std::exp2(-0.5 - h)) << "head " << 8 + h;
}

TEST(Alibi, BadSlopesAreRefusedByName) {
  const Shape shape{1, 4, 4, 3, 1, 8};
  Problem<double> p(shape, fresh_seed());
  const auto expect_refused = [&](const Options& opt, const std::string& message) {
    try {
      attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt);
      ADD_FAILURE() << "accepted: " << message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
    try {
      reference(TestSpace(), p.q, p.k, p.v, p.o, p.lse, opt);
      ADD_FAILURE() << "the reference accepted: " << message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  Options opt;
  opt.alibi_slopes = {0.5, 0.25};
  expect_refused(opt, "alibi_slopes: expected one slope per query head (3), got 2");
  GradProblem<double> g(shape, fresh_seed());
  try {
    g.backward(opt);
    ADD_FAILURE() << "the backward accepted two slopes for three heads";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("alibi_slopes: expected one slope per query head (3), got 2"),
              std::string::npos)
        << e.what();
  }
  opt.alibi_slopes = {0.5, std::nan(""), 0.1};
  expect_refused(opt, "alibi_slopes: expected finite slopes, got nan");
}

}  // namespace
}  // namespace test
}  // namespace kattn
