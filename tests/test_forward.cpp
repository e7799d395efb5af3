// The tiled forward against the float64 textbook reference: shapes, GQA, masks, tile sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/core/key_window.hpp"
#include "support.hpp"

namespace kattn {
namespace test {
namespace {

template <class T>
void check_forward(const Shape& shape, const Options& opt) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(describe(shape, opt) + " seed=" + std::to_string(seed));
  Problem<T> p(shape, seed);
  attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, one_split(opt));
  Kokkos::fence();
  expect_close(p, reference_of(p, opt), tolerance<T>(), "forward");
}

TEST(Forward, DoubleMatchesReferenceForEveryVariantAndShape) {
  const std::vector<Shape> shapes = {
      {1, 1, 1, 1, 1, 1},   {2, 1, 37, 2, 1, 16},  {1, 37, 1, 8, 1, 8},    {1, 13, 13, 2, 2, 3},
      {2, 31, 97, 4, 2, 32}, {1, 97, 31, 8, 1, 64}, {1, 64, 64, 2, 1, 128}, {1, 29, 53, 2, 1, 256}};
  for (const Shape& s : shapes)
    for (const Options& o : option_variants()) check_forward<double>(s, o);
}

TEST(Forward, DoubleMatchesReferenceForHeadDimsOneTo256) {
  for (int d : {1, 2, 5, 8, 15, 16, 17, 31, 33, 63, 64, 65, 96, 100, 127, 128, 129, 192, 255, 256}) {
    Options causal;
    causal.causal = true;
    check_forward<double>({1, 19, 23, 2, 1, d}, Options{});
    check_forward<double>({1, 19, 23, 2, 1, d}, causal);
  }
}

TEST(Forward, DoubleMatchesReferenceForGqaRatios) {
  for (int ratio : {1, 2, 8}) {
    for (const Options& o : option_variants()) check_forward<double>({2, 21, 45, 2 * ratio, 2, 24}, o);
  }
}

TEST(Forward, DoubleMatchesReferenceForTilesFromOneKeyToTheWholeSequence) {
  const Shape s{1, 29, 41, 4, 2, 12};
  for (int bk : {1, 2, 3, 7, 8, 16, 40, 41, 64})
    for (int bq : {1, 2, 5, 29, 58, 100}) {
      for (bool causal : {false, true}) {
        Options o;
        o.block_q = bq;
        o.block_k = bk;
        o.causal = causal;
        o.window_left = causal ? 9 : -1;
        check_forward<double>(s, o);
      }
    }
}

// Tiles the window cuts compute only the keys each block of rows may see (the rest is masked):
// tiles of many row blocks, rows that are (position, head) pairs of a GQA group, diagonals moved
// by Nq != Nk and by a shift, head dims that are whole vectors and not.
TEST(Forward, TilesTheWindowCutsMatchReference) {
  const std::vector<Shape> shapes = {{2, 300, 280, 8, 2, 64}, {1, 77, 333, 4, 4, 72}, {1, 260, 260, 2, 1, 128}};
  const std::vector<Options> variants = option_variants();
  for (const Shape& s : shapes)
    for (int v : {1, 2, 4, 5, 9, 10})
      for (int bq : {64, 256})
        for (int bk : {32, 128}) {
          Options o = variants[v];
          o.block_q = bq;
          o.block_k = bk;
          check_forward<float>(s, o);
          if (bq == 64) check_forward<double>(s, o);
        }
}

TEST(KeyWindow, TileKeysOfRowsHoldEveryKeyTheRowsSee) {
  for (const Options& o : option_variants()) {
    const KeyWindow window = KeyWindow::from(o);
    for (std::int64_t q_len : {1, 20, 45})
      for (std::int64_t kv_len : {1, 20, 45})
        for (std::int64_t kb = 0; kb < kv_len; kb += 7)
          for (std::int64_t i0 = 0; i0 < q_len; i0 += 3)
            for (std::int64_t i1 = i0; i1 < q_len; i1 += 5) {
              const int n_keys = static_cast<int>(std::min<std::int64_t>(7, kv_len - kb));
              int lo = 0, hi = 0;
              window.tile_keys_of_rows(i0, i1, kb, n_keys, q_len, kv_len, lo, hi);
              ASSERT_LE(0, lo);
              ASSERT_LE(lo, hi);
              ASSERT_LE(hi, n_keys);
              for (std::int64_t i = i0; i <= i1; ++i)
                for (int j = 0; j < n_keys; ++j)
                  if (window.visible(i, kb + j, q_len, kv_len)) {
                    ASSERT_TRUE(lo <= j && j < hi) << "query " << i << " key " << kb + j << " outside [" << lo << ", "
                                                   << hi << ") of rows " << i0 << ".." << i1;
                  }
            }
  }
}

TEST(Forward, FloatWithinRelativeBound) {
  const std::vector<Shape> shapes = {{1, 1, 1, 1, 1, 1},  {2, 31, 97, 4, 2, 32}, {1, 97, 31, 8, 1, 64},
                                     {1, 130, 257, 2, 1, 128}, {1, 65, 1000, 1, 1, 256}};
  for (const Shape& s : shapes)
    for (const Options& o : option_variants()) check_forward<float>(s, o);
}

TEST(Forward, RowsThatSeeNoKeyGiveZeroAndMinusInfinity) {
  // Causal with Nq > Nk: query i sees keys j <= i - (Nq - Nk), so the first rows see none.
  Options o;
  o.causal = true;
  Problem<double> p({1, 10, 4, 2, 1, 8}, fresh_seed());
  attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, one_split(o));
  Kokkos::fence();
  auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.o);
  auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.lse);
  for (int i = 0; i < 6; ++i)
    for (int h = 0; h < 2; ++h) {
      EXPECT_EQ(hl(0, h, i), -std::numeric_limits<double>::infinity());
      for (int d = 0; d < 8; ++d) EXPECT_EQ(ho(0, i, h, d), 0.0);
    }
  for (int h = 0; h < 2; ++h) EXPECT_TRUE(std::isfinite(hl(0, h, 6)));
  expect_close(p, reference_of(p, o), kDoubleTol, "causal Nq > Nk");
}

