// The tiled backward against the float64 textbook backward, against central finite differences
// of the forward, on every variant, dQ strategy, edge shape and ragged batches; determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backward_support.hpp"
#include "ragged_support.hpp"
#include "kattn/attention.hpp"
#include "kattn/backward.hpp"
#include "kattn/reference.hpp"
#include "kattn/reference_backward.hpp"

namespace kattn {
namespace test {
namespace {

// The shared variants, the last (a shifted window) with a softcap too: the backward of tanh.
std::vector<Options> variants() {
  std::vector<Options> v = option_variants();
  v.back().softcap = 1.5;
  return v;
}

std::vector<BackwardOptions> strategies() {
  std::vector<BackwardOptions> s(5);
  s[1].dq = DqStrategy::key_chunks, s[1].dq_chunks = 1;
  s[2].dq = DqStrategy::key_chunks, s[2].dq_chunks = 3;
  s[3].dq = DqStrategy::query_pass;
  s[4].dq = DqStrategy::atomic;
  return s;
}

std::string describe(const BackwardOptions& b) {
  return std::string(" dq=") + name(b.dq) + " chunks=" + std::to_string(b.dq_chunks);
}

// One problem, its textbook gradients once, then every strategy on fresh poisoned outputs.
template <class T>
void check_backward(const Shape& shape, const Options& opt,
                    const std::vector<BackwardOptions>& bopts = strategies()) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(describe(shape, opt) + " seed=" + std::to_string(seed));
  GradProblem<T> p(shape, seed);
  p.forward(opt);
  const GradProblem<double> ref = textbook_gradients(p, opt);
  for (const BackwardOptions& b : bopts) {
    SCOPED_TRACE(describe(b));
    p.poison_gradients();
    p.backward(opt, b);
    expect_gradients_close(p, ref, grad_tolerance<T>(), "backward");
  }
}

TEST(Backward, DoubleMatchesTextbookForEveryVariantStrategyAndShape) {
  const std::vector<Shape> shapes = {{1, 1, 1, 1, 1, 1},    {2, 1, 37, 2, 1, 16}, {1, 37, 1, 8, 1, 8},
                                     {1, 13, 13, 2, 2, 3},  {2, 31, 97, 4, 2, 32}, {1, 97, 31, 8, 1, 64},
                                     {1, 70, 70, 2, 1, 128}, {1, 29, 53, 2, 1, 256}};
  for (const Shape& s : shapes)
    for (const Options& o : variants()) check_backward<double>(s, o);
}

TEST(Backward, DoubleMatchesTextbookForHeadDimsOneTo256) {
  for (int d : {1, 2, 5, 8, 15, 16, 17, 31, 33, 63, 64, 65, 96, 100, 127, 128, 129, 192, 255, 256}) {
    Options causal;
    causal.causal = true;
    check_backward<double>({1, 19, 23, 2, 1, d}, Options{});
    check_backward<double>({1, 19, 23, 2, 1, d}, causal);
  }
}

TEST(Backward, DoubleMatchesTextbookForGqaRatios) {
  for (int ratio : {1, 2, 8})
    for (const Options& o : variants()) check_backward<double>({2, 21, 45, 2 * ratio, 2, 24}, o);
}

TEST(Backward, DoubleMatchesTextbookForTilesFromOneKeyToTheWholeSequence) {
  const Shape s{1, 29, 41, 4, 2, 12};
  for (int bk : {1, 2, 3, 7, 8, 16, 40, 41, 64})
    for (int bq : {1, 2, 5, 29, 58, 100})
      for (bool causal : {false, true}) {
        Options o;
        o.block_q = bq;
        o.block_k = bk;
        o.causal = causal;
        o.window_left = causal ? 9 : -1;
        check_backward<double>(s, o);
      }
}

TEST(Backward, KeyChunksFromOneToMoreThanTheKeyTiles) {
  Options o;
  o.block_k = 8;
  o.causal = true;
  std::vector<BackwardOptions> chunked;
  for (int c : {1, 2, 3, 4, 5, 6, 13, 100}) {
    chunked.emplace_back();
    chunked.back().dq = DqStrategy::key_chunks;
    chunked.back().dq_chunks = c;
  }
  check_backward<double>({2, 33, 41, 4, 2, 16}, o, chunked);
}

// Tiles the window cuts compute only the keys (and rows) the other side sees: tiles of many
// micro-tiles, GQA rows, diagonals moved by Nq != Nk and a shift, every dQ strategy.
TEST(Backward, TilesTheWindowCutsMatchTextbook) {
  const std::vector<Shape> shapes = {{2, 200, 180, 8, 2, 64}, {1, 77, 233, 4, 4, 72}};
  const std::vector<Options> all = option_variants();
  for (const Shape& s : shapes)
    for (int v : {1, 2, 4, 5, 9, 10})
      for (int bk : {32, 128}) {
        Options o = all[v];
        o.block_q = 128;
        o.block_k = bk;
        check_backward<float>(s, o);
        if (bk == 32) {
          o.block_q = 64;
          check_backward<double>(s, o);
        }
      }
}

TEST(Backward, OneKeyChunkAddsStraightIntoDqWithoutPartials) {
  // 16 (sequence, KV head) pairs plan one chunk on the host: no partial dQ array, only D and lse.
  const Shape s{8, 70, 90, 4, 2, 32};
  GradProblem<float> p(s, fresh_seed());
  Options o;
  o.causal = true;
  o.block_k = 16;  // 6 key tiles, so that 3 chunks can be asked for
  p.forward(o);
  const std::size_t row_values = std::size_t(s.B) * s.Nq * s.Hq;
  BackwardOptions one;
  one.dq = DqStrategy::key_chunks;
  p.poison_gradients();
  const BackwardInfo planned = p.backward(o, one);
  EXPECT_EQ(planned.chunks, 1);
  EXPECT_EQ(planned.workspace_bytes, 2 * row_values * sizeof(float));
  expect_gradients_close(p, textbook_gradients(p, o), kGradFloatTol, "one chunk");
  BackwardOptions three = one;
  three.dq_chunks = 3;  // chunk 0 in dQ, chunks 1 and 2 in partials
  p.poison_gradients();
  const BackwardInfo chunked = p.backward(o, three);
  EXPECT_EQ(chunked.chunks, 3);
  EXPECT_GE(chunked.workspace_bytes, (2 + 2 * std::size_t(s.D)) * row_values * sizeof(float));
  EXPECT_LT(chunked.workspace_bytes, (2 + 3 * std::size_t(s.D)) * row_values * sizeof(float));
  expect_gradients_close(p, textbook_gradients(p, o), kGradFloatTol, "three chunks");
}

TEST(Backward, FloatWithinRelativeBound) {
  const std::vector<Shape> shapes = {{1, 1, 1, 1, 1, 1},       {2, 31, 97, 4, 2, 32}, {1, 97, 31, 8, 1, 64},
                                     {1, 130, 257, 2, 1, 128}, {1, 65, 1000, 1, 1, 256}};
  for (const Shape& s : shapes)
    for (const Options& o : variants()) check_backward<float>(s, o);
}

TEST(Backward, RowsThatSeeNoKeyGetZeroDq) {
  // Causal with Nq > Nk: the first Nq - Nk rows see no key (lse = -inf).
  Options o;
  o.causal = true;
  for (const BackwardOptions& b : strategies()) {
    GradProblem<double> p({1, 10, 4, 2, 1, 8}, fresh_seed());
    p.forward(o);
    p.backward(o, b);
    auto dq = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.dq);
    for (int i = 0; i < 6; ++i)
      for (int h = 0; h < 2; ++h)
        for (int d = 0; d < 8; ++d) EXPECT_EQ(dq(0, i, h, d), 0.0) << describe(b);
    expect_gradients_close(p, textbook_gradients(p, o), kGradDoubleTol, "causal Nq > Nk" + describe(b));
  }
}

TEST(Backward, KeysThatNoQuerySeesGetZeroDkDv) {
  // A window of 2 keys left of the diagonal with Nk = Nq + 20: keys 0 .. 17 are seen by nobody.
  Options o;
  o.window_left = 2, o.window_right = 0;
  for (const BackwardOptions& b : strategies()) {
    GradProblem<double> p({1, 12, 32, 2, 1, 8}, fresh_seed());
    p.forward(o);
    p.backward(o, b);
    auto dk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.dk);
    auto dv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.dv);
    for (int j = 0; j < 18; ++j)
      for (int d = 0; d < 8; ++d) {
        EXPECT_EQ(dk(0, j, 0, d), 0.0) << describe(b);
        EXPECT_EQ(dv(0, j, 0, d), 0.0) << describe(b);
      }
    expect_gradients_close(p, textbook_gradients(p, o), kGradDoubleTol, "unseen keys" + describe(b));
  }
}

