// Tile products on AMX (Intel since Sapphire Rapids): the micro-kernel policy of bf16 storage on
// CPUs with matrix units. TDPBF16PS multiplies a 16 x 32 bf16 tile by a 32 x 16 one held as pairs
// and adds the products to a 16 x 16 float tile: 16 K of products per instruction, eight times
// vdpbf16ps' work.
//
//   C (32 x 32 floats, or 16 wide/tall at the edges) = [C diag(col_scale) | 0] + out_scale * A B
//
// with pair_gemm.hpp's operands: A rows of pairs along k (a_row pairs apart: K rows read in
// place, or V^T as pairs of keys), B rows of pairs over n side by side (the VNNI layout: Q^T as
// pairs of dims, P^T as pairs of keys), k in whole tiles of 16 pairs. Eight tile registers hold a
// 2 x 2 block of C, two of A and two of B.
//
// The products are exact; how the unit adds them is its own. Measured on Emerald Rapids, no
// order of IEEE float additions (the pairs one by one, a tree, the exact sum rounded once)
// gives its bits, so the portable emulation of this policy is the pair products' arithmetic on
// the same layouts: the same roundings in kind (bf16 products, float sums, P rounded to bf16),
// the tests' accuracy rule for both (docs/storage.md).
//
// The tiles' shapes (palette 1, eight 16 x 64-byte tiles) are configured by each thread when it
// starts a work unit (amx_configure, from the layout's first_tile), so code of other libraries
// that configures the thread's tiles between two calls cannot leave them wrong. Linux gives a
// process the tile registers only when asked (cpu_products.cpp asks once).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kattn/detail/pair_gemm.hpp"

// GCC 11+ or Clang 12+ know the tile instructions; a build that has the bf16 dot kernels has AVX-512.
#if KATTN_X86_BF16_DOT && ((defined(__clang__) && __clang_major__ >= 12) || (!defined(__clang__) && __GNUC__ >= 11))
#define KATTN_X86_AMX 1
#else
#define KATTN_X86_AMX 0
#endif

namespace kattn {
namespace detail {

// Elements of the products' tiles: 16 rows, 16 pairs (32 bf16) or 16 floats of 64 bytes each.
constexpr int amx_tile = 16;

constexpr bool amx_compiled() { return KATTN_X86_AMX != 0; }

#if KATTN_X86_AMX
#define KATTN_TARGET_AMX __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16"), noinline))

// LDTILECFG's 64-byte operand.
struct alignas(64) AmxTileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

// The calling thread's tiles: eight of 16 rows x 64 bytes.
KATTN_TARGET_AMX inline void amx_configure() {
  AmxTileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = amx_tile;
  }
  // (Not _tile_loadconfig: GCC's tells the compiler it reads 8 bytes, so the rest went unstored.)
  __asm__ volatile("ldtilecfg %0" : : "m"(cfg));
}

// The tile intrinsics are asm statements the compiler does not see touch memory: this orders the
// vector code's loads and stores of C around them.
#define KATTN_AMX_MEMORY_FENCE() __asm__ volatile("" ::: "memory")

// rows x (16 NT) floats of C (ldc apart) times col_scale by column, or by out_scale.
KATTN_TARGET_AMX inline void amx_scale_block(float* c, std::ptrdiff_t ldc, int rows, int NT, const float* col_scale,
                                             float out_scale) {
  for (int t = 0; t < NT; ++t) {
    const __m512 s = col_scale ? _mm512_loadu_ps(col_scale + 16 * t) : _mm512_set1_ps(out_scale);
    for (int r = 0; r < rows; ++r) {
      float* x = c + r * ldc + 16 * t;
      _mm512_storeu_ps(x, _mm512_mul_ps(_mm512_loadu_ps(x), s));
    }
  }
}

// Whether every scale of the block's 16 NT columns is 1 (the running max did not move).
KATTN_TARGET_AMX inline bool amx_scales_are_one(const float* col_scale, int NT) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int t = 0; t < NT; ++t)
    if (_mm512_cmpneq_ps_mask(_mm512_loadu_ps(col_scale + 16 * t), one)) return false;
  return true;
}

// col_max[c] = max(col_max[c], C's column c) over the block's rows, NaN-propagating (a NaN
// anywhere makes the column's max NaN).
KATTN_TARGET_AMX inline void amx_column_max(const float* c, std::ptrdiff_t ldc, int rows, int NT, float* col_max) {
  for (int t = 0; t < NT; ++t) {
    __m512 m = _mm512_loadu_ps(col_max + 16 * t);
    __mmask16 nan = _mm512_cmp_ps_mask(m, m, _CMP_UNORD_Q);
    for (int r = 0; r < rows; ++r) {
      const __m512 x = _mm512_loadu_ps(c + r * ldc + 16 * t);
      m = _mm512_mask_max_ps(m, 0xffff, m, x);  // (GCC 12's plain max warns of its undefined source)
      nan |= _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    }
    _mm512_storeu_ps(col_max + 16 * t, _mm512_mask_mov_ps(m, nan, _mm512_set1_ps(__builtin_nanf(""))));
  }
}

