// Tile products on bf16 pairs: the micro-kernel policy of 16-bit storage on CPUs with AVX512_BF16
// (Zen 4, Zen 5, Intel since Cooper Lake), whose vdpbf16ps multiplies 16 lanes of bf16 pairs and
// adds both products to float accumulators: twice the float FMA's work per instruction.
//
//   C (M x N, float) = [C scaled by column | 0] + out_scale * A (M x K2 pairs) B (K2 pairs x N)
//
// An operand element is a pair: two bf16 values of consecutive k in one 32-bit word, the even one
// in the low half (`Pair`). A is addressed by strides (A(m, k2) = A[m * a_m + k2 * a_k], so K rows
// read in place are a_m = row stride, a_k = 1), B row-major with the pairs of one k2 side by side
// over n (the "VNNI" layout). Products of two bf16 values are exact in float; the instruction adds
// them to the accumulator one at a time, the odd element's product first (checked bit for bit on
// Zen 4 against two fused multiply-adds), flushing subnormal inputs and results to zero. The
// emulation does exactly that, so a machine without the instruction computes the same bits: the
// tests run the rounding everywhere, and a user may ask for it to compare machines.
//
// The instruction's micro-kernel is a function compiled for AVX512_BF16 alone
// (`__attribute__((target))`) and called only where the CPU has it (cpu_products.hpp), so a build
// for any x86-64 carries it. Team-level routines do not barrier on exit (tile_gemm.hpp's contract).
#pragma once

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kattn/core/storage.hpp"
#include "kattn/detail/simd.hpp"
#include "kattn/detail/tile_gemm.hpp"

// The instruction's kernels are built for x86-64 hosts whose build targets AVX-512 vectors (the
// micro-tiles are then whole 16-lane vectors), by GCC 10+ or Clang, outside nvcc and hipcc.
#if KATTN_HOST_SIMD && defined(__x86_64__) && defined(__AVX512F__) && !defined(__CUDACC__) && !defined(__HIPCC__) && \
    (defined(__clang__) || (defined(__GNUC__) && __GNUC__ >= 10))
#define KATTN_X86_BF16_DOT 1
#include <immintrin.h>
#else
#define KATTN_X86_BF16_DOT 0
#endif

namespace kattn {
namespace detail {

// Two bf16 values of consecutive k: the even one in bits 0-15, the odd one in bits 16-31.
using Pair = std::uint32_t;

// Dims 2 d2 and 2 d2 + 1 of a bf16 row of D as a pair (zero past D, or for a null row).
KOKKOS_INLINE_FUNCTION Pair row_pair(const bf16* row, int d2, int D) {
  const std::uint32_t lo = row && 2 * d2 < D ? row[2 * d2].bits : 0u;
  const std::uint32_t hi = row && 2 * d2 + 1 < D ? row[2 * d2 + 1].bits : 0u;
  return lo | (hi << 16);
}
// Dim d of two bf16 rows of D (two keys) as a pair (zero past D, or for a null row).
KOKKOS_INLINE_FUNCTION Pair key_pair(const bf16* even, const bf16* odd, int d, int D) {
  const std::uint32_t lo = even && d < D ? even[d].bits : 0u;
  const std::uint32_t hi = odd && d < D ? odd[d].bits : 0u;
  return lo | (hi << 16);
}

// The float value of a bf16 with subnormals read as zero (the instructions' DAZ).
inline float bf16_daz(std::uint32_t bits16) {
  const std::uint32_t u = (bits16 & 0x7f80u) == 0 ? (bits16 & 0x8000u) << 16 : bits16 << 16;
  return core::float_from_bits(u);
}
// x with a subnormal result flushed to a zero of its sign (the instructions' FTZ).
inline float flush_subnormal(float x) {
  const std::uint32_t u = core::bits_of(x);
  return (u & 0x7f800000u) == 0 ? core::float_from_bits(u & 0x80000000u) : x;
}
// acc + a . b over one pair, as vdpbf16ps adds it: the odd products first, each rounded once.
inline float pair_dot(float acc, Pair a, Pair b) {
  acc = flush_subnormal(std::fma(bf16_daz(a >> 16), bf16_daz(b >> 16), acc));
  return flush_subnormal(std::fma(bf16_daz(a & 0xffffu), bf16_daz(b & 0xffffu), acc));
}
// A float rounded to bf16 bits as vcvtne2ps2bf16 rounds it: nearest even, subnormals to zero,
// NaN kept a quiet NaN.
inline std::uint32_t bf16_bits_daz(float x) {
  const std::uint32_t u = core::bits_of(x);
  if ((u & 0x7f800000u) == 0) return (u >> 16) & 0x8000u;
  return core::float_to_bf16_bits(x);
}
// The pair of two floats (even, odd), rounded.
inline Pair bf16_pair(float even, float odd) { return bf16_bits_daz(even) | (bf16_bits_daz(odd) << 16); }

// One R x J micro-tile in portable code, the instruction's arithmetic lane by lane.
// col_scale == nullptr: C = out_scale * A B; else C = C diag(col_scale) + A B. Accumulate: C = C + A B
// (col_scale and out_scale ignored).
template <int R, int J, bool Accumulate = false>
inline void pair_micro_gemm_emulated(int K2, const Pair* A, std::ptrdiff_t a_m, std::ptrdiff_t a_k, const Pair* B,
                                     int ldb, float* C, int ldc, const float* col_scale, float out_scale) {
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < J; ++j) {
      float acc = Accumulate ? C[r * ldc + j] : col_scale ? C[r * ldc + j] * col_scale[j] : 0.0f;
      for (int k = 0; k < K2; ++k) {
        Pair a;  // A may be bf16 storage read in place
        std::memcpy(&a, A + r * a_m + k * a_k, sizeof a);
        acc = pair_dot(acc, a, B[k * ldb + j]);
      }
      C[r * ldc + j] = Accumulate || col_scale ? acc : acc * out_scale;
    }
  }
}

