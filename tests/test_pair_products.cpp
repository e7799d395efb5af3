// bf16 multiplied as pairs (detail/pair_gemm.hpp, cpu_products.hpp): the instruction's kernels
// against their emulation bit for bit where the CPU has the instruction, the emulation against
// exact float arithmetic everywhere, the AMX tile blocks (detail/amx_gemm.hpp) against exact
// sums where the CPU has them, and attention on each products choice under the 16-bit rule.
// (The whole Storage16 suite runs again under KATTN_CPU_PRODUCTS=widened, =bf16-dot and =amx with
// the instructions hidden, and =amx as this CPU has it: tests/CMakeLists.txt.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/cpu_products.hpp"
#include "kattn/detail/amx_gemm.hpp"
#include "kattn/detail/exp2.hpp"
#include "kattn/detail/pair_column_tiles.hpp"
#include "kattn/detail/pair_gemm.hpp"
#include "kattn/errors.hpp"
#include "storage16_support.hpp"

namespace kattn {
namespace test {
namespace {

using detail::Pair;

float bits_float(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
std::uint32_t float_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// A bf16 drawn mostly unit-normal, sometimes a special: zero, subnormal, huge, Inf or NaN.
std::uint16_t draw_bf16(std::mt19937_64& gen, bool specials) {
  std::uniform_int_distribution<int> pick(0, 99);
  std::normal_distribution<float> normal;
  const int k = specials ? pick(gen) : 99;
  if (k < 3) return static_cast<std::uint16_t>(pick(gen) % 2 ? 0x8000 : 0);             // +-0
  if (k < 6) return static_cast<std::uint16_t>((pick(gen) % 2 ? 0x8000 : 0) | 0x0045);  // subnormal
  if (k < 8) return 0x7f7f;                                                             // largest finite
  if (k < 9) return 0x7f80;                                                             // Inf
  if (k < 10) return 0x7fc1;                                                            // NaN
  return narrow<bf16>(normal(gen)).bits;
}

Pair draw_pair(std::mt19937_64& gen, bool specials) {
  return draw_bf16(gen, specials) | (std::uint32_t(draw_bf16(gen, specials)) << 16);
}

// Equal bits, or both NaN (the instruction's NaN payloads are its own).
bool same(float a, float b) { return float_bits(a) == float_bits(b) || (std::isnan(a) && std::isnan(b)); }

TEST(PairProducts, EmulationIsTwoFusedMultiplyAddsOddFirst) {
  std::mt19937_64 gen(fresh_seed());
  for (int n = 0; n < 100000; ++n) {
    const Pair a = draw_pair(gen, false), b = draw_pair(gen, false);
    const float acc = bits_float(float_bits(std::normal_distribution<float>()(gen)));
    const float odd = std::fma(widen(bf16{static_cast<std::uint16_t>(a >> 16)}),
                               widen(bf16{static_cast<std::uint16_t>(b >> 16)}), acc);
    const float want = std::fma(widen(bf16{static_cast<std::uint16_t>(a & 0xffff)}),
                                widen(bf16{static_cast<std::uint16_t>(b & 0xffff)}), odd);
    ASSERT_TRUE(same(detail::pair_dot(acc, a, b), want)) << std::hex << a << " " << b;
  }
  // Subnormal inputs read as zero; a subnormal result flushes to zero.
  EXPECT_EQ(detail::pair_dot(0.0f, 0x00450000u, 0x71000000u), 0.0f);            // subnormal x 2^99 would be normal
  EXPECT_EQ(float_bits(detail::pair_dot(0.0f, 0x00000080u, 0x00003f00u)), 0u);  // 2^-126 x 0.5 flushes
}

TEST(PairProducts, RoundingToBf16MatchesTheScalarRule) {
  std::mt19937_64 gen(fresh_seed());
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int n = 0; n < 100000; ++n) {
    const float x = bits_float(bits(gen));
    const std::uint32_t got = detail::bf16_bits_daz(x);
    if (std::isnan(x))
      EXPECT_TRUE(std::isnan(widen(bf16{static_cast<std::uint16_t>(got)})));
    else if ((float_bits(x) & 0x7f800000u) == 0)
      EXPECT_EQ(got, (float_bits(x) >> 16) & 0x8000u) << x;
    else
      EXPECT_EQ(got, narrow<bf16>(x).bits) << x;
  }
}

#if KATTN_X86_BF16_DOT
// The instruction's micro-kernel and pair packing against the emulation, on random operands with
// specials, every K up to 70 pairs, both forms of C (scaled by column; fresh times out_scale).
TEST(PairProducts, InstructionMatchesItsEmulationBitForBit) {
  if (!bf16_dot_on_hardware()) GTEST_SKIP() << "this CPU has no AVX512_BF16: the emulation alone runs here";
  constexpr int R = 8, J = 32;
  std::mt19937_64 gen(fresh_seed());
  for (int K2 : {0, 1, 2, 7, 64, 70})
    for (bool specials : {false, true})
      for (bool scaled : {false, true}) {
        const int a_m = K2 + 3;  // strided A, as K rows read in place
        std::vector<Pair> A(std::size_t(R) * a_m + 1), B(std::size_t(K2) * J + 1);
        for (Pair& x : A) x = draw_pair(gen, specials);
        for (Pair& x : B) x = draw_pair(gen, specials);
        std::vector<float> C0(R * J), scale(J);
        for (float& x : C0) x = std::normal_distribution<float>()(gen);
        for (float& x : scale) x = std::uniform_real_distribution<float>(0, 1)(gen);
        std::vector<float> hw = C0, em = C0;
        const float* s = scaled ? scale.data() : nullptr;
        detail::pair_micro_gemm_avx512<R, J>(K2, A.data(), a_m, 1, B.data(), J, hw.data(), J, s, 0.125f);
        detail::pair_micro_gemm_emulated<R, J>(K2, A.data(), a_m, 1, B.data(), J, em.data(), J, s, 0.125f);
        for (int i = 0; i < R * J; ++i)
          ASSERT_TRUE(same(hw[i], em[i])) << "K2=" << K2 << " specials=" << specials << " scaled=" << scaled
                                          << " element " << i << ": " << hw[i] << " vs " << em[i];
      }
  std::uniform_int_distribution<std::uint32_t> bits;
  for (int n = 0; n < 2000; ++n) {
    std::vector<float> even(64), odd(64);
    for (int c = 0; c < 64; ++c) {
      even[c] = bits_float(n % 2 ? bits(gen) : float_bits(std::normal_distribution<float>()(gen)));
      odd[c] = bits_float(bits(gen) & (n % 3 ? 0xffffffffu : 0x807fffffu));  // subnormals too
    }
    std::vector<Pair> hw(64), em(64);
    detail::pack_pairs_avx512(even.data(), odd.data(), hw.data(), 64);
    detail::pack_pairs_emulated(even.data(), odd.data(), em.data(), 64);
    for (int c = 0; c < 64; ++c) {
      const auto half = [](Pair p, int s) { return widen(bf16{static_cast<std::uint16_t>(p >> s)}); };
      ASSERT_TRUE(same(half(hw[c], 0), half(em[c], 0)) && same(half(hw[c], 16), half(em[c], 16)))
          << std::hex << float_bits(even[c]) << " " << float_bits(odd[c]) << ": " << hw[c] << " vs " << em[c];
    }
  }
}

// The backward's padded packs (two rows as pairs of rows; one row as pairs of consecutive
// elements; zero past n and for a null row) on the instruction against their emulation, every n
// from 0 to 70 into 80 pairs, with specials and subnormals.
TEST(PairProducts, PaddedPacksMatchTheirEmulation) {
  if (!bf16_dot_on_hardware()) GTEST_SKIP() << "this CPU has no AVX512_BF16: the emulation alone runs here";
  std::mt19937_64 gen(fresh_seed());
  std::uniform_int_distribution<std::uint32_t> bits;
  const auto draw = [&](int n) {
    std::vector<float> x(n + 1);
    for (float& v : x) v = bits_float(n % 2 ? bits(gen) : float_bits(std::normal_distribution<float>()(gen)));
    return x;
  };
  const auto expect_same = [](const std::vector<Pair>& hw, const std::vector<Pair>& em, const char* what, int n) {
    const auto half = [](Pair p, int s) { return widen(bf16{static_cast<std::uint16_t>(p >> s)}); };
    for (std::size_t c = 0; c < hw.size(); ++c)
      ASSERT_TRUE(same(half(hw[c], 0), half(em[c], 0)) && same(half(hw[c], 16), half(em[c], 16)))
          << what << " n=" << n << " pair " << c << ": " << std::hex << hw[c] << " vs " << em[c];
  };
  for (int n = 0; n <= 70; ++n) {
    const std::vector<float> even = draw(n), odd = draw(n), row = draw(n);
    std::vector<Pair> hw(80, 0xdeadbeefu), em(80, 0x12345678u);
    detail::pack_pairs_padded_avx512(even.data(), odd.data(), hw.data(), n, 80);
    detail::pack_pairs_padded_emulated(even.data(), odd.data(), em.data(), n, 80);
    expect_same(hw, em, "pairs of rows", n);
    detail::pack_pairs_padded_avx512(even.data(), nullptr, hw.data(), n, 80);
    detail::pack_pairs_padded_emulated(even.data(), nullptr, em.data(), n, 80);
    expect_same(hw, em, "pairs of rows, odd row null", n);
    detail::pack_row_pairs_padded_avx512(row.data(), hw.data(), n, 48);
    detail::pack_row_pairs_padded_emulated(row.data(), em.data(), n, 48);
    expect_same(hw, em, "one row's pairs", n);
    detail::pack_row_pairs_padded_avx512(nullptr, hw.data(), n, 48);
    for (int c = 0; c < 48; ++c) ASSERT_EQ(hw[c], 0u) << "null row, pair " << c;
  }
}

// The unmasked tiles' fused pass (2^(S^T - m), column sums, pairs) against its definition: the
// scalar exp2 (with its clamps) of each score, summed in key order onto l, rounded pairs; scores
// far below their column's max, -Inf and NaN among them.
TEST(PairProducts, FusedExponentiateAndPackMatchesItsDefinition) {
  if (!bf16_dot_on_hardware()) GTEST_SKIP() << "this CPU has no AVX512_BF16";
  std::mt19937_64 gen(fresh_seed());
  std::uniform_int_distribution<int> pick(0, 99);
  std::normal_distribution<float> normal(0.0f, 20.0f);
  for (int keys : {2, 8, 64}) {
    constexpr int cols = 32, ld = 48;
    std::vector<float> st(std::size_t(keys) * ld), m(cols), l(cols), l_want(cols);
    for (float& x : st) {
      const int k = pick(gen);
      x = k == 0 ? -std::numeric_limits<float>::infinity()
                 : k == 1 ? std::numeric_limits<float>::quiet_NaN() : k == 2 ? 300.0f : normal(gen);
    }
    // m as the tile loop passes it: at least every score of its column (the running max, possibly
    // above this tile's), or 0 for a column of -inf; NaN columns take any.
    for (int c = 0; c < cols; ++c) {
      float top = -std::numeric_limits<float>::infinity();
      for (int j = 0; j < keys; ++j) top = std::max(top, st[std::size_t(j) * ld + c]);  // NaN skipped
      m[c] = top == -std::numeric_limits<float>::infinity() ? 0.0f : top + (pick(gen) < 50 ? 0.0f : std::abs(normal(gen)));
      l[c] = l_want[c] = std::abs(normal(gen));
    }
    std::vector<Pair> got(std::size_t(keys / 2) * ld), want(got.size());
    detail::exponentiate_pairs_avx512(st.data(), keys, ld, m.data(), l.data(), got.data(), cols);
    for (int c = 0; c < cols; ++c) {
      float sum = 0.0f;
      for (int j2 = 0; j2 < keys / 2; ++j2) {
        const float p0 = detail::exp2_scalar(st[std::size_t(2 * j2) * ld + c] - m[c]);  // clamped: same bits
        const float p1 = detail::exp2_scalar(st[std::size_t(2 * j2 + 1) * ld + c] - m[c]);
        sum += p0;
        sum += p1;
        detail::pack_pairs_emulated(&p0, &p1, &want[std::size_t(j2) * ld + c], 1);
      }
      l_want[c] += sum;
    }
    for (int c = 0; c < cols; ++c) {
      ASSERT_TRUE(same(l[c], l_want[c])) << "keys=" << keys << " column " << c << ": " << l[c] << " vs " << l_want[c];
      for (int j2 = 0; j2 < keys / 2; ++j2) {
        const Pair a = got[std::size_t(j2) * ld + c], b = want[std::size_t(j2) * ld + c];
        const auto half = [](Pair p, int s) { return widen(bf16{static_cast<std::uint16_t>(p >> s)}); };
        ASSERT_TRUE(same(half(a, 0), half(b, 0)) && same(half(a, 16), half(b, 16)))
            << "keys=" << keys << " pair " << j2 << " column " << c << std::hex << ": " << a << " vs " << b;
      }
    }
  }
}
#endif

#if KATTN_X86_AMX
// The tile blocks (every shape of 1 or 2 tiles a side, fresh C times out_scale or C scaled by
// column, K2 of 0 to 4 tiles) against the exact sums of their bf16 products, to float's rounding
// of each addition: the unit's own order of additions is not IEEE's (amx_gemm.hpp), so the bound
// is the sum of |terms| times (K + 1) epsilon, not bits.
template <int MT, int NT>
void check_amx_block(std::mt19937_64& gen, int K2, bool scaled) {
  constexpr int T = detail::amx_tile, M = MT * T, N = NT * T;
  const int a_row = K2 + 16, ldb = N + 16, ldc = N + 8;  // strided, as K rows read in place
  std::vector<Pair> A(std::size_t(M) * a_row), B(std::size_t(std::max(K2, 1)) * ldb);
  for (Pair& x : A) x = draw_pair(gen, false);
  for (Pair& x : B) x = draw_pair(gen, false);
  std::vector<float> C(std::size_t(M) * ldc), scale(N);
  for (float& x : C) x = std::normal_distribution<float>()(gen);
  for (float& x : scale) x = std::uniform_real_distribution<float>(0, 1)(gen);
  if (scaled && K2 == 16) std::fill(scale.begin(), scale.end(), 1.0f);  // the unscaled shortcut
  const std::vector<float> C0 = C;
  const float out_scale = 0.375f;
  detail::amx_configure();
  std::vector<float> col_max(N, -std::numeric_limits<float>::infinity());
  if (K2 == 16) col_max[1] = std::numeric_limits<float>::quiet_NaN();  // NaN stays NaN
  detail::amx_block<MT, NT>(K2, A.data(), a_row, B.data(), ldb, C.data(), ldc, scaled ? scale.data() : nullptr,
                            out_scale, col_max.data());
  const auto half = [](Pair p, int s) { return double(widen(bf16{static_cast<std::uint16_t>(p >> s)})); };
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double exact = scaled ? double(C0[std::size_t(m) * ldc + n]) * scale[n] : 0.0, size = std::abs(exact);
      for (int k = 0; k < K2; ++k) {
        const Pair a = A[std::size_t(m) * a_row + k], b = B[std::size_t(k) * ldb + n];
        for (int s : {0, 16}) {
          exact += half(a, s) * half(b, s);
          size += std::abs(half(a, s) * half(b, s));
        }
      }
      if (!scaled) exact *= out_scale, size *= out_scale;
      const double got = C[std::size_t(m) * ldc + n];
      ASSERT_LE(std::abs(got - exact), size * (2 * K2 + 2) * 0x1p-24 + 1e-37)
          << MT << "x" << NT << " tiles, K2=" << K2 << " scaled=" << scaled << " at (" << m << ", " << n << ")";
    }
  for (int n = 0; n < N; ++n) {
    float want = -std::numeric_limits<float>::infinity();
    for (int m = 0; m < M; ++m) want = std::max(want, C[std::size_t(m) * ldc + n]);
    if (K2 == 16 && n == 1)
      EXPECT_TRUE(std::isnan(col_max[n]));
    else
      EXPECT_EQ(col_max[n], want) << "column " << n;
  }
}

TEST(PairProducts, AmxBlocksMatchExactSums) {
  if (!amx_on_hardware()) GTEST_SKIP() << "AMX not on this CPU or not given: " << amx_refusal();
  std::mt19937_64 gen(fresh_seed());
  for (int K2 : {0, 16, 64})
    for (bool scaled : {false, true}) {
      check_amx_block<2, 2>(gen, K2, scaled);
      check_amx_block<2, 1>(gen, K2, scaled);
      check_amx_block<1, 2>(gen, K2, scaled);
      check_amx_block<1, 1>(gen, K2, scaled);
    }
}
#endif

// Attention in bf16 under each products choice, the shapes where pairs are awkward: odd and
// non-multiple-of-16 head dims (the odd dim's partner is zero), one key, one query, an odd number
// of keys in the last tile, GQA, every variant.
TEST(PairProducts, AttentionMeetsTheRuleOnEachChoice) {
  const std::vector<Shape> shapes = {{1, 1, 1, 1, 1, 2},    {1, 3, 1, 2, 1, 3},      {1, 17, 9, 1, 1, 5},
                                     {2, 19, 33, 4, 2, 40}, {1, 40, 67, 2, 1, 72},   {1, 33, 129, 2, 2, 200},
                                     {1, 70, 70, 8, 1, 64}, {1, 130, 257, 2, 1, 128}};
  for (const CpuProducts products :
       {CpuProducts::automatic, CpuProducts::widened, CpuProducts::bf16_dot, CpuProducts::amx})
    for (const Shape& s : shapes)
      for (Options o : option_variants()) {
        o.cpu_products = products;
        const std::uint64_t seed = fresh_seed();
        const std::string what =
            std::string(cpu_products_name(products)) + " " + describe(s, o) + " seed=" + std::to_string(seed);
        SCOPED_TRACE(what);
        Problem16<bf16> p(s, seed);
        attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, one_split(o));
        Kokkos::fence();
        const auto h = p.host();
        expect_16bit_rule<bf16>(h.params(), o, to_host(p.o), to_host(p.lse), what);
      }
}

// Tiles the caller sizes, and splits (the chunk partials of the MPI layer's deterministic mode
// take the same kernel), on the dot products.
TEST(PairProducts, TilesAndSplits) {
  const Shape s{1, 29, 83, 4, 2, 24};
  for (int bk : {1, 3, 8, 41, 64})
    for (int bq : {1, 5, 58})
      for (int splits : {1, 3, 100}) {
        Options o;
        o.block_q = bq, o.block_k = bk, o.splits = splits, o.causal = bk % 2 == 1;
        o.cpu_products = splits == 3 ? CpuProducts::amx : CpuProducts::bf16_dot;
        const std::uint64_t seed = fresh_seed();
        SCOPED_TRACE(describe(s, o) + " seed=" + std::to_string(seed));
        Problem16<bf16> p(s, seed);
        attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, o);
        Kokkos::fence();
        const auto h = p.host();
        expect_16bit_rule<bf16>(h.params(), o, to_host(p.o), to_host(p.lse), "tiles and splits");
      }
}

