// 16-bit storage: the conversions, and attention over bf16 and fp16 inputs and caches (dense,
// ragged, paged; every mask, GQA ratio, tile size and split count the float tests cover) under
// FlashAttention's accuracy rule (storage16_support.hpp), float queries over 16-bit caches, and
// NaN propagating as in float.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/core/storage.hpp"
#include "kattn/detail/simd.hpp"
#include "ragged16_support.hpp"
#include "storage16_support.hpp"

namespace kattn {
namespace test {
namespace {

float from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// Round to nearest even of a float to `mantissa` bits at exponent range [min_exp, ...], through
// double: the rule the conversions must follow, written independently of them.
double round_to(double x, int mantissa, int min_exp, double max_finite) {
  if (std::isnan(x) || std::isinf(x) || x == 0) return x;
  int e;
  std::frexp(x, &e);  // x = f * 2^e, 0.5 <= |f| < 1
  const int exp = std::max(e - 1, min_exp);
  const double ulp = std::ldexp(1.0, exp - mantissa);
  const double r = std::nearbyint(x / ulp) * ulp;  // the default rounding mode: to nearest even
  const double overflow = max_finite + std::ldexp(1.0, std::ilogb(max_finite) - mantissa - 1);
  if (std::abs(r) > max_finite || std::abs(x) >= overflow) return std::copysign(INFINITY, x);
  return r;
}

TEST(Storage16, EveryBitPatternWidensAndNarrowsBack) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const bf16 x{static_cast<std::uint16_t>(b)};
    const fp16 y{static_cast<std::uint16_t>(b)};
    const float fx = widen(x), fy = widen(y);
    ASSERT_EQ(core::bits_of(fy), core::bits_of(core::fp16_bits_to_float(y.bits))) << "fp16 bits " << b;
    if (std::isnan(fx)) {
      ASSERT_TRUE(std::isnan(widen(narrow<bf16>(fx)))) << b;
    } else {
      ASSERT_EQ(narrow<bf16>(fx).bits, x.bits) << "bf16 bits " << b;
    }
    if (std::isnan(fy)) {
      ASSERT_TRUE(std::isnan(widen(narrow<fp16>(fy)))) << b;
      ASSERT_TRUE(std::isnan(core::fp16_bits_to_float(core::float_to_fp16_bits(fy)))) << b;
    } else {
      ASSERT_EQ(narrow<fp16>(fy).bits, y.bits) << "fp16 bits " << b;
      ASSERT_EQ(core::float_to_fp16_bits(fy), y.bits) << "fp16 bits " << b;
    }
  }
}

TEST(Storage16, NarrowingRoundsToNearestEven) {
  std::mt19937_64 gen(fresh_seed());
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int n = 0; n < 2000000; ++n) {
    // Random bit patterns (every exponent: subnormals, overflow), and values near fp16's range.
    const float x = n % 2 ? from_bits(bits(gen)) : from_bits(0x33000000u + bits(gen) % 0x14800000u) * (n % 4 ? 1 : -1);
    if (std::isnan(x)) continue;
    const double want_bf16 = round_to(x, 7, -126, 3.3895313892515355e38);
    const double want_fp16 = round_to(x, 10, -14, 65504.0);
    ASSERT_EQ(static_cast<double>(widen(narrow<bf16>(x))), want_bf16) << "bf16 of " << x;
    ASSERT_EQ(static_cast<double>(widen(narrow<fp16>(x))), want_fp16) << "fp16 of " << x;
    ASSERT_EQ(static_cast<double>(core::fp16_bits_to_float(core::float_to_fp16_bits(x))), want_fp16)
        << "fp16 bit rule of " << x;
  }
  EXPECT_EQ(narrow<fp16>(65520.0f).bits, 0x7c00);  // the tie past the largest finite: Inf
  EXPECT_EQ(narrow<fp16>(65519.0f).bits, 0x7bff);
}

