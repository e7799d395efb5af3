// The softmax state of one query row over a set of keys, and its algebra. Every algorithm in
// kattn (a tile inside a kernel, a KV split, a cascade prefix, a shard on another rank) is this
// algebra at a different scale, so it is written once here.
//
//   state (m, l, o):  m = max score, l = sum 2^(s - m), o = sum 2^(s - m) v   (o unnormalised)
//
// Scores are in log2 units (the kernels pre-scale by log2(e) and use exp2). The empty state is
// m = -inf, l = 0, o = 0: merging with it is the identity, and it finishes as o = 0, lse = -inf.
// NaN propagates: a NaN score makes m NaN, and everything that depends on it.
#pragma once

#include <Kokkos_Core.hpp>

#include "kattn/compat.hpp"

namespace kattn {

constexpr double kLog2e = 1.4426950408889634074;  // log2(e)
constexpr double kLn2 = 0.69314718055994530942;   // ln(2)

template <class T>
struct RowState {
  T m;  // running max, log2 units
  T l;  // running sum of 2^(s - m)

  KOKKOS_INLINE_FUNCTION static RowState empty() { return {-compat::infinity<T>(), T(0)}; }
  KOKKOS_INLINE_FUNCTION bool is_empty() const { return l == T(0) && m == -compat::infinity<T>(); }
};

// max that propagates NaN from either side (fmax and std::max drop or order-depend on NaN).
template <class T>
KOKKOS_INLINE_FUNCTION T max_nan(T a, T b) {
  return (a > b || a != a) ? a : b;
}

// 2^(m_old - m_new), with the empty state's -inf mapped to 0 without forming -inf - -inf.
template <class T>
KOKKOS_INLINE_FUNCTION T rescale_factor(T m_old, T m_new) {
  return (m_old == -compat::infinity<T>()) ? T(0) : compat::exp2(m_old - m_new);
}

// Merge of two states: returns the merged (m, l) and the factors that rescale each side's o:
//   o = alpha_a * o_a + alpha_b * o_b.
template <class T>
struct Merge {
  RowState<T> state;
  T alpha_a;
  T alpha_b;
};

template <class T>
KOKKOS_INLINE_FUNCTION Merge<T> merge(const RowState<T>& a, const RowState<T>& b) {
  const T m = max_nan(a.m, b.m);
  if (m == -compat::infinity<T>()) return {RowState<T>::empty(), T(0), T(0)};  // both empty
  const T aa = rescale_factor(a.m, m);
  const T ab = rescale_factor(b.m, m);
  return {{m, a.l * aa + b.l * ab}, aa, ab};
}

// Fold a new maximum into a state before adding a tile's terms: returns the factor by which the
// old l and o must be scaled. The caller adds sum 2^(s - m_new) to l and the weighted v to o.
template <class T>
KOKKOS_INLINE_FUNCTION T fold_max(RowState<T>& st, T tile_max) {
  const T m_new = max_nan(st.m, tile_max);
  const T alpha = rescale_factor(st.m, m_new);
  st.m = m_new;
  st.l *= alpha;
  return alpha;
}

// Finish: the factor that turns o into the output (1/l; 0 for a row that saw no key) and the
// natural-log LSE (-inf for a row that saw no key).
template <class T>
struct Finish {
  T inv_l;
  T lse;
};

template <class T>
KOKKOS_INLINE_FUNCTION Finish<T> finish(const RowState<T>& st) {
  if (st.l == T(0)) return {T(0), -compat::infinity<T>()};
  return {T(1) / st.l, (st.m + compat::log2(st.l)) * T(kLn2)};
}

// A finished row (o normalised, natural-log lse) seen as a state: m = lse in log2 units, l = 1.
// Merging finished rows this way is FlashInfer's merge_state, the same algebra.
template <class T>
KOKKOS_INLINE_FUNCTION RowState<T> from_lse(T lse) {
  if (lse == -compat::infinity<T>()) return RowState<T>::empty();
  return {lse * T(kLog2e), T(1)};
}

}  // namespace kattn