// K and V rows an odd number of elements apart (a subview of a wider array): the layouts that read
// K's rows in place as pairs copy them instead, so the output is the contiguous call's, bit for
// bit, on each products choice.
TEST(PairProducts, OddRowStridesReadAsTheContiguousCall) {
  const Shape s{1, 70, 96, 2, 2, 64};
  for (const CpuProducts products : {CpuProducts::bf16_dot, CpuProducts::amx}) {
    SCOPED_TRACE(cpu_products_name(products));
    Problem16<bf16> p(s, fresh_seed());
    Kokkos::View<bf16****, TestSpace::memory_space> k_wide("k", s.B, s.Nk, s.Hkv, s.D + 1),
        v_wide("v", s.B, s.Nk, s.Hkv, s.D + 1);
    const auto all = Kokkos::ALL;
    const auto k = Kokkos::subview(k_wide, all, all, all, std::make_pair(0, s.D));
    const auto v = Kokkos::subview(v_wide, all, all, all, std::make_pair(0, s.D));
    Kokkos::deep_copy(k, p.k);
    Kokkos::deep_copy(v, p.v);
    Options o;
    o.cpu_products = products;
    attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, o);
    decltype(p.o) o_strided("o_strided", s.B, s.Nq, s.Hq, s.D);
    attention(TestSpace(), p.q, kv::dense(k, v), o_strided, p.lse, o);
    Kokkos::fence();
    const std::vector<double> a = to_host(p.o), b = to_host(o_strided);  // widened: exact
    for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "element " << i;
  }
}

