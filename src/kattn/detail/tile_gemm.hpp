// Team-level tile product on scratch or global memory:
//   C (M x N) = [C scaled by column] + A (M x K) B (K x N), or C += A B (accumulate)
// with A addressed by strides, A(m, k) = A[m * a_m + k * a_k] (a row-major tile, or a transposed
// one, read in place), B and C row-major, M a multiple of R and N a multiple of J (callers pad
// with zeros). Each team thread owns R x J micro-tiles of C and keeps them in registers over
// the whole K loop: an outer-product micro-kernel (broadcast A values, contiguous B rows) that
// vectorises without -ffast-math. perf/bench_tile_gemm compares it with KokkosBatched::TeamGemm.
//
// Barrier contract: like KokkosBatched team routines, invoke() does not barrier on exit; the
// caller does before reading C.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstddef>

#include "kattn/detail/simd.hpp"

namespace kattn {
namespace detail {

// One R x J micro-tile. col_scale == nullptr: C = A B; else C = C diag(col_scale) + A B.
// Accumulate: C = C + A B (col_scale ignored). Always inlined, as are the team products below:
// left to GCC, whether the micro-kernel is inlined changes with the size of the calling kernel.
template <class T, int R, int J, bool Accumulate = false>
KOKKOS_FORCEINLINE_FUNCTION void micro_gemm(int K, const T* KOKKOS_RESTRICT A, std::ptrdiff_t a_m, std::ptrdiff_t a_k,
                                            const T* KOKKOS_RESTRICT B, int ldb, T* KOKKOS_RESTRICT C, int ldc,
                                            const T* KOKKOS_RESTRICT col_scale) {
#if KATTN_HOST_SIMD
  if constexpr (J % simd::width<T>() == 0) {
    using V = simd::vec<T>;
    constexpr int W = simd::width<T>();
    constexpr int NV = J / W;
    V acc[R][NV];
    if (Accumulate) {
      KATTN_UNROLL
      for (int r = 0; r < R; ++r) KATTN_UNROLL
      for (int v = 0; v < NV; ++v) acc[r][v] = simd::load(C + r * ldc + v * W);
    } else if (col_scale) {
      V s[NV];
      KATTN_UNROLL
      for (int v = 0; v < NV; ++v) s[v] = simd::load(col_scale + v * W);
      KATTN_UNROLL
      for (int r = 0; r < R; ++r) KATTN_UNROLL
      for (int v = 0; v < NV; ++v) acc[r][v] = simd::load(C + r * ldc + v * W) * s[v];
    } else {
      KATTN_UNROLL
      for (int r = 0; r < R; ++r) KATTN_UNROLL
      for (int v = 0; v < NV; ++v) acc[r][v] = simd::splat<T>(T(0));
    }
    for (int k = 0; k < K; ++k) {
      V b[NV];
      // Each B vector loaded once per step and kept in a register: folded into the FMAs as memory
      // operands (GCC's choice) they are loaded R times, 1.5 loads per FMA with AVX2 (with the
      // unrolling, 0.55 -> about 0.8 of the FMA peak on Zen 3, perf/RESULTS.md).
      KATTN_UNROLL
      for (int v = 0; v < NV; ++v) b[v] = simd::pinned<T>(simd::load(B + k * ldb + v * W));
      KATTN_UNROLL
      for (int r = 0; r < R; ++r) {
        const T a = A[r * a_m + k * a_k];
        KATTN_UNROLL
        for (int v = 0; v < NV; ++v) acc[r][v] += a * b[v];
      }
    }
    KATTN_UNROLL
    for (int r = 0; r < R; ++r) KATTN_UNROLL
    for (int v = 0; v < NV; ++v) simd::store(C + r * ldc + v * W, acc[r][v]);
    return;
  }
#endif
  T acc[R][J];
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j)
      acc[r][j] = Accumulate ? C[r * ldc + j] : (col_scale ? C[r * ldc + j] * col_scale[j] : T(0));
  for (int k = 0; k < K; ++k) {
    for (int r = 0; r < R; ++r) {
      const T a = A[r * a_m + k * a_k];
      for (int j = 0; j < J; ++j) acc[r][j] += a * B[k * ldb + j];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < J; ++j) C[r * ldc + j] = acc[r][j];
}

template <int R, int J>
struct TeamTileGemm {
  static constexpr int rows = R, cols = J;  // of a micro-tile