TEST(Backward, EmptyKeySequenceGivesZeroDq) {
  check_backward<double>({2, 5, 0, 2, 1, 8}, Options{});
}

TEST(Backward, EmptyQuerySequenceGivesZeroDkDv) {
  for (const BackwardOptions& b : strategies()) {
    GradProblem<double> p({2, 0, 7, 2, 1, 8}, fresh_seed());
    p.backward(Options{}, b);
    for (double x : to_host(p.dk)) EXPECT_EQ(x, 0.0);
    for (double x : to_host(p.dv)) EXPECT_EQ(x, 0.0);
  }
}

TEST(Backward, UsesTheGivenOAndLse) {
  // o and lse from the textbook forward instead of the tiled one: same gradients.
  Options o;
  o.causal = true;
  GradProblem<double> p({2, 40, 50, 4, 2, 32}, fresh_seed());
  reference(TestSpace(), p.q, p.k, p.v, p.o, p.lse, o);
  Kokkos::fence();
  p.backward(o);
  expect_gradients_close(p, textbook_gradients(p, o), kGradDoubleTol, "textbook o/lse");
}

TEST(Backward, StridedViewsOfPackedQkv) {
  const int B = 2, N = 37, H = 4, D = 16;
  View5<double> qkv("qkv", B, N, 3, H, D), dqkv("dqkv", B, N, 3, H, D);
  fill_normal(qkv, fresh_seed());
  poison(dqkv);
  const auto slice = [](const auto& x, int i) {
    return Kokkos::subview(x, Kokkos::ALL, Kokkos::ALL, i, Kokkos::ALL, Kokkos::ALL);
  };
  Options o;
  o.causal = true;
  GradProblem<double> ref({B, N, N, H, H, D}, fresh_seed());
  Kokkos::deep_copy(ref.q, slice(qkv, 0));
  Kokkos::deep_copy(ref.k, slice(qkv, 1));
  Kokkos::deep_copy(ref.v, slice(qkv, 2));
  ref.forward(o);
  for (const BackwardOptions& b : strategies()) {
    kattn::attention_backward(TestSpace(), slice(qkv, 0), kattn::kv::dense(slice(qkv, 1), slice(qkv, 2)), ref.o, ref.lse, ref.dout, slice(dqkv, 0), slice(dqkv, 1), slice(dqkv, 2), o, b);
    GradProblem<double> out = ref;
    out.dq = View4<double>("dq", B, N, H, D);
    out.dk = View4<double>("dk", B, N, H, D);
    out.dv = View4<double>("dv", B, N, H, D);
    Kokkos::deep_copy(out.dq, slice(dqkv, 0));
    Kokkos::deep_copy(out.dk, slice(dqkv, 1));
    Kokkos::deep_copy(out.dv, slice(dqkv, 2));
    expect_gradients_close(out, textbook_gradients(ref, o), kGradDoubleTol, "strided" + describe(b));
  }
}

