// The softmax state of one query row over a set of keys, and its algebra. Every algorithm in
// kattn (a tile inside a kernel, a KV split, a cascade prefix, a shard on another rank, the CUDA
// kernels) is this algebra at a different scale, so it is written once here: the state, the fold
// of a tile's maximum, the merge of two states with its o update, and the finish.
//
//   state (m, l, o):  m = max score, l = sum 2^(s - m), o = sum 2^(s - m) v   (o unnormalised)
//
// Scores are in log2 units (the kernels pre-scale by log2(e) and use exp2). The empty state is
// m = -inf, l = 0, o = 0: merging with it is the identity, and it finishes as o = 0, lse = -inf.
// NaN rule (the textbook's, at every scale): NaN propagates. A NaN score makes m NaN, and
// everything that depends on it; a side of a merge that has seen keys always contributes
// alpha * o, even when alpha underflowed to 0, so a NaN in its o stays NaN; only an empty side
// (which has seen no key) contributes nothing, and its o is never read.
#pragma once

#include "kattn/core/host_device.hpp"

namespace kattn {

constexpr double kLog2e = 1.4426950408889634074;  // log2(e)
constexpr double kLn2 = 0.69314718055994530942;   // ln(2)

template <class T>
struct RowState {
  T m;  // running max, log2 units
  T l;  // running sum of 2^(s - m)

  KATTN_CORE_INLINE static RowState empty() { return {-core::infinity<T>(), T(0)}; }
  KATTN_CORE_INLINE bool is_empty() const { return l == T(0) && m == -core::infinity<T>(); }
};

// max that propagates NaN from either side (fmax and std::max drop or order-depend on NaN). On
// sm_80 and later one instruction (max.NaN), as cheap as fmaxf in the CUDA kernels' row maxima.
template <class T>
KATTN_CORE_INLINE T max_nan(T a, T b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  if constexpr (sizeof(T) == 4) {
    T r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
  }
#endif
  return (a > b || a != a) ? a : b;
}

// 2^(m_old - m_new), with the empty state's -inf mapped to 0 without forming -inf - -inf.
template <class T>
KATTN_CORE_INLINE T rescale_factor(T m_old, T m_new) {
  return (m_old == -core::infinity<T>()) ? T(0) : core::exp2(m_old - m_new);
}

// Merge of two states: the merged (m, l), the factors that rescale each side's o, and whether
// each side has seen keys (an empty side's o is never read).
template <class T>
struct Merge {
  RowState<T> state;
  T alpha_a;
  T alpha_b;
  bool a_seen;
  bool b_seen;
};

template <class T>
KATTN_CORE_INLINE Merge<T> merge(const RowState<T>& a, const RowState<T>& b) {
  const bool a_seen = !a.is_empty(), b_seen = !b.is_empty();
  const T m = max_nan(a.m, b.m);
  if (m == -core::infinity<T>()) return {RowState<T>::empty(), T(0), T(0), false, false};  // both empty
  const T aa = rescale_factor(a.m, m);
  const T ab = rescale_factor(b.m, m);
  return {{m, a.l * aa + b.l * ab}, aa, ab, a_seen, b_seen};
}

// The o update of a merge: o = alpha_a o_a + alpha_b o_b, an empty side left out. V is a value
// or a vector of values (host SIMD, CUDA registers).
template <class T, class V>
KATTN_CORE_INLINE V merged_o(const Merge<T>& mg, const V& o_a, const V& o_b) {
  if (!mg.a_seen) return mg.b_seen ? o_b * mg.alpha_b : V{};
  if (!mg.b_seen) return o_a * mg.alpha_a;
  return o_a * mg.alpha_a + o_b * mg.alpha_b;
}

// Fold a new maximum into a state before adding a tile's terms: returns the factor alpha by which
// the old l (done here) and o (rescaled_o) must be scaled. The caller then adds sum 2^(s - m_new)
// to l and the weighted v to o. A state's o starts at 0, so alpha = 0 from the empty state is
// exact.
template <class T>
KATTN_CORE_INLINE T fold_max(RowState<T>& st, T tile_max) {
  const T m_new = max_nan(st.m, tile_max);
  const T alpha = rescale_factor(st.m, m_new);
  st.m = m_new;
  st.l *= alpha;
  return alpha;
}

// The value subtracted from a tile's scores before exponentiating, once the tile's maximum is
// folded in: m, or 0 while the row has seen nothing, so that 2^(-inf - 0) = 0 instead of NaN.
template <class T>
KATTN_CORE_INLINE T exponent_offset(const RowState<T>& st) {
  return st.m == -core::infinity<T>() ? T(0) : st.m;
}

// The o update of a fold: o <- alpha o (then + P V, which the tile product adds).
template <class T, class V>
KATTN_CORE_INLINE V rescaled_o(const V& o, T alpha) {
  return o * alpha;
}

// Finish: the factor that turns o into the output (1/l; 0 for a row that saw no key) and the
// natural-log LSE (-inf for a row that saw no key).
template <class T>
struct Finish {
  T inv_l;
  T lse;
};

template <class T>
KATTN_CORE_INLINE Finish<T> finish(const RowState<T>& st) {
  if (st.l == T(0)) return {T(0), -core::infinity<T>()};
  return {T(1) / st.l, (st.m + core::log2(st.l)) * T(kLn2)};
}

// Finish with an attention sink (GPT-OSS, StreamingLLM): a logit `sink` per head (log2 units,
// scaled as the scores are, after softcap) that takes probability mass and carries no value. It is
// the state (m = sink, l = 1, o = 0) merged into the row's final state, so it must be applied once
// per row, where the row's state is final (after every tile, split, cascade part and rank): o
// scaled by inv_l gives softmax over the keys and the sink, lse includes the sink. A row that saw
// no key gets o = 0 and lse = sink; sink = -inf is no sink (finish's result); NaN propagates.
template <class T>
KATTN_CORE_INLINE Finish<T> finish_with_sink(const RowState<T>& st, T sink) {
  const Merge<T> mg = merge(st, RowState<T>{sink, T(1)});
  if (mg.state.l == T(0) || !mg.b_seen) return finish(st);  // sink -inf: nothing to merge
  // o is relative to st.m: the merge rescales it by alpha_a (0 for an empty row).
  return {mg.alpha_a / mg.state.l, (mg.state.m + core::log2(mg.state.l)) * T(kLn2)};
}

// A sink's gradient from one row: with p = exp(sink_nat - lse) the sink's probability and
// D = dO . O the row's rowsum (the backward's delta), d(sink) = -p D; summed over the rows of the
// head. sink_nat and lse in natural-log units.
template <class T>
KATTN_CORE_INLINE T sink_gradient(T sink_nat, T lse, T delta) {
  if (sink_nat == -core::infinity<T>()) return T(0);
  return -core::exp2((sink_nat - lse) * T(kLog2e)) * delta;
}

// The output of a finished row: out = o / l.
template <class T, class V>
KATTN_CORE_INLINE V finished_o(const V& o, const Finish<T>& fin) {
  return o * fin.inv_l;
}

// A finished row (o normalised, natural-log lse) seen as a state: m = lse in log2 units, l = 1.
// Merging finished rows this way is FlashInfer's merge_state, the same algebra.
template <class T>
KATTN_CORE_INLINE RowState<T> from_lse(T lse) {
  if (lse == -core::infinity<T>()) return RowState<T>::empty();
  return {lse * T(kLog2e), T(1)};
}

}  // namespace kattn