// out[c] = (even[c], odd[c]) rounded as the instruction rounds, for c < n: two rows of P^T (two
// keys) as pairs of keys.
inline void pack_pairs_emulated(const float* even, const float* odd, Pair* out, int n) {
  for (int c = 0; c < n; ++c) out[c] = bf16_pair(even[c], odd[c]);
}

// out[c] = (even[c], odd[c]) rounded for c < n, zero for n <= c < n_out; a null row reads as zeros.
inline void pack_pairs_padded_emulated(const float* even, const float* odd, Pair* out, int n, int n_out) {
  for (int c = 0; c < n_out; ++c)
    out[c] = c < n ? bf16_pair(even ? even[c] : 0.0f, odd ? odd[c] : 0.0f) : 0u;
}
// out[c] = (x[2c], x[2c + 1]) rounded (one row as pairs of consecutive elements; an element from n
// on reads 0) for c < n_out; a null row gives zeros.
inline void pack_row_pairs_padded_emulated(const float* x, Pair* out, int n, int n_out) {
  for (int c = 0; c < n_out; ++c)
    out[c] = bf16_pair(x && 2 * c < n ? x[2 * c] : 0.0f, x && 2 * c + 1 < n ? x[2 * c + 1] : 0.0f);
}

#if KATTN_X86_BF16_DOT
#define KATTN_TARGET_BF16_DOT __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), noinline))

// The micro-kernel on the instruction: J a multiple of 16 (lanes), R x J / 16 accumulators.
template <int R, int J, bool Accumulate = false>
KATTN_TARGET_BF16_DOT void pair_micro_gemm_avx512(int K2, const Pair* A, std::ptrdiff_t a_m, std::ptrdiff_t a_k,
                                                  const Pair* B, int ldb, float* C, int ldc, const float* col_scale,
                                                  float out_scale) {
  static_assert(J % 16 == 0, "pair_micro_gemm_avx512: J must be whole vectors of 16 lanes");
  constexpr int NV = J / 16;
  __m512 acc[R][NV];
  if (Accumulate) {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_loadu_ps(C + r * ldc + 16 * v);
  } else if (col_scale) {
    __m512 s[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) s[v] = _mm512_loadu_ps(col_scale + 16 * v);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_mul_ps(_mm512_loadu_ps(C + r * ldc + 16 * v), s[v]);
  } else {
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int k = 0; k < K2; ++k) {
    __m512i b[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) b[v] = _mm512_loadu_si512(B + std::ptrdiff_t(k) * ldb + 16 * v);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      Pair a;
      std::memcpy(&a, A + r * a_m + k * a_k, sizeof a);
      const __m512i av = _mm512_set1_epi32(static_cast<int>(a));
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], (__m512bh)av, (__m512bh)b[v]);
    }
  }
  const __m512 scale = _mm512_set1_ps(out_scale);
#pragma GCC unroll 16
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v)
      _mm512_storeu_ps(C + r * ldc + 16 * v, Accumulate || col_scale ? acc[r][v] : _mm512_mul_ps(acc[r][v], scale));
}

// Pairs (even[i], odd[i]) of 16 lanes of each, rounded: both rounded at once, then interleaved.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), always_inline)) inline __m512i pair_vector_avx512(
    __m512 even, __m512 odd) {
  // Word i of the result: word i / 2 of the even half (the low one) for even i, else of the odd one.
  const __m512i idx = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6,
                                       21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  return _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(odd, even));
}

// pack_pairs_emulated on the instruction, n a multiple of 16.
KATTN_TARGET_BF16_DOT inline void pack_pairs_avx512(const float* even, const float* odd, Pair* out, int n) {
  for (int c = 0; c < n; c += 16)
    _mm512_storeu_si512(out + c, pair_vector_avx512(_mm512_loadu_ps(even + c), _mm512_loadu_ps(odd + c)));
}