// ---- finite differences ------------------------------------------------------------------

// Central differences (L(x + h) - L(x - h)) / 2h at `samples` random elements of x, against the
// gradient `grad`: truncation ~h^2 L''' and rounding ~eps L / h are both ~1e-10 at h = 1e-5.
void expect_matches_differences(GradProblem<double>& p, const View4<double>& x, const View4<double>& grad,
                                const Options& opt, const char* what, std::mt19937_64& gen) {
  auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  const std::vector<double> g = to_host(grad);
  std::uniform_int_distribution<std::size_t> pick(0, hx.span() - 1);
  const double h = 1e-5;
  for (int s = 0; s < 12; ++s) {
    const std::size_t e = pick(gen);
    const double fd = central_difference(p, opt, x, hx, e, h);
    EXPECT_NEAR(g[e], fd, 1e-7 * std::max(1.0, std::abs(fd))) << what << " element " << e;
  }
}

TEST(Backward, MatchesCentralFiniteDifferencesOfTheForward) {
  std::vector<Options> opts = variants();
  for (std::size_t v = 0; v < opts.size(); ++v) {
    const std::uint64_t seed = fresh_seed();
    const Shape shape{2, 11, 17, 4, 2, 8};
    SCOPED_TRACE(describe(shape, opts[v]) + " seed=" + std::to_string(seed));
    for (const BackwardOptions& b : strategies()) {
      GradProblem<double> p(shape, seed);
      p.forward(opts[v]);
      p.backward(opts[v], b);
      std::mt19937_64 gen(seed);
      expect_matches_differences(p, p.q, p.dq, opts[v], "dq", gen);
      expect_matches_differences(p, p.k, p.dk, opts[v], "dk", gen);
      expect_matches_differences(p, p.v, p.dv, opts[v], "dv", gen);
    }
  }
}