#if KATTN_HOST_SIMD
TEST(Storage16, VectorLoadsWidenLikeTheScalarRule) {
  constexpr int W = detail::simd::width<float>();
  std::mt19937_64 gen(fresh_seed());
  std::uniform_int_distribution<std::uint32_t> bits(0, 65535);
  for (int n = 0; n < 10000; ++n) {
    bf16 b[W];
    fp16 h[W];
    for (int i = 0; i < W; ++i) b[i].bits = h[i].bits = static_cast<std::uint16_t>(bits(gen));
    const auto vb = detail::simd::load_as<float>(b);
    const auto vh = detail::simd::load_as<float>(h);
    for (int i = 0; i < W; ++i) {
      const float wb = widen(b[i]), wh = widen(h[i]);
      if (std::isnan(wb))
        ASSERT_TRUE(std::isnan(vb[i]));
      else
        ASSERT_EQ(vb[i], wb);
      if (std::isnan(wh))
        ASSERT_TRUE(std::isnan(vh[i]));
      else
        ASSERT_EQ(vh[i], wh);
    }
  }
}

// The vector rounding of the output rows (simd::store_as) against the scalar rule narrow<bf16>, bit
// for bit: random bit patterns (NaN, Inf, subnormals among them) and exact halfway cases.
TEST(Storage16, VectorNarrowingToBf16MatchesNarrow) {
  constexpr int W = detail::simd::width<float>();
  std::mt19937_64 gen(fresh_seed());
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int n = 0; n < 10000; ++n) {
    float x[W];
    for (int i = 0; i < W; ++i) {
      std::uint32_t u = bits(gen);
      if (n % 3 == 0) u = (u & 0xffff0000u) | 0x8000u;  // halfway between two bf16
      std::memcpy(&x[i], &u, sizeof u);
    }
    detail::simd::vec<float> v;
    std::memcpy(&v, x, sizeof v);
    bf16 got[W];
    detail::simd::store_as<bf16, float>(got, v);
    for (int i = 0; i < W; ++i) ASSERT_EQ(got[i].bits, narrow<bf16>(x[i]).bits) << std::hex << x[i];
  }
}
#endif

template <class S>
void check_dense(const Shape& shape, const Options& opt) {
  const std::uint64_t seed = fresh_seed();
  const std::string what =
      std::string(storage_name<S>()) + " " + describe(shape, opt) + " seed=" + std::to_string(seed);
  SCOPED_TRACE(what);
  Problem16<S> p(shape, seed);
  attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt);
  Kokkos::fence();
  const auto h = p.host();
  expect_16bit_rule<S>(h.params(), opt, to_host(p.o), to_host(p.lse), what);
}

template <class S>
void check_dense_everywhere() {
  const std::vector<Shape> shapes = {{1, 1, 1, 1, 1, 1},     {2, 1, 37, 2, 1, 16},   {1, 37, 1, 8, 1, 8},
                                     {1, 13, 13, 2, 2, 3},   {2, 31, 97, 4, 2, 32},  {1, 97, 31, 8, 1, 64},
                                     {1, 64, 64, 2, 1, 128}, {1, 29, 53, 2, 1, 256}, {1, 130, 257, 2, 1, 128}};
  for (const Shape& s : shapes)
    for (const Options& o : option_variants()) check_dense<S>(s, one_split(o));
}

TEST(Storage16, Bf16DenseMeetsTheRuleForEveryVariantAndShape) { check_dense_everywhere<bf16>(); }
TEST(Storage16, Fp16DenseMeetsTheRuleForEveryVariantAndShape) { check_dense_everywhere<fp16>(); }

