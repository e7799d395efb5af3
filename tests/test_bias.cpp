// The bias tensor (Options::bias, kattn::score_bias) against the float64 textbook with the same
// bias: every mask variant and split, every broadcast shape and element type (float, double, bf16,
// fp16, bool), decode row tiles, progress pieces, block-sparse, rows the bias masks whole, float
// and bf16 storage, with ALiBi and sinks; the backward for every dq strategy, with the bias's own
// gradient (every broadcast shape and element type, finite differences); the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/block_mask.hpp"
#include "kattn/reference_masked.hpp"
#include "kattn/score_bias.hpp"
#include "storage16_support.hpp"
#include "variant_support.hpp"

namespace kattn {
namespace test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

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

// d(bias) of the kernels (BackwardOptions::dbias, element type DB) and of the textbook, for a
// bias of this broadcast shape.
template <class DB, class T>
std::vector<double> kernel_dbias(const GradProblem<T>& p, const Options& opt, BackwardOptions b) {
  const ScoreBias& s = opt.bias;
  const View4<DB> d("dbias", s.batch, s.heads, s.q_len, s.kv_len);
  poison(d);
  b.dbias = score_bias_gradient(d);
  p.backward(opt, b);
  Kokkos::fence();
  return to_host(d);
}

inline std::vector<double> textbook_dbias(const GradProblem<double>& p, const Options& opt) {
  const ScoreBias& s = opt.bias;
  const View4<double> d("dbias", s.batch, s.heads, s.q_len, s.kv_len);
  poison(d);
  GradProblem<double> ref(p.shape, 0);
  copy_converted(p.q, ref.q);
  copy_converted(p.k, ref.k);
  copy_converted(p.v, ref.v);
  copy_converted(p.dout, ref.dout);
  reference_backward(TestSpace(), ref.q, ref.k, ref.v, ref.dout, ref.dq, ref.dk, ref.dv, opt, score_bias_gradient(d));
  Kokkos::fence();
  return to_host(d);
}

void expect_dbias_close(const std::vector<double>& got, const std::vector<double>& want, double tol,
                        const std::string& what) {
  const Errors e = compare(got, want);
  EXPECT_FALSE(e.nan_mismatch) << what << ": dbias has NaN (or unwritten elements) the textbook does not";
  EXPECT_LE(e.max_abs, tol) << what << ": dbias max abs error";
}

// d(bias) for every variant, broadcast shape and dq strategy against the textbook's; the other
// gradients stay the textbook's too.
TEST(Bias, GradientMatchesTextbookForEveryBroadcastAndStrategy) {
  for (const Shape& shape : {Shape{2, 21, 29, 4, 2, 16}, Shape{3, 1, 40, 2, 1, 8}, Shape{1, 37, 9, 3, 3, 5}})
    for (const Options& variant : option_variants())
      for (const auto& [bb, hb] : {std::pair{shape.B, shape.Hq}, {1, shape.Hq}, {shape.B, 1}, {1, 1}}) {
        const std::uint64_t seed = fresh_seed();
        Options opt = variant;
        const View4<double> bias = random_bias<double>(bb, hb, shape.Nq, shape.Nk, seed);
        opt.bias = score_bias(bias);
        if (seed % 4 == 0) opt.alibi_slopes.assign(static_cast<std::size_t>(shape.Hq), 0.3);
        SCOPED_TRACE(describe(shape, opt) + " bias [" + std::to_string(bb) + ", " + std::to_string(hb) +
                     "] seed=" + std::to_string(seed));
        GradProblem<double> p(shape, seed);
        p.forward(opt);
        const std::vector<double> want = textbook_dbias(p, opt);
        const GradProblem<double> ref = textbook_gradients(p, opt);
        for (DqStrategy dq : {DqStrategy::key_chunks, DqStrategy::query_pass, DqStrategy::atomic}) {
          BackwardOptions b;
          b.dq = dq;
          p.poison_gradients();
          expect_dbias_close(kernel_dbias<double>(p, opt, b), want, kGradDoubleTol, std::string("dq ") + name(dq));
          expect_gradients_close(p, ref, kGradDoubleTol, std::string("with dbias, dq ") + name(dq));
        }
      }
}

// The textbook's d(bias) is the loss's derivative: central differences of the float64 textbook
// loss sum(o * dout) in a few bias entries, broadcast ones included.
TEST(Bias, GradientMatchesFiniteDifferences) {
  const Shape shape{2, 6, 7, 2, 1, 4};
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  for (const auto& [bb, hb] : {std::pair{2, 2}, {1, 1}}) {
    Options opt;
    opt.causal = seed % 2 == 0;
    opt.softcap = seed % 3 == 0 ? 3.0 : 0.0;
    const View4<double> bias("bias", bb, hb, shape.Nq, shape.Nk);
    fill_normal(bias, seed);
    opt.bias = score_bias(bias);
    GradProblem<double> p(shape, seed);
    p.forward(opt);
    const std::vector<double> kernel = kernel_dbias<double>(p, opt, {});
    const std::vector<double> textbook = textbook_dbias(p, opt);
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bias);
    const double step = 1e-5;
    for (std::size_t e = 0; e < h.span(); e += 5) {
      const double x = h.data()[e];
      const auto loss_at = [&](double value) {
        h.data()[e] = value;
        Kokkos::deep_copy(bias, h);
        return textbook_loss(p, opt);
      };
      const double fd = (loss_at(x + step) - loss_at(x - step)) / (2 * step);
      loss_at(x);
      EXPECT_NEAR(textbook[e], fd, 1e-8) << "element " << e << " of a bias [" << bb << ", " << hb << "]";
      EXPECT_NEAR(kernel[e], fd, 1e-8) << "element " << e << " of a bias [" << bb << ", " << hb << "]";
    }
  }
}