TEST(ReferenceBackward, MatchesCentralFiniteDifferencesOfTheForward) {
  // The oracle itself, independently of the tiled backward.
  for (const Options& o : variants()) {
    const std::uint64_t seed = fresh_seed();
    SCOPED_TRACE(describe(Shape{1, 9, 12, 4, 1, 5}, o) + " seed=" + std::to_string(seed));
    GradProblem<double> p({1, 9, 12, 4, 1, 5}, seed);
    reference_backward(TestSpace(), p.q, p.k, p.v, p.dout, p.dq, p.dk, p.dv, o);
    std::mt19937_64 gen(seed);
    expect_matches_differences(p, p.q, p.dq, o, "dq", gen);
    expect_matches_differences(p, p.k, p.dk, o, "dk", gen);
    expect_matches_differences(p, p.v, p.dv, o, "dv", gen);
  }
}

// ---- determinism -------------------------------------------------------------------------

TEST(Backward, DeterministicStrategiesAreBitwiseReproducible) {
  Options o;
  o.causal = true;
  for (DqStrategy dq : {DqStrategy::automatic, DqStrategy::key_chunks, DqStrategy::query_pass}) {
    BackwardOptions b;
    b.deterministic = true;
    b.dq = dq;
    GradProblem<float> p({2, 300, 333, 4, 2, 64}, fresh_seed());
    p.forward(o);
    const BackwardInfo info = p.backward(o, b);
    EXPECT_TRUE(info.deterministic);
    const std::vector<double> dq1 = to_host(p.dq), dk1 = to_host(p.dk), dv1 = to_host(p.dv);
    for (int run = 0; run < 3; ++run) {
      p.poison_gradients();
      p.backward(o, b);
      EXPECT_EQ(0, std::memcmp(dq1.data(), to_host(p.dq).data(), dq1.size() * sizeof(double))) << name(dq);
      EXPECT_EQ(0, std::memcmp(dk1.data(), to_host(p.dk).data(), dk1.size() * sizeof(double))) << name(dq);
      EXPECT_EQ(0, std::memcmp(dv1.data(), to_host(p.dv).data(), dv1.size() * sizeof(double))) << name(dq);
    }
  }
}

TEST(Backward, AutomaticStrategyIsDeterministicWhenAsked) {
  BackwardOptions b;
  b.deterministic = true;
  GradProblem<double> p({1, 20, 20, 2, 1, 8}, fresh_seed());
  p.forward(Options{});
  const BackwardInfo info = p.backward(Options{}, b);
  EXPECT_TRUE(info.deterministic);
  EXPECT_NE(info.dq, DqStrategy::atomic);
  EXPECT_NE(info.dq, DqStrategy::automatic);
}