TEST(Storage16, GqaRatiosTilesAndSplits) {
  for (int ratio : {1, 2, 8})
    for (const Options& o : option_variants()) {
      check_dense<bf16>({2, 21, 45, 2 * ratio, 2, 24}, o);
      check_dense<fp16>({1, 1, 300, 2 * ratio, 2, 64}, o);  // decode: the row tiles
    }
  const Shape s{1, 29, 41, 4, 2, 12};
  for (int bk : {1, 3, 8, 41, 64})
    for (int bq : {1, 5, 58})
      for (bool causal : {false, true}) {
        Options o;
        o.block_q = bq;
        o.block_k = bk;
        o.causal = causal;
        o.window_left = causal ? 9 : -1;
        check_dense<bf16>(s, one_split(o));
        check_dense<fp16>(s, one_split(o));
      }
  for (int splits : {0, 1, 2, 7, 41, 100}) {  // more splits than keys too
    Options o;
    o.splits = splits;
    check_dense<bf16>(s, o);
    check_dense<fp16>({2, 1, 1000, 8, 2, 128}, o);
    o.causal = true;
    check_dense<bf16>({1, 3, 500, 4, 4, 72}, o);  // a head dim the lanes do not divide: copied rows
  }
}

// Ragged and paged batches in storage S against the rule, each sequence's rows checked.
template <class S>
void check_ragged_and_paged(const std::vector<std::int64_t>& q_lens, const std::vector<std::int64_t>& kv_lens, int Hq,
                            int Hkv, int D, int page, const Options& opt) {
  const std::uint64_t seed = fresh_seed();
  RaggedProblem<double> exact(q_lens, kv_lens, Hq, Hkv, D, seed);
  const std::string what = std::string(storage_name<S>()) + " " + exact.what() + " page=" + std::to_string(page) + " " +
                           describe(Shape{}, opt) + " seed=" + std::to_string(seed);
  SCOPED_TRACE(what);
  // The exact inputs rounded to S, in place, and their S copies.
  const View3<S> q = rounded_copy<S>(exact.q), k = rounded_copy<S>(exact.k), v = rounded_copy<S>(exact.v);
  View3<S> o("o", exact.o.extent(0), Hq, D);
  View2<float> lse("lse", exact.lse.extent(0), Hq);
  const RaggedHost host(exact);
  const AttentionParams<double> pd = host.params();

  poison(o);
  poison(lse);
  const auto ragged = make_ragged_layout<TestMemory>(host_index(exact.q_indptr()), host_index(exact.kv_indptr()));
  attention(TestSpace(), q, kv::ragged(k, v, ragged), o, lse, opt);
  Kokkos::fence();
  expect_16bit_rule<S>(pd, opt, to_host(o), to_host(lse), "ragged " + what);

  // The same keys in a paged cache of S (the exact copy's pages, rounded already).
  PagedCopy<double> cache(exact, page, seed + 11);
  View4<S> kp("kp", cache.k.extent(0), page, Hkv, D), vp("vp", cache.v.extent(0), page, Hkv, D);
  convert_into(cache.k, kp);
  convert_into(cache.v, vp);
  const auto paged =
      make_paged_layout<TestMemory>(host_index(exact.q_indptr()), host_index(cache.page_indptr),
                                    host_index(cache.page_indices), host_index(cache.last_page_len), page);
  poison(o);
  poison(lse);
  attention(TestSpace(), q, kv::paged(kp, vp, paged), o, lse, opt);
  Kokkos::fence();
  expect_16bit_rule<S>(pd, opt, to_host(o), to_host(lse), "paged " + what);
}

TEST(Storage16, RaggedAndPagedBatches) {
  const std::vector<std::int64_t> kv_lens = {1, 700, 3, 50, 0, 300};
  for (const std::vector<std::int64_t>& q_lens :
       {std::vector<std::int64_t>{1, 1, 1, 0, 1, 1}, std::vector<std::int64_t>{1, 1, 3, 0, 1, 12}})
    for (int page : {1, 16})
      for (bool causal : {false, true})
        for (int splits : {0, 1, 5}) {
          Options o;
          o.causal = causal;
          o.splits = splits;
          check_ragged_and_paged<bf16>(q_lens, kv_lens, 8, 2, 32, page, o);
          check_ragged_and_paged<fp16>(q_lens, kv_lens, 8, 2, 32, page, o);
        }
  std::vector<Options> v(3);
  v[0].window_left = 20, v[0].window_right = 0;
  v[1].softcap = 4.0;
  v[2].causal = true, v[2].scale = 0.3;
  for (const Options& o : v) check_ragged_and_paged<bf16>({1, 2, 1}, {129, 17, 1000}, 16, 2, 128, 16, o);
}