  // The span of invoke_blocks that keeps every micro-tile and its whole sum.
  struct EveryBlock {
    KOKKOS_INLINE_FUNCTION bool operator()(int, int, int&, int&) const { return true; }
  };

  template <class Member, class T>
  KOKKOS_FORCEINLINE_FUNCTION static void invoke(const Member& member, int M, int N, int K, const T* A,
                                                 std::ptrdiff_t a_m, std::ptrdiff_t a_k, const T* B, int ldb, T* C,
                                                 int ldc, const T* col_scale) {
    invoke_blocks<false>(member, M, N, K, A, a_m, a_k, B, ldb, C, ldc, col_scale, EveryBlock{});
  }

  // C (M x N) += A (M x K) B (K x N), same addressing and barrier contract as invoke().
  template <class Member, class T>
  KOKKOS_FORCEINLINE_FUNCTION static void accumulate(const Member& member, int M, int N, int K, const T* A,
                                                     std::ptrdiff_t a_m, std::ptrdiff_t a_k, const T* B, int ldb, T* C,
                                                     int ldc) {
    invoke_blocks<true>(member, M, N, K, A, a_m, a_k, B, ldb, C, ldc, static_cast<const T*>(nullptr), EveryBlock{});
  }

  // invoke() (or accumulate()) where the caller knows parts of the product are not needed:
  // span(m, n, lo, hi) for the R x J micro-tile at row m, column n returns false when its C is
  // not needed (left as it was: the caller overwrites it, as a mask does), else narrows its sum
  // to k in [lo, hi) (preset to [0, K)), where the caller knows the other terms are exact zeros,
  // so C is what invoke() gives, up to the sign of a zero. Masked tiles use it to compute only
  // the keys their rows see.
  template <bool Accumulate, class Member, class T, class Span>
  KOKKOS_FORCEINLINE_FUNCTION static void invoke_blocks(const Member& member, int M, int N, int K, const T* A,
                                                        std::ptrdiff_t a_m, std::ptrdiff_t a_k, const T* B, int ldb,
                                                        T* C, int ldc, const T* col_scale, const Span& span) {
    for_each_block(member, M, N, K, span, [&](int m, int n, int lo, int hi) {
      micro_gemm<T, R, J, Accumulate>(hi - lo, A + m * a_m + lo * a_k, a_m, a_k, B + lo * ldb + n, ldb, C + m * ldc + n,
                                      ldc, col_scale ? col_scale + n : nullptr);
    });
  }

  // The blocking every micro-kernel policy shares (pair_gemm.hpp): micro(m, n, lo, hi) for each
  // R x J micro-tile of C at (m, n) that span(m, n, lo, hi) keeps, with its sum narrowed to
  // k in [lo, hi), clipped to [0, K).
  template <class Member, class Span, class Micro>
  KOKKOS_FORCEINLINE_FUNCTION static void for_each_block(const Member& member, int M, int N, int K, const Span& span,
                                                         const Micro& micro) {
    const int row_blocks = M / R;
    const int col_blocks = N / J;
    // Column panels outer, rows inner: one K x J panel of B stays in L1 while A streams.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, row_blocks * col_blocks), [&](const int blk) {
      const int cb = blk / row_blocks;
      const int rb = blk - cb * row_blocks;
      int lo = 0, hi = K;
      if (!span(rb * R, cb * J, lo, hi)) return;
      hi = hi < K ? hi : K;
      lo = lo < 0 ? 0 : (lo < hi ? lo : hi);
      micro(rb * R, cb * J, lo, hi);
    });
  }
};

}  // namespace detail
}  // namespace kattn