#if defined(KOKKOS_ENABLE_SERIAL) && defined(KOKKOS_ENABLE_OPENMP)
// The same deterministic strategy on one thread (Serial) and on every OpenMP thread, whose teams
// run in whatever order the threads take them: bitwise the same gradients.
TEST(Backward, DeterministicAcrossThreadCounts) {
  Options o;
  o.causal = true;
  o.window_left = 150;
  for (DqStrategy dq : {DqStrategy::key_chunks, DqStrategy::query_pass}) {
    BackwardOptions b;
    b.deterministic = true;
    b.dq = dq;
    GradProblem<double> serial({2, 257, 301, 4, 1, 32}, fresh_seed());
    serial.forward(o);
    GradProblem<double> omp = serial;
    omp.dq = View4<double>("dq", 2, 257, 4, 32);
    omp.dk = View4<double>("dk", 2, 301, 1, 32);
    omp.dv = View4<double>("dv", 2, 301, 1, 32);
    kattn::attention_backward(Kokkos::Serial(), serial.q, kattn::kv::dense(serial.k, serial.v), serial.o, serial.lse, serial.dout, serial.dq, serial.dk, serial.dv, o, b);
    kattn::attention_backward(Kokkos::OpenMP(), omp.q, kattn::kv::dense(omp.k, omp.v), omp.o, omp.lse, omp.dout, omp.dq, omp.dk, omp.dv, o, b);
    EXPECT_TRUE(bitwise_equal(serial.dq, omp.dq)) << name(dq) << " with " << Kokkos::OpenMP().concurrency()
                                                  << " OpenMP threads";
    EXPECT_TRUE(bitwise_equal(serial.dk, omp.dk)) << name(dq);
    EXPECT_TRUE(bitwise_equal(serial.dv, omp.dv)) << name(dq);
  }
}
#endif

// ---- ragged batches ----------------------------------------------------------------------

using Ragged3 = View3<double>;

// The layout of sequences of these lengths, from int64 or int32 indptrs.
RaggedLayout<TestSpace::memory_space> layout_of(const std::vector<std::int64_t>& q_lens,
                                                                    const std::vector<std::int64_t>& kv_lens,
                                                                    bool int32) {
  if (int32) return make_ragged_layout<TestMemory>(host_index32(indptr_of(q_lens)), host_index32(indptr_of(kv_lens)));
  return make_ragged_layout<TestMemory>(host_index(indptr_of(q_lens)), host_index(indptr_of(kv_lens)));
}

