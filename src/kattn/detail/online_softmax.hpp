// The online-softmax step of one tile, as a short chain of named team-level steps on the
// transposed score tile S^T (keys x rows, the query rows contiguous):
//   softcap -> mask -> column max -> rescale (the state algebra, per row) -> exponentiate + sum
// Scores are in log2 units. The query rows are the vector lanes, so every step but the per-row
// state update runs on whole vectors, with no horizontal reductions.
//
// Barrier contract: no step barriers on exit; the caller barriers between steps.
#pragma once

#include <Kokkos_Core.hpp>

#include <limits>

#include "kattn/compat.hpp"
#include "kattn/detail/exp2.hpp"
#include "kattn/detail/simd.hpp"
#include "kattn/core/state.hpp"

namespace kattn {
namespace detail {

// s <- softcap * tanh(s / softcap) in log2 units: cap_log2 = softcap * log2(e), and the scores
// were scaled without log2(e).
template <class Member, class T>
KOKKOS_INLINE_FUNCTION void softcap_tile(const Member& member, T* s, int n, T cap_log2, T inv_cap) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, n),
                       [&](const int i) { s[i] = cap_log2 * compat::tanh(s[i] * inv_cap); });
}

// Column r of S^T keeps keys [begin, end) and gets -inf elsewhere. Thread-level.
template <class T>
KOKKOS_INLINE_FUNCTION void mask_column(T* st, int keys, int rows, int r, int begin, int end) {
  const T neg_inf = -compat::infinity<T>();
  for (int j = 0; j < begin; ++j) st[j * rows + r] = neg_inf;
  for (int j = end; j < keys; ++j) st[j * rows + r] = neg_inf;
}

// tile_max[r] = scale * max over keys of S^T[., r], NaN-propagating. rows is a multiple of the
// SIMD width. scale > 0: the scores' scale where a layout leaves S^T unscaled (amx_column_tiles.hpp).
template <class Member, class T>
KOKKOS_INLINE_FUNCTION void column_max(const Member& member, const T* st, int keys, int rows, T* tile_max,
                                       T scale = T(1)) {
#if KATTN_HOST_SIMD
  using V = simd::vec<T>;
  constexpr int W = simd::width<T>();
  using I = simd::ivec<T>;
  // Four running maxima (x > m ? x : m, one max instruction) and the NaNs seen apart: one chain
  // through every key would wait on a compare and a blend per vector.
  constexpr int C = 4;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, rows / W), [&](const int blk) {
    const T* col = st + blk * W;
    V m[C];
    for (V& mc : m) mc = simd::splat<T>(-compat::infinity<T>());
    I nan = I{} & 0;
    int j = 0;
    for (; j + C <= keys; j += C)
      for (int c = 0; c < C; ++c) {
        const V x = simd::load(col + (j + c) * rows);
        m[c] = x > m[c] ? x : m[c];
        nan |= x != x;
      }
    for (; j < keys; ++j) {
      const V x = simd::load(col + j * rows);
      m[0] = x > m[0] ? x : m[0];
      nan |= x != x;
    }
    const V m01 = m[0] > m[1] ? m[0] : m[1], m23 = m[2] > m[3] ? m[2] : m[3];
    const V all = m01 > m23 ? m01 : m23;
    simd::store(tile_max + blk * W, nan != 0 ? simd::splat<T>(std::numeric_limits<T>::quiet_NaN()) : all * scale);
  });
#else
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, rows), [&](const int r) {
    T m = -compat::infinity<T>();
    for (int j = 0; j < keys; ++j) m = max_nan(m, st[j * rows + r]);
    tile_max[r] = m * scale;
  });
#endif
}

// Per row, the state algebra: fold the tile max into (m, l), keep the factor alpha that rescales
// o, and replace tile_max by the value to subtract before exponentiating (m, or 0 while the row
// has seen nothing, so that 2^(-inf - 0) = 0 instead of NaN).
template <class Member, class T>
KOKKOS_INLINE_FUNCTION void rescale_rows(const Member& member, int rows, T* m, T* l, T* alpha, T* tile_max) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, rows), [&](const int r) {
    RowState<T> st{m[r], l[r]};
    alpha[r] = fold_max(st, tile_max[r]);
    m[r] = st.m;
    l[r] = st.l;
    tile_max[r] = exponent_offset(st);
  });
}

// S^T <- P^T = 2^(S^T - m) per column, and l += the column sums. m_sub is at least every score of
// its column (or 0 for a column of -inf), so S^T - m <= 0. With Scaled, 2^(scale S^T - m): the
// scores' scale where a layout leaves S^T unscaled (column_max's scale).
template <bool Scaled = false, class Member, class T>
KOKKOS_INLINE_FUNCTION void exponentiate_columns(const Member& member, T* st, int keys, int rows, const T* m_sub,
                                                 T* l, T scale = T(1)) {
#if KATTN_HOST_SIMD
  using V = simd::vec<T>;
  constexpr int W = simd::width<T>();
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, rows / W), [&](const int blk) {
    const V m = simd::load(m_sub + blk * W);
    V sum = simd::splat<T>(T(0));
    for (int j = 0; j < keys; ++j) {
      T* s = st + j * rows + blk * W;
      V x = simd::load(s);
      if constexpr (Scaled) x *= scale;
      const V p = exp2_nonpositive<T>(x - m);
      simd::store(s, p);
      sum += p;
    }
    simd::store(l + blk * W, simd::load(l + blk * W) + sum);
  });
#else
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, rows), [&](const int r) {
    T sum = 0;
    for (int j = 0; j < keys; ++j) {
      T& s = st[j * rows + r];
      s = detail::exp2((Scaled ? s * scale : s) - m_sub[r]);
      sum += s;
    }
    l[r] += sum;
  });
#endif
}

}  // namespace detail
}  // namespace kattn