TEST(Forward, EmptyKeySequenceGivesEmptyRows) {
  for (const Options& o : option_variants()) check_forward<double>({2, 5, 0, 2, 1, 8}, o);
}

TEST(Forward, EmptyQuerySequenceWritesNothing) {
  Problem<double> p({2, 0, 7, 2, 1, 8}, fresh_seed());
  EXPECT_NO_THROW(attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, one_split(Options{})));
}

TEST(Forward, WindowThatExcludesEveryKeyGivesEmptyRows) {
  // The window lies right of every key for the first rows and left of every key for none.
  Options o;
  o.window_left = 0, o.window_right = 0;
  check_forward<double>({1, 8, 3, 1, 1, 4}, o);
}

TEST(Forward, StridedViewsOfPackedQkv) {
  // q, k and v as slices of one packed [B, N, 3, H, D] tensor: LayoutStride views.
  const int B = 2, N = 37, H = 4, D = 16;
  View5<double> qkv("qkv", B, N, 3, H, D);
  fill_normal(qkv, fresh_seed());
  auto q = Kokkos::subview(qkv, Kokkos::ALL, Kokkos::ALL, 0, Kokkos::ALL, Kokkos::ALL);
  auto k = Kokkos::subview(qkv, Kokkos::ALL, Kokkos::ALL, 1, Kokkos::ALL, Kokkos::ALL);
  auto v = Kokkos::subview(qkv, Kokkos::ALL, Kokkos::ALL, 2, Kokkos::ALL, Kokkos::ALL);
  Problem<double> ref({B, N, N, H, H, D}, 0);
  Kokkos::deep_copy(ref.q, q);
  Kokkos::deep_copy(ref.k, k);
  Kokkos::deep_copy(ref.v, v);
  Options o;
  o.causal = true;
  Problem<double> out = ref;
  out.o = View4<double>("o", B, N, H, D);
  out.lse = View3<double>("lse", B, H, N);
  poison(out.o);
  poison(out.lse);
  attention(TestSpace(), q, kv::dense(k, v), out.o, out.lse, one_split(o));
  reference(TestSpace(), ref.q, ref.k, ref.v, ref.o, ref.lse, o);
  Kokkos::fence();
  expect_close(out, ref, kDoubleTol, "strided q/k/v");
}

TEST(Forward, WithoutLse) {
  Problem<double> p({1, 17, 33, 2, 1, 8}, fresh_seed());
  attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, View3<double>());
  Kokkos::fence();
  const Problem<double> ref = reference_of(p, Options{});
  const Errors e = compare(to_host(p.o), to_host(ref.o));
  EXPECT_FALSE(e.nan_mismatch);
  EXPECT_LE(e.max_abs, kDoubleTol);
}

}  // namespace
}  // namespace test
}  // namespace kattn