// One block of MT x NT tiles (MT, NT in {1, 2}) over K2 pairs (a multiple of 16); col_max, when
// set, takes the block's column maxima (amx_column_max).
template <int MT, int NT>
KATTN_TARGET_AMX void amx_block(int K2, const Pair* A, std::ptrdiff_t a_row, const Pair* B, std::ptrdiff_t ldb,
                                float* C, std::ptrdiff_t ldc, const float* col_scale, float out_scale, float* col_max) {
  static_assert((MT == 1 || MT == 2) && (NT == 1 || NT == 2), "amx_block: blocks of 1 or 2 tiles a side");
  constexpr int T = amx_tile;
  const std::ptrdiff_t a_bytes = a_row * 4, b_bytes = ldb * 4, c_bytes = ldc * 4;
  float* c01 = C + T;
  float* c10 = C + T * ldc;
  float* c11 = C + T * ldc + T;
  if (col_scale) {
    if (!amx_scales_are_one(col_scale, NT)) amx_scale_block(C, ldc, MT * T, NT, col_scale, 1.0f);
    KATTN_AMX_MEMORY_FENCE();
    _tile_loadd(0, C, c_bytes);
    if constexpr (NT == 2) _tile_loadd(1, c01, c_bytes);
    if constexpr (MT == 2) _tile_loadd(2, c10, c_bytes);
    if constexpr (MT == 2 && NT == 2) _tile_loadd(3, c11, c_bytes);
  } else {
    _tile_zero(0);
    if constexpr (NT == 2) _tile_zero(1);
    if constexpr (MT == 2) _tile_zero(2);
    if constexpr (MT == 2 && NT == 2) _tile_zero(3);
  }
  for (int k2 = 0; k2 < K2; k2 += T) {
    _tile_loadd(4, A + k2, a_bytes);
    if constexpr (MT == 2) _tile_loadd(5, A + T * a_row + k2, a_bytes);
    _tile_loadd(6, B + k2 * ldb, b_bytes);
    if constexpr (NT == 2) _tile_loadd(7, B + k2 * ldb + T, b_bytes);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NT == 2) _tile_dpbf16ps(1, 4, 7);
    if constexpr (MT == 2) _tile_dpbf16ps(2, 5, 6);
    if constexpr (MT == 2 && NT == 2) _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, C, c_bytes);
  if constexpr (NT == 2) _tile_stored(1, c01, c_bytes);
  if constexpr (MT == 2) _tile_stored(2, c10, c_bytes);
  if constexpr (MT == 2 && NT == 2) _tile_stored(3, c11, c_bytes);
  KATTN_AMX_MEMORY_FENCE();
  if (!col_scale && out_scale != 1.0f) amx_scale_block(C, ldc, MT * T, NT, nullptr, out_scale);
  if (col_max) amx_column_max(C, ldc, MT * T, NT, col_max);
}
#undef KATTN_AMX_MEMORY_FENCE
#undef KATTN_TARGET_AMX
#endif

// Team-level products on the tiles: C (M x N) = [C diag(col_scale) | 0] + out_scale * A B over
// K2 pairs, M and N multiples of 16, K2 of 16, A and B as above, with the column maxima of the
// blocks computed into col_max when set. blocks(m, n, lo2, hi2) says whether the 32 x 32 block at (m, n) is computed,
// and may narrow its pairs to [lo2, hi2) (widened here to whole tiles). Each thread takes whole
// columns of blocks (B's tiles stay in L1 while A streams); no barrier on exit. The calling
// threads' tiles must be configured (amx_configure).
template <class Member, class Blocks>
inline void amx_team_gemm(const Member& member, int M, int N, int K2, const Pair* A, std::ptrdiff_t a_row,
                          const Pair* B, std::ptrdiff_t ldb, float* C, std::ptrdiff_t ldc, const float* col_scale,
                          float out_scale, float* col_max, const Blocks& blocks) {
#if KATTN_X86_AMX
  constexpr int T = amx_tile, BT = 2 * amx_tile;
  const int mb = (M + BT - 1) / BT, nb = (N + BT - 1) / BT;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, nb), [&](const int j) {
    if (col_max)
      for (int c = j * BT; c < N && c < (j + 1) * BT; ++c) col_max[c] = -__builtin_inff();
    for (int i = 0; i < mb; ++i) {
      const int m = i * BT, n = j * BT;
      int lo2 = 0, hi2 = K2;
      if (!blocks(m, n, lo2, hi2)) continue;
      lo2 = lo2 / T * T;
      hi2 = (hi2 + T - 1) / T * T;
      if (hi2 > K2) hi2 = K2;
      if (hi2 < lo2) hi2 = lo2;  // no pairs: C = 0, or C diag(col_scale)
      const Pair* a = A + m * a_row + lo2;
      const Pair* b = B + std::ptrdiff_t(lo2) * ldb + n;
      float* c = C + m * ldc + n;
      const float* s = col_scale ? col_scale + n : nullptr;
      float* cm = col_max ? col_max + n : nullptr;
      const bool tall = M - m >= BT, wide = N - n >= BT;
      if (tall && wide)
        amx_block<2, 2>(hi2 - lo2, a, a_row, b, ldb, c, ldc, s, out_scale, cm);
      else if (tall)
        amx_block<2, 1>(hi2 - lo2, a, a_row, b, ldb, c, ldc, s, out_scale, cm);
      else if (wide)
        amx_block<1, 2>(hi2 - lo2, a, a_row, b, ldb, c, ldc, s, out_scale, cm);
      else
        amx_block<1, 1>(hi2 - lo2, a, a_row, b, ldb, c, ldc, s, out_scale, cm);
    }
  });
#else
  (void)member, (void)M, (void)N, (void)K2, (void)A, (void)a_row, (void)B, (void)ldb, (void)C, (void)ldc;
  (void)col_scale, (void)out_scale, (void)col_max, (void)blocks;
#endif
}

}  // namespace detail
}  // namespace kattn