// dbias where P = 0 (keys the mask hides, -inf biases, rows the bias masks whole, skipped
// block-sparse tiles) is 0; a broadcast sum is the same bits run to run.
TEST(Bias, GradientIsZeroWhereNothingIsSeenAndDeterministic) {
  const Shape shape{2, 24, 40, 2, 1, 8};
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  View4<double> bias = random_bias<double>(1, 2, shape.Nq, shape.Nk, seed);
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bias);
  for (int j = 0; j < shape.Nk; ++j) h(0, 1, 5, j) = -kInf;  // head 1's row 5 sees nothing
  Kokkos::deep_copy(bias, h);
  Options opt;
  opt.causal = true;
  opt.bias = score_bias(bias);
  GradProblem<double> p(shape, seed);
  p.forward(opt);
  const std::vector<double> d = kernel_dbias<double>(p, opt, {});
  for (int hq = 0; hq < 2; ++hq)
    for (int i = 0; i < shape.Nq; ++i)
      for (int j = 0; j < shape.Nk; ++j) {
        const std::size_t e = (std::size_t(hq) * shape.Nq + i) * shape.Nk + j;
        if (j > i + shape.Nk - shape.Nq || std::isinf(h(0, hq, i, j)) || (hq == 1 && i == 5)) {
          EXPECT_EQ(d[e], 0.0) << "head " << hq << " query " << i << " key " << j;
        }
      }
  EXPECT_EQ(d, kernel_dbias<double>(p, opt, {})) << "a broadcast dbias differs run to run";
  // Block-sparse: the blocks a row does not list are -inf in a dense bias with the same gradient.
  const BlockMask mask = random_block_mask(shape.Nq, shape.Nk, seed + 9);
  const Options sparse = with_mask(opt, mask);
  p.forward(sparse);
  const std::vector<double> got = kernel_dbias<double>(p, sparse, {});
  const auto keep = expand_block_mask(mask, shape.Nq, shape.Nk);
  View4<double> folded("bias", 1, 2, shape.Nq, shape.Nk);
  auto f = Kokkos::create_mirror_view(folded);
  for (int hq = 0; hq < 2; ++hq)
    for (int i = 0; i < shape.Nq; ++i)
      for (int j = 0; j < shape.Nk; ++j) {
        const std::size_t e = (std::size_t(keep.heads == 1 ? 0 : hq) * shape.Nq + i) * shape.Nk + j;
        f(0, hq, i, j) = keep.keep[e] ? h(0, hq, i, j) : -kInf;
      }
  Kokkos::deep_copy(folded, f);
  Options dense = opt;
  dense.bias = score_bias(folded);
  expect_dbias_close(got, textbook_dbias(p, dense), kGradDoubleTol, "block-sparse");
}