// A NaN in V under a causal mask at a head dim that is not whole vectors: the exact path of
// masked tiles reads V's rows where they lie, over the head dim alone, and only the rows that see
// the NaN key get NaN.
TEST(PairProducts, NaNValueSeenOnlyByItsRowsAtAnOddHeadDim) {
  const Shape s{1, 40, 40, 1, 1, 5};
  for (const CpuProducts products : {CpuProducts::widened, CpuProducts::bf16_dot, CpuProducts::amx}) {
    SCOPED_TRACE(cpu_products_name(products));
    Problem16<bf16> p(s, fresh_seed());
    auto v = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.v);
    v(0, s.Nk - 1, 0, 0) = narrow<bf16>(std::numeric_limits<float>::quiet_NaN());
    Kokkos::deep_copy(p.v, v);
    Options o;
    o.causal = true;
    o.cpu_products = products;
    attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, o);
    Kokkos::fence();
    const std::vector<double> out = to_host(p.o);  // [1, Nq, 1, D]
    for (int i = 0; i < s.Nq; ++i)
      for (int d = 0; d < s.D; ++d) {
        const double x = out[std::size_t(i) * s.D + d];
        if (i == s.Nq - 1 && d == 0)
          EXPECT_TRUE(std::isnan(x)) << "row " << i;
        else
          EXPECT_TRUE(std::isfinite(x)) << "row " << i << " dim " << d << ": " << x;
      }
  }
}

