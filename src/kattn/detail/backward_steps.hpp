// The element-wise steps of the backward pass between its tile products, on a score tile S and
// the tile dP = dO V^T:
//
//   softcap:  th = tanh(s / cap), t = cap log2(e) th            (the forward's cap, log2 units)
//   ALiBi and the bias tensor: t += bias                          (log2 units)
//   P  = 2^(t - lse2)                                             (recomputed from the saved LSE)
//   dS = scale P (dP - D) (1 - th^2)                              (scale folded in for dQ and dK)
//   d(bias) = P (dP - D) where P > 0, else 0                      (only where asked for)
//
// lse2 is the row's natural-log LSE in log2 units, or +inf for a row that saw no key (and for
// padding rows), so that its P is exactly 0 even where the score is -inf. D = rowsum(dO * O).
// A masked score is -inf before the exponential; with softcap its tanh slot holds -inf. Either
// way a masked entry's dP is taken as 0, as the textbook has it (dO . v_j would be NaN for a NaN
// in a masked key's V, and 0 x NaN is NaN).
//
// Barrier contract: no step barriers on exit; the caller barriers between steps.
#pragma once

#include <Kokkos_Core.hpp>

#include "kattn/compat.hpp"
#include "kattn/core/alibi.hpp"
#include "kattn/core/score_bias.hpp"
#include "kattn/core/state.hpp"
#include "kattn/detail/exp2.hpp"
#include "kattn/detail/simd.hpp"

namespace kattn {
namespace detail {

// Scalars the steps share.
template <class T>
struct GradientScales {
  T ds_scale = 1;  // the attention scale: dS is scaled once for both dQ = dS K and dK = dS^T Q
  T cap_log2 = 0;  // softcap * log2(e); 0 = no softcap
  T inv_cap = 0;   // 1 / softcap
};

// One score s -> (P, dS) with the row's lse2 and D and the score's ALiBi bias; th_or_t is
// tanh(s / cap) when softcapping (-inf when masked), else the log2-unit score (-inf when masked).
template <class T>
KOKKOS_INLINE_FUNCTION void gradient_scalar(T& s_to_p, T& dp_to_ds, T lse2, T di, const GradientScales<T>& g,
                                            T bias = T(0), T* dbias = nullptr) {
  const T th = s_to_p;
  T t = th, deriv = T(1);
  if (g.cap_log2 != T(0)) {
    t = g.cap_log2 * th;
    if (th != -compat::infinity<T>()) deriv = T(1) - th * th;
  }
  // A masked score stays -inf whatever its bias (an infinite one would make it NaN).
  const T p = exp2((th == -compat::infinity<T>() ? th : t + bias) - lse2);
  s_to_p = p;
  // A masked key's dP is 0, as in the textbook, which never forms dO . v_j for it: a NaN or Inf in
  // a masked key's V must not reach the row through 0 x NaN.
  const T dp = th == -compat::infinity<T>() ? T(0) : dp_to_ds;
  dp_to_ds = g.ds_scale * p * (dp - di) * deriv;
  if (dbias) *dbias = p == T(0) ? T(0) : p * (dp - di);
}

#if KATTN_HOST_SIMD
// The same on a vector of scores; lse2 and D are per lane (query pass) or broadcast (key pass).
template <class T>
inline void gradient_vector(T* s_to_p, T* dp_to_ds, simd::vec<T> lse2, simd::vec<T> di, const GradientScales<T>& g,
                            simd::vec<T> bias = simd::vec<T>{}, simd::vec<T>* dbias = nullptr) {
  using V = simd::vec<T>;
  const V th = simd::load(s_to_p);
  V t = th, deriv = simd::splat<T>(T(1));
  if (g.cap_log2 != T(0)) {
    t = g.cap_log2 * th;
    deriv = th == -compat::infinity<T>() ? simd::splat<T>(T(1)) : T(1) - th * th;
  }
  const V p = exp2<T>((th == -compat::infinity<T>() ? th : t + bias) - lse2);
  simd::store(s_to_p, p);
  const V dp = th == -compat::infinity<T>() ? simd::splat<T>(T(0)) : simd::load(dp_to_ds);
  simd::store(dp_to_ds, g.ds_scale * p * (dp - di) * deriv);
  if (dbias) *dbias = p == T(0) ? simd::splat<T>(T(0)) : p * (dp - di);
}
#endif

// s <- tanh(s / cap) over n scores (the softcap's first half; gradient_* finish it).
template <class Member, class T>
KOKKOS_INLINE_FUNCTION void softcap_tanh(const Member& member, T* s, int n, T inv_cap) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, n), [&](const int i) { s[i] = compat::tanh(s[i] * inv_cap); });
}

// ALiBi's slope of a row (log2 units; 0 without ALiBi) and its diagonal less the first key of
// the tile: key j of the tile has the bias alibi_bias(slope, diagonal - j).
template <class T>
struct RowAlibi {
  T slope = 0;
  T diagonal = 0;
};