// A ragged batch through the front door, forward then backward, the forward's o and lse fed to the
// backward as they come, against (a) the textbook backward on the same ragged params and (b) each
// sequence run alone through the dense API.
void check_ragged(const std::vector<std::int64_t>& q_lens, const std::vector<std::int64_t>& kv_lens, int Hq, int Hkv,
                  int D, const Options& opt, const BackwardOptions& bopt, bool int32 = false) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(describe(Shape{static_cast<int>(q_lens.size()), 0, 0, Hq, Hkv, D}, opt) + describe(bopt) +
               (int32 ? " int32 indptr" : "") + " seed=" + std::to_string(seed));
  std::int64_t Tq = 0, Tk = 0;
  for (auto n : q_lens) Tq += n;
  for (auto n : kv_lens) Tk += n;
  const auto layout = layout_of(q_lens, kv_lens, int32);
  Ragged3 q("q", Tq, Hq, D), k("k", Tk, Hkv, D), v("v", Tk, Hkv, D), o("o", Tq, Hq, D), dout("do", Tq, Hq, D);
  Ragged3 dq("dq", Tq, Hq, D), dk("dk", Tk, Hkv, D), dv("dv", Tk, Hkv, D);
  Ragged3 rq("rq", Tq, Hq, D), rk("rk", Tk, Hkv, D), rv("rv", Tk, Hkv, D);
  View2<double> lse("lse", Tq, Hq);  // as the ragged forward writes it
  fill_normal(q, seed);
  fill_normal(k, seed + 1);
  fill_normal(v, seed + 2);
  fill_normal(dout, seed + 3);
  for (const auto& x : {dq, dk, dv, rq, rk, rv, o}) poison(x);
  poison(lse);
  const TestSpace space;
  attention(space, q, kv::ragged(k, v, layout), o, lse, opt);
  attention_backward(space, q, kv::ragged(k, v, layout), o, lse, dout, dq, dk, dv, opt, bopt);
  detail::reference_backward_impl(space, ragged_backward_params(q, k, v, o, lse, dout, rq, rk, rv, layout), opt);
  const char* names[3] = {"dq", "dk", "dv"};
  const Ragged3 got[3] = {dq, dk, dv}, want[3] = {rq, rk, rv};
  for (int i = 0; i < 3; ++i) {
    const Errors e = compare(to_host(got[i]), to_host(want[i]));
    EXPECT_FALSE(e.nan_mismatch) << names[i];
    EXPECT_LE(e.max_abs, kGradDoubleTol) << names[i] << " ragged vs textbook";
  }
  // Each sequence alone, dense.
  auto hq = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), q);
  auto hk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), k);
  auto hv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  auto hdo = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dout);
  auto hdq = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dq);
  auto hdk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dk);
  auto hdv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dv);
  std::int64_t q0 = 0, k0 = 0;
  for (std::size_t b = 0; b < q_lens.size(); ++b) {
    const int nq = static_cast<int>(q_lens[b]), nk = static_cast<int>(kv_lens[b]);
    GradProblem<double> one({1, nq, nk, Hq, Hkv, D}, 0);
    const auto load = [](const auto& host, std::int64_t start, const View4<double>& to) {
      auto h = Kokkos::create_mirror_view(to);
      for (std::size_t i = 0; i < h.extent(1); ++i)
        for (std::size_t hh = 0; hh < h.extent(2); ++hh)
          for (std::size_t d = 0; d < h.extent(3); ++d) h(0, i, hh, d) = host(start + i, hh, d);
      Kokkos::deep_copy(to, h);
    };
    load(hq, q0, one.q);
    load(hk, k0, one.k);
    load(hv, k0, one.v);
    load(hdo, q0, one.dout);
    one.forward(opt);
    one.backward(opt, bopt);
    const auto expect_slice = [&](const auto& host, std::int64_t start, const View4<double>& dense, const char* what) {
      auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dense);
      double err = 0;
      for (std::size_t i = 0; i < h.extent(1); ++i)
        for (std::size_t hh = 0; hh < h.extent(2); ++hh)
          for (std::size_t d = 0; d < h.extent(3); ++d) err = std::max(err, std::abs(h(0, i, hh, d) - host(start + i, hh, d)));
      EXPECT_LE(err, kGradDoubleTol) << what << " of sequence " << b << " vs the dense API";
    };
    expect_slice(hdq, q0, one.dq, "dq");
    expect_slice(hdk, k0, one.dk, "dk");
    expect_slice(hdv, k0, one.dv, "dv");
    q0 += nq;
    k0 += nk;
  }
}

TEST(Backward, RaggedBatchesMatchTextbookAndDenseRuns) {
  const std::vector<std::int64_t> q_lens = {5, 0, 17, 1, 40, 9}, kv_lens = {9, 4, 0, 1, 70, 3};
  for (const Options& o : variants())
    for (const BackwardOptions& b : strategies()) check_ragged(q_lens, kv_lens, 4, 2, 16, o, b);
  Options small_tiles;
  small_tiles.block_q = 3, small_tiles.block_k = 5, small_tiles.causal = true;
  for (const BackwardOptions& b : strategies()) check_ragged({33, 2, 64}, {31, 64, 2}, 8, 1, 8, small_tiles, b);
}

TEST(Backward, RaggedForwardLseFeedsTheBackwardWithEitherIndexType) {
  // total_q == Hq, where an lse read in the wrong layout has the right extents.
  for (bool int32 : {false, true}) {
    check_ragged({2, 2}, {5, 3}, 4, 2, 8, Options{}, BackwardOptions{}, int32);
    Options causal;
    causal.causal = true;
    check_ragged({3, 1, 4}, {7, 1, 9}, 8, 4, 16, causal, BackwardOptions{}, int32);
  }
}