// Float queries over a 16-bit cache: computed in float throughout, so within float's bound of the
// float64 result on the same (rounded) keys and values.
template <class KV>
void check_mixed(const Shape& s, const Options& opt) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(std::string("float q, ") + storage_name<KV>() + " kv " + describe(s, opt) +
               " seed=" + std::to_string(seed));
  View4<float> q("q", s.B, s.Nq, s.Hq, s.D), o("o", s.B, s.Nq, s.Hq, s.D);
  View3<float> lse("lse", s.B, s.Hq, s.Nq);
  View4<KV> k("k", s.B, s.Nk, s.Hkv, s.D), v("v", s.B, s.Nk, s.Hkv, s.D);
  Problem<double> ref(s, 0);
  fill_rounded(q, ref.q, seed);
  fill_rounded(k, ref.k, seed + 1);
  fill_rounded(v, ref.v, seed + 2);
  poison(o);
  poison(lse);
  attention(TestSpace(), q, kv::dense(k, v), o, lse, opt);
  Kokkos::fence();
  reference(TestSpace(), ref.q, ref.k, ref.v, ref.o, ref.lse, opt);
  Kokkos::fence();
  expect_outputs_close(o, lse, to_host(ref.o), to_host(ref.lse), "mixed");
}

TEST(Storage16, FloatQueriesOver16BitCaches) {
  for (const Options& o : option_variants()) {
    check_mixed<bf16>({3, 1, 777, 8, 2, 128}, o);  // decode, GQA 4:1
    check_mixed<fp16>({1, 1, 300, 1, 1, 64}, o);
    check_mixed<bf16>({1, 37, 61, 2, 1, 40}, o);  // prefill: the column tiles, widened per tile
  }
  for (int splits : {0, 3, 1000}) {
    Options o;
    o.splits = splits;
    check_mixed<fp16>({2, 1, 999, 4, 4, 128}, o);
  }
}

// A NaN in a 16-bit input reaches the rows the float64 reference says it reaches, and no others.
TEST(Storage16, NaNPropagatesAsInFloat) {
  for (int where = 0; where < 3; ++where)
    for (const Shape& s : {Shape{1, 9, 40, 2, 1, 16}, Shape{1, 1, 200, 4, 2, 64}}) {
      Options o;
      o.causal = true;
      o.window_left = 12;
      Problem16<bf16> p(s, fresh_seed());
      const auto inject = [](const auto& view, const auto& exact, int i) {
        using S = typename std::decay_t<decltype(view)>::non_const_value_type;
        auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), view);
        auto he = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), exact);
        h(0, i, 0, 1) = narrow<S>(std::numeric_limits<float>::quiet_NaN());
        he(0, i, 0, 1) = std::numeric_limits<double>::quiet_NaN();
        Kokkos::deep_copy(view, h);
        Kokkos::deep_copy(exact, he);
      };
      if (where == 0) inject(p.q, p.qd, s.Nq - 1);
      if (where == 1) inject(p.k, p.kd, s.Nk / 2);
      if (where == 2) inject(p.v, p.vd, s.Nk - 3);
      attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, o);
      Kokkos::fence();
      const auto h = p.host();
      expect_16bit_rule<bf16>(h.params(), o, to_host(p.o), to_host(p.lse), "NaN in input " + std::to_string(where));
    }
}

}  // namespace
}  // namespace test
}  // namespace kattn