// The bias tensor's value of key j of a row (`row`: its keys from the tile's first; null: none) in
// log2 units, 0 from key `end` on (masked, and maybe past the tensor's end).
template <class T, class B>
KOKKOS_INLINE_FUNCTION T row_bias(const B* row, int j, int end) {
  return row && j < end ? bias_value<T>(row[j]) * static_cast<T>(kLog2e) : T(0);
}

// Key-pass layout (rows x keys, keys contiguous): one row's keys outside [begin, end) get -inf,
// then P and dS for the row's `keys` entries (a multiple of the SIMD width), with ALiBi's and the
// bias tensor's (bias_row, of element type B; null: none) terms; with dbias_row (not null, bias_row
// given) the bias's gradient of the row's first `valid` keys to it. Thread-level.
template <class T, class B = float>
KOKKOS_INLINE_FUNCTION void gradient_row(T* s, T* dp, int keys, int begin, int end, T lse2, T di,
                                         const GradientScales<T>& g, const RowAlibi<T>& alibi = {},
                                         const B* bias_row = nullptr, T* dbias_row = nullptr, int valid = 0) {
  const T neg_inf = -compat::infinity<T>();
  for (int j = 0; j < begin; ++j) s[j] = neg_inf;
  for (int j = end; j < keys; ++j) s[j] = neg_inf;
#if KATTN_HOST_SIMD
  using V = simd::vec<T>;
  constexpr int W = simd::width<T>();
  const V l = simd::splat<T>(lse2), d = simd::splat<T>(di);
  if (alibi.slope == T(0) && !bias_row) {
    for (int j = 0; j < keys; j += W) gradient_vector(s + j, dp + j, l, d, g);
    return;
  }
  V distance;  // diagonal - j for the lanes' keys
  for (int k = 0; k < W; ++k) distance[k] = alibi.diagonal - T(k);
  const V slope = simd::splat<T>(alibi.slope);
  V dbias;
  const auto store_dbias = [&](int j) {  // the row's valid keys only: dbias_row ends there
    if (!dbias_row) return;
    if (j + W <= valid)
      simd::store(dbias_row + j, dbias);
    else
      for (int k = 0; j + k < valid && k < W; ++k) dbias_row[j + k] = dbias[k];
  };
  V* const dbias_out = dbias_row ? &dbias : nullptr;
  for (int j = 0; j < keys; j += W, distance -= T(W)) {
    V bias = -slope * (distance < T(0) ? -distance : distance);
    if constexpr (std::is_same_v<B, T> || (std::is_same_v<T, float> && is_16bit_v<B>)) {
      if (bias_row && j + W <= end) {  // whole vectors of the row's keys, widened
        bias += simd::load_as<T>(bias_row + j) * static_cast<T>(kLog2e);
        gradient_vector(s + j, dp + j, l, d, g, bias, dbias_out);
        store_dbias(j);
        continue;
      }
    }
    if (bias_row)
      for (int k = 0; k < W; ++k) bias[k] += row_bias<T>(bias_row, j + k, end);
    gradient_vector(s + j, dp + j, l, d, g, bias, dbias_out);
    store_dbias(j);
  }
#else
  for (int j = 0; j < keys; ++j)
    gradient_scalar(s[j], dp[j], lse2, di, g,
                    alibi_bias(alibi.slope, alibi.diagonal - T(j)) + row_bias<T>(bias_row, j, end),
                    dbias_row && j < valid ? dbias_row + j : nullptr);
#endif
}

// Query-pass layout (keys x rows, rows contiguous): P^T and dS^T for every key, with per-column
// lse2 and D, with ALiBi (slope not null) per-column slopes and diagonals, key j of the tile
// being key first_key + j, and the bias tensor's tile (bias_tile, keys x rows in log2 units; null:
// none). Masking is done before (mask_column, online_softmax.hpp). rows is a multiple of the SIMD
// width.
template <class Member, class T>
KOKKOS_INLINE_FUNCTION void gradient_columns(const Member& member, T* st, T* dpt, int keys, int rows, const T* lse2,
                                             const T* di, const GradientScales<T>& g, const T* slope = nullptr,
                                             const T* diagonal = nullptr, T first_key = T(0),
                                             const T* bias_tile = nullptr) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, keys), [&](const int j) {
#if KATTN_HOST_SIMD
    using V = simd::vec<T>;
    constexpr int W = simd::width<T>();
    for (int r = 0; r < rows; r += W) {
      V bias{};
      if (slope) {
        const V distance = simd::load(diagonal + r) - (first_key + T(j));
        bias = -simd::load(slope + r) * (distance < T(0) ? -distance : distance);
      }
      if (bias_tile) bias += simd::load(bias_tile + j * rows + r);
      gradient_vector(st + j * rows + r, dpt + j * rows + r, simd::load(lse2 + r), simd::load(di + r), g, bias);
    }
#else
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, rows), [&](const int r) {
      gradient_scalar(st[j * rows + r], dpt[j * rows + r], lse2[r], di[r], g,
                      (slope ? alibi_bias(slope[r], diagonal[r] - (first_key + T(j))) : T(0)) +
                          (bias_tile ? bias_tile[j * rows + r] : T(0)));
    });
#endif
  });
}

}  // namespace detail
}  // namespace kattn