// ---- refusals ----------------------------------------------------------------------------

TEST(Backward, BadArgumentsAreRefusedByName) {
  const GradProblem<double> p({2, 8, 9, 4, 2, 16}, fresh_seed());
  const TestSpace space;
  const auto run = [&](const View4<double>& dout, const View4<double>& dq, const View4<double>& dk,
                       const View4<double>& dv, const View3<double>& lse, const BackwardOptions& b = {}) {
    kattn::attention_backward(space, p.q, kattn::kv::dense(p.k, p.v), p.o, lse, dout, dq, dk, dv, Options{}, b);
  };
  expect_error([&] { run(View4<double>("do", 2, 7, 4, 16), p.dq, p.dk, p.dv, p.lse); },
               {"do:", "sequence length 8", "got 7"});
  expect_error([&] { run(p.dout, View4<double>("dq", 2, 8, 4, 8), p.dk, p.dv, p.lse); }, {"dq:", "head dim 16", "got 8"});
  expect_error([&] { run(p.dout, p.dq, View4<double>("dk", 2, 9, 4, 16), p.dv, p.lse); }, {"dk:", "heads 2", "got 4"});
  expect_error([&] { run(p.dout, p.dq, p.dk, View4<double>("dv", 1, 9, 2, 16), p.lse); }, {"dv:", "batch 2", "got 1"});
  expect_error([&] { run(p.dout, p.dq, p.dk, p.dv, View3<double>()); }, {"lse:", "required"});
  expect_error([&] { run(p.dout, p.dq, p.dk, p.dk, p.lse); }, {"dk:", "must not overlap dv"});
  expect_error([&] { run(p.dout, p.q, p.dk, p.dv, p.lse); }, {"dq:", "must not overlap q"});
  BackwardOptions atomic_but_deterministic;
  atomic_but_deterministic.deterministic = true;
  atomic_but_deterministic.dq = DqStrategy::atomic;
  expect_error([&] { run(p.dout, p.dq, p.dk, p.dv, p.lse, atomic_but_deterministic); }, {"dq:", "not deterministic"});
  BackwardOptions negative_chunks;
  negative_chunks.dq_chunks = -1;
  expect_error([&] { run(p.dout, p.dq, p.dk, p.dv, p.lse, negative_chunks); }, {"dq_chunks:", "got -1"});
  Options bad;
  bad.softcap = -2;
  expect_error([&] { kattn::attention_backward(space, p.q, kattn::kv::dense(p.k, p.v), p.o, p.lse, p.dout, p.dq, p.dk, p.dv, bad); },
               {"softcap:"});
}

TEST(Backward, BadRaggedArgumentsAreRefusedByName) {
  Ragged3 q("q", 10, 2, 8), k("k", 12, 1, 8), v("v", 12, 1, 8), o("o", 10, 2, 8), dout("do", 10, 2, 8);
  Ragged3 dq("dq", 10, 2, 8), dk("dk", 12, 1, 8), dv("dv", 12, 1, 8);
  View2<double> lse("lse", 10, 2), lse_transposed("lse", 2, 10);
  const TestSpace space;
  const auto run = [&](const std::vector<std::int64_t>& ql, const std::vector<std::int64_t>& kl,
                       const View2<double>& l) {
    attention_backward(space, q, kv::ragged(k, v, layout_of(ql, kl, false)), o, l, dout, dq, dk, dv);
  };
  expect_error([&] { run({4, 5}, {6, 6}, lse); }, {"q:", "expected 9 rows", "got 10"});
  expect_error([&] { run({4, 6}, {6, 5}, lse); }, {"k:", "expected 11 rows", "got 12"});
  expect_error([&] { run({4, 6}, {6, 6}, lse_transposed); }, {"lse:", "rows", "got 2"});
  expect_error([&] { run({4, 6}, {6, 6}, View2<double>()); }, {"lse:"});
  EXPECT_NO_THROW(run({4, 6}, {6, 6}, lse));
}

}  // namespace
}  // namespace test
}  // namespace kattn