// Float and 16-bit biases: dbias in the bias's type (the full shape in float is written in place;
// the others are summed and rounded once) against the textbook's.
TEST(Bias, FloatGradientInEveryElementType) {
  const Shape shape{2, 33, 45, 4, 2, 32};
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  for (const auto& [bb, hb] : {std::pair{2, 4}, {1, 4}}) {
    const View4<float> bias = random_bias<float>(bb, hb, shape.Nq, shape.Nk, seed);
    Options opt;
    opt.causal = true;
    opt.bias = score_bias(bias);
    GradProblem<float> p(shape, seed);
    p.forward(opt);
    GradProblem<double> d(shape, 0);
    copy_converted(p.q, d.q);
    copy_converted(p.k, d.k);
    copy_converted(p.v, d.v);
    copy_converted(p.dout, d.dout);
    const std::vector<double> want = textbook_dbias(d, opt);
    double scale = 0;
    for (double x : want) scale = std::max(scale, std::abs(x));
    // |dbias| <= P |dP - D|: float's rounding of the two sums, relative to the largest entry; bf16
    // and fp16 add their own rounding of each entry.
    expect_dbias_close(kernel_dbias<float>(p, opt, {}), want, 1e-5 * scale, "float dbias");
    expect_dbias_close(kernel_dbias<double>(p, opt, {}), want, 1e-5 * scale, "double dbias of a float problem");
    const std::vector<double> b16 = kernel_dbias<bf16>(p, opt, {});
    const Errors e = compare(b16, want);
    EXPECT_FALSE(e.nan_mismatch);
    for (std::size_t i = 0; i < want.size(); ++i)
      EXPECT_LE(std::abs(b16[i] - want[i]), std::abs(want[i]) * 0x1p-8 + 1e-5 * scale) << "bf16 dbias element " << i;
  }
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
  // The gradient's destination: the bias's shape, a bias to differentiate, not a mask.
  const auto expect_refused_gradient = [&](const Options& o, const ScoreBiasGradient& d, const std::string& message) {
    BackwardOptions b;
    b.dbias = d;
    try {
      p.backward(o, b);
      ADD_FAILURE() << "the backward accepted: " << message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  const View4<double> per_head("bias", 1, 3, 4, 6), all("dbias", 2, 3, 4, 6);
  const View4<bool> keep("keep", 1, 1, 4, 6);
  opt.bias = score_bias(per_head);
  expect_refused_gradient(opt, score_bias_gradient(all), "dbias: expected the bias's shape [1, 3, 4, 6], got [2, 3, 4, 6]");
  expect_refused_gradient(Options{}, score_bias_gradient(all), "dbias: the gradient of a bias, but the call has no bias");
  opt.bias = score_bias(keep);
  const View4<double> one("dbias", 1, 1, 4, 6);
  expect_refused_gradient(opt, score_bias_gradient(one), "dbias: a boolean bias (a mask) has no gradient");
  // A ragged batch's bias is padded to its longest sequence.
  const View4<double> first_only("bias", 1, 1, 4, 6);
  opt.bias = score_bias(first_only);
  RaggedProblem<double> r({4, 7}, {6, 9}, 3, 1, 8, 1);
  const auto layout = make_ragged_layout<TestMemory>(host_index(r.q_indptr()), host_index(r.kv_indptr()));
  try {
    attention(TestSpace(), r.q, kv::ragged(r.k, r.v, layout), r.o, r.lse, opt);
    ADD_FAILURE() << "a ragged batch accepted a bias of its first sequence's shape";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bias: expected [2 or 1, 3 or 1, 7, 9] (the longest sequence's queries and "
                                         "keys), got [1, 1, 4, 6]"),
              std::string::npos)
        << e.what();
  }
}

// Ragged batches and paged caches: the bias padded to the longest sequence, each sequence reading
// its own corner, against each sequence's textbook with that corner (an empty sequence, one query,
// keys past every query's).
TEST(Bias, RaggedAndPagedMatchEachSequencesTextbook) {
  const std::vector<std::int64_t> q_lens = {5, 0, 17, 1}, kv_lens = {9, 4, 17, 30};
  for (const Options& variant : option_variants()) {
    if (variant.diagonal_shift != 0) continue;  // whole sequences only
    for (const auto& [bb, hb] : {std::pair{4, 4}, {1, 1}, {4, 1}}) {
      const std::uint64_t seed = fresh_seed();
      Options opt = variant;
      const View4<double> bias = random_bias<double>(bb, hb, 17, 30, seed);
      opt.bias = score_bias(bias);
      if (seed % 3 == 0) opt.alibi_slopes.assign(4, 0.2);
      SCOPED_TRACE(describe(Shape{}, opt) + " bias [" + std::to_string(bb) + ", " + std::to_string(hb) +
                   "] seed=" + std::to_string(seed));
      expect_ragged_and_paged_match(q_lens, kv_lens, 4, 2, opt, seed, "with a bias");
    }
  }
}

// The ragged backward with a bias, and the bias's gradient (padding entries 0), against the
// textbook backward over the same ragged batch.
TEST(Bias, RaggedBackwardAndGradientMatchTheTextbook) {
  const std::vector<std::int64_t> q_lens = {5, 0, 17, 1}, kv_lens = {9, 4, 17, 30};
  const int Hq = 4, Hkv = 2, D = 8;
  const auto layout = make_ragged_layout<TestMemory>(host_index(indptr_of(q_lens)), host_index(indptr_of(kv_lens)));
  for (const Options& variant : option_variants()) {
    if (variant.diagonal_shift != 0) continue;
    const std::uint64_t seed = fresh_seed();
    Options opt = variant;
    const int bb = seed % 2 ? 4 : 1;
    const View4<double> bias = random_bias<double>(bb, Hq, 17, 30, seed);
    opt.bias = score_bias(bias);
    SCOPED_TRACE(describe(Shape{}, opt) + " bias batch " + std::to_string(bb) + " seed=" + std::to_string(seed));
    RaggedProblem<double> p(q_lens, kv_lens, Hq, Hkv, D, seed);
    View3<double> dout("do", p.q.extent(0), Hq, D), dq("dq", p.q.extent(0), Hq, D), dk("dk", p.k.extent(0), Hkv, D),
        dv("dv", p.k.extent(0), Hkv, D), rq("rq", p.q.extent(0), Hq, D), rk("rk", p.k.extent(0), Hkv, D),
        rv("rv", p.k.extent(0), Hkv, D);
    fill_normal(dout, seed + 7);
    const View4<double> dbias("dbias", bb, Hq, 17, 30), want("dbias", bb, Hq, 17, 30);
    poison(dbias);
    poison(want);
    BackwardOptions b;
    b.dbias = score_bias_gradient(dbias);
    attention(TestSpace(), p.q, kv::ragged(p.k, p.v, layout), p.o, p.lse, opt);
    attention_backward(TestSpace(), p.q, kv::ragged(p.k, p.v, layout), p.o, p.lse, dout, dq, dk, dv, opt, b);
    detail::reference_backward_impl(TestSpace(),
                                    ragged_backward_params(p.q, p.k, p.v, p.o, p.lse, dout, rq, rk, rv, layout), opt,
                                    score_bias_gradient(want));
    Kokkos::fence();
    const std::pair<View3<double>, View3<double>> grads[3] = {{dq, rq}, {dk, rk}, {dv, rv}};
    for (const auto& [got, ref] : grads) {
      const Errors e = compare(to_host(got), to_host(ref));
      EXPECT_FALSE(e.nan_mismatch);
      EXPECT_LE(e.max_abs, kGradDoubleTol);
    }
    expect_dbias_close(to_host(dbias), to_host(want), kGradDoubleTol, "ragged");
  }
}

}  // namespace
}  // namespace test
}  // namespace kattn