// A mask of the first n of 16 lanes (none for n <= 0, all for n >= 16).
__attribute__((target("avx512f"), always_inline)) inline __mmask16 first_lanes(int n) {
  return n >= 16 ? __mmask16(0xffff) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1);
}

// pack_pairs_padded_emulated on the instruction, n_out a multiple of 16.
KATTN_TARGET_BF16_DOT inline void pack_pairs_padded_avx512(const float* even, const float* odd, Pair* out, int n,
                                                           int n_out) {
  for (int c = 0; c < n_out; c += 16) {
    const __mmask16 m = first_lanes(n - c);
    const __m512 e = even ? _mm512_maskz_loadu_ps(m, even + c) : _mm512_setzero_ps();
    const __m512 o = odd ? _mm512_maskz_loadu_ps(m, odd + c) : _mm512_setzero_ps();
    _mm512_storeu_si512(out + c, pair_vector_avx512(e, o));
  }
}

// pack_row_pairs_padded_emulated on the instruction, n_out a multiple of 16: 32 elements rounded
// at once are 16 pairs in order.
KATTN_TARGET_BF16_DOT inline void pack_row_pairs_padded_avx512(const float* x, Pair* out, int n, int n_out) {
  for (int c = 0; c < n_out; c += 16) {
    const __m512 lo = x ? _mm512_maskz_loadu_ps(first_lanes(n - 2 * c), x + 2 * c) : _mm512_setzero_ps();
    const __m512 hi = x ? _mm512_maskz_loadu_ps(first_lanes(n - 2 * c - 16), x + 2 * c + 16) : _mm512_setzero_ps();
    _mm512_storeu_si512(out + c, (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
}
#undef KATTN_TARGET_BF16_DOT
#endif

// Whether this build carries the instruction's kernels (the CPU must have it too: cpu_products.hpp).
constexpr bool bf16_dot_compiled() { return KATTN_X86_BF16_DOT != 0; }

// The packs on the instruction where `hardware` (and n_out is whole vectors), else emulated: the
// same bits.
inline void pack_pairs_padded(const float* even, const float* odd, Pair* out, int n, int n_out, bool hardware) {
#if KATTN_X86_BF16_DOT
  if (hardware && n_out % 16 == 0) return pack_pairs_padded_avx512(even, odd, out, n, n_out);
#endif
  (void)hardware;
  pack_pairs_padded_emulated(even, odd, out, n, n_out);
}
inline void pack_row_pairs_padded(const float* x, Pair* out, int n, int n_out, bool hardware) {
#if KATTN_X86_BF16_DOT
  if (hardware && n_out % 16 == 0) return pack_row_pairs_padded_avx512(x, out, n, n_out);
#endif
  (void)hardware;
  pack_row_pairs_padded_emulated(x, out, n, n_out);
}

// Team-level products on pairs, tile_gemm.hpp's blocking and spans: invoke_blocks(member, M, N, K2,
// A, a_m, a_k, B, ldb, C, ldc, col_scale, out_scale, span, hardware), or <true> to add A B to C.
// `hardware`: the instruction (the CPU has it; J a multiple of 16), else the emulation. A span's
// key range [lo, hi) is in elements and widens to the pairs holding it.
template <int R, int J>
struct TeamPairGemm {
  static constexpr int rows = R, cols = J;

  template <bool Accumulate = false, class Member, class Span>
  KOKKOS_FORCEINLINE_FUNCTION static void invoke_blocks(const Member& member, int M, int N, int K2, const Pair* A,
                                                        std::ptrdiff_t a_m, std::ptrdiff_t a_k, const Pair* B, int ldb,
                                                        float* C, int ldc, const float* col_scale, float out_scale,
                                                        const Span& span, bool hardware) {
    TeamTileGemm<R, J>::for_each_block(member, M, N, 2 * K2, span, [&](int m, int n, int lo, int hi) {
      const int lo2 = lo / 2, hi2 = (hi + 1) / 2;
      const Pair* a = A + m * a_m + lo2 * a_k;
      const Pair* b = B + std::ptrdiff_t(lo2) * ldb + n;
      float* c = C + std::ptrdiff_t(m) * ldc + n;
      const float* s = col_scale ? col_scale + n : nullptr;
#if KATTN_X86_BF16_DOT
      if (hardware) {
        pair_micro_gemm_avx512<R, J, Accumulate>(hi2 - lo2, a, a_m, a_k, b, ldb, c, ldc, s, out_scale);
        return;
      }
#endif
      (void)hardware;
      pair_micro_gemm_emulated<R, J, Accumulate>(hi2 - lo2, a, a_m, a_k, b, ldb, c, ldc, s, out_scale);
    });
  }
};

}  // namespace detail
}  // namespace kattn
