// One online-softmax step on one row of a score tile, as a short chain of named steps:
// softcap, mask, row max, rescale, exponentiate, row sum. Scores are in log2 units.
#pragma once

#include <Kokkos_Core.hpp>

#include "kattn/detail/exp2.hpp"
#include "kattn/detail/simd.hpp"
#include "kattn/state.hpp"

namespace kattn {
namespace detail {

// s <- softcap * tanh(s / softcap), in log2 units: cap_log2 = softcap * log2(e), and the raw
// scores were scaled without log2(e).
template <class T>
KOKKOS_INLINE_FUNCTION void softcap_row(T* row, int n, T cap_log2, T inv_cap) {
  for (int j = 0; j < n; ++j) row[j] = cap_log2 * compat::tanh(row[j] * inv_cap);
}

// Keys outside [begin, end) of the tile become -inf.
template <class T>
KOKKOS_INLINE_FUNCTION void mask_row(T* row, int n, int begin, int end) {
  const T neg_inf = -compat::infinity<T>();
  for (int j = 0; j < begin && j < n; ++j) row[j] = neg_inf;
  for (int j = end < 0 ? 0 : end; j < n; ++j) row[j] = neg_inf;
}

// NaN-propagating max over the row; n is a multiple of the SIMD width on the host.
template <class T>
KOKKOS_INLINE_FUNCTION T row_max(const T* row, int n) {
  T mx = -compat::infinity<T>();
#if KATTN_HOST_SIMD
  using V = simd::vec<T>;
  constexpr int W = simd::width<T>();
  V vm = simd::splat<T>(mx);
  for (int j = 0; j < n; j += W) {
    const V x = simd::load(row + j);
    vm = (x > vm || x != x) ? x : vm;
  }
  for (int w = 0; w < W; ++w) mx = max_nan(mx, static_cast<T>(vm[w]));
#else
  for (int j = 0; j < n; ++j) mx = max_nan(mx, row[j]);
#endif
  return mx;
}

// row <- 2^(row - m); returns the row sum.
template <class T>
KOKKOS_INLINE_FUNCTION T exponentiate_row(T* row, int n, T m) {
#if KATTN_HOST_SIMD
  using V = simd::vec<T>;
  constexpr int W = simd::width<T>();
  V sum = simd::splat<T>(T(0));
  for (int j = 0; j < n; j += W) {
    const V p = exp2<T>(simd::load(row + j) - m);
    simd::store(row + j, p);
    sum += p;
  }
  T s = 0;
  for (int w = 0; w < W; ++w) s += sum[w];
  return s;
#else
  T s = 0;
  for (int j = 0; j < n; ++j) {
    row[j] = detail::exp2(row[j] - m);
    s += row[j];
  }
  return s;
#endif
}

// Folds one row of scores into its state and turns the scores into the weights P. Returns the
// factor that rescales the row's o before P V is added. Only [begin, end) are valid keys when
// `masked`; all n when not.
template <class T>
KOKKOS_INLINE_FUNCTION T online_softmax_row(T* row, int n, bool masked, int begin, int end, T cap_log2, T inv_cap,
                                            RowState<T>& st) {
  if (cap_log2 != T(0)) softcap_row(row, n, cap_log2, inv_cap);
  if (masked) mask_row(row, n, begin, end);
  const T alpha = fold_max(st, row_max(row, n));
  if (st.m == -compat::infinity<T>()) {  // nothing visible yet: P = 0, the state stays empty
    for (int j = 0; j < n; ++j) row[j] = T(0);
    return T(0);
  }
  st.l += exponentiate_row(row, n, st.m);
  return alpha;
}

}  // namespace detail
}  // namespace kattn