TEST(PairProducts, NamesParseAndRefuse) {
  for (const CpuProducts p : {CpuProducts::automatic, CpuProducts::widened, CpuProducts::bf16_dot, CpuProducts::amx})
    EXPECT_EQ(parse_cpu_products(cpu_products_name(p)), p);
  try {
    parse_cpu_products("fast", "--cpu-products");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--cpu-products: expected auto, widened, bf16-dot or amx, got 'fast'"),
              std::string::npos)
        << e.what();
  }
  // Only bf16 queries and keys take the dot products; the others are widened whatever is asked.
  EXPECT_EQ((host_cpu_products<bf16, bf16>(CpuProducts::bf16_dot)), CpuProducts::bf16_dot);
  EXPECT_EQ((host_cpu_products<bf16, bf16>(CpuProducts::amx)), CpuProducts::amx);
  EXPECT_EQ((host_cpu_products<fp16, fp16>(CpuProducts::amx)), CpuProducts::widened);
  // auto: the tiles where they run, else the instruction on AMD's cores, else the widening.
  const CpuProducts automatic = host_cpu_products<bf16, bf16>(CpuProducts::automatic);
  if (std::getenv("KATTN_CPU_PRODUCTS") == nullptr) {
    EXPECT_EQ(automatic, amx_on_hardware()                               ? CpuProducts::amx
                         : bf16_dot_on_hardware() && cpu_features().amd ? CpuProducts::bf16_dot
                                                                          : CpuProducts::widened);
  }
  // A CPU with AMX that kattn does not use says why.
  if (cpu_features().amx_bf16 && !amx_on_hardware()) {
    EXPECT_NE(cpu_products_text().find("cpu notice: AMX not used: " + amx_refusal()), std::string::npos);
  }
  EXPECT_EQ((host_cpu_products<bf16, bf16>(CpuProducts::widened)), CpuProducts::widened);
  EXPECT_EQ((host_cpu_products<fp16, fp16>(CpuProducts::bf16_dot)), CpuProducts::widened);
  EXPECT_EQ((host_cpu_products<float, bf16>(CpuProducts::bf16_dot)), CpuProducts::widened);
  EXPECT_EQ((host_cpu_products<float, float>(CpuProducts::bf16_dot)), CpuProducts::widened);
  EXPECT_NE(cpu_products_text().find("cpu products: bf16 "), std::string::npos) << cpu_products_text();
}

}  // namespace
}  // namespace test
}  // namespace kattn
