// The backward's NaN policy: the gradients are NaN exactly where the textbook backward makes them
// NaN, whatever the tile sizes. The textbook sums every (row, key) pair of a sequence and KV
// head, masked ones included, where P = 0 (or NaN when the row's softmax is NaN) and dS =
// P (0 - D): a masked pair turns a non-finite value into NaN through 0 x NaN and 0 x Inf. The
// tile passes compute only the tiles some row sees, so they add that spread here:
//   dK[j]: NaN when a row that does not see key j has a NaN softmax (lse) or a D = rowsum(dO * O)
//          that is not finite; element d when such a row's q[d] is not finite (dS[i, j] q_i).
//   dV[j]: NaN when a row that does not see key j has a NaN softmax; element d when such a row's
//          dO[d] is not finite (P[i, j] dO_i).
//   dQ[i][d]: NaN for every row when some key of the sequence and KV head has a k[d] that is not
//          finite (dS[i, j] k_j: 0 x NaN for the rows that do not see it; the rows that do see
//          it have a NaN softmax).
// Windows are monotone (first and last visible keys never decrease with the row), so the keys
// every row of a set sees are one interval: [first(last row of the set), last(first row)].
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "kattn/backward_params.hpp"
#include "kattn/compat.hpp"
#include "kattn/detail/backward_workspace.hpp"
#include "kattn/core/key_window.hpp"

namespace kattn {
namespace detail {

template <class T>
KOKKOS_INLINE_FUNCTION bool is_finite(T x) {
  return x - x == T(0);  // NaN and +-Inf give NaN
}

template <class T>
KOKKOS_INLINE_FUNCTION bool all_finite(const T* x, int n) {
  int bad = 0;  // no early exit, so that the loop vectorises: every row is scanned per team
  for (int d = 0; d < n; ++d) bad |= !is_finite(x[d]);
  return bad == 0;
}

// Kokkos 3.4 has no quiet_NaN trait.
template <class T>
KOKKOS_INLINE_FUNCTION T nan_value() {
  return compat::infinity<T>() - compat::infinity<T>();
}

// Keys outside [lo, hi] get NaN, when some row of the set (rows first_row .. last_row) exists.
struct MaskedSpread {
  bool any = false;
  std::int64_t lo = 0, hi = -1, first_row = 0, last_row = -1;
  KOKKOS_INLINE_FUNCTION bool nan_at(std::int64_t j) const { return any && (j < lo || j > hi); }
};

// The rows' per-element spreads of dK (through q) and dV (through dO), and the all-element ones.
struct MaskedSpreads {
  MaskedSpread dk, dk_q, dv, dv_do;
};

// Element d of key j's gradient is NaN through a row of `rows` that does not see j and whose
// row_value(t)[d] is not finite. Only runs when such a row exists (an input was not finite).
template <class T, class RowPtr>
KOKKOS_INLINE_FUNCTION bool element_nan(const MaskedSpread& rows, const KeyWindow& window, int G, std::int64_t q_len,
                                        std::int64_t kv_len, std::int64_t j, int d, const RowPtr& row_value) {
  if (!rows.nan_at(j)) return false;
  for (std::int64_t t = rows.first_row; t <= rows.last_row; ++t)
    if (!window.visible(t / G, j, q_len, kv_len) && !is_finite(row_value(t)[d])) return true;
  return false;
}

// The spreads for sequence b, KV head hk (team-level; every thread gets them).
template <class Member, class T>
KOKKOS_INLINE_FUNCTION MaskedSpreads masked_spreads(const Member& member, const BackwardParams<T>& p,
                                                    const BackwardWorkspace<T>& ws, const KeyWindow& window, int b,
                                                    int hk, std::int64_t q_len, std::int64_t kv_len) {
  using Rows = Kokkos::MinMaxScalar<std::int64_t>;
  const int G = p.fwd.group_size();
  const int D = p.fwd.head_dim;
  const auto reduce = [&](const auto& bad_row) {
    Rows r;
    Kokkos::parallel_reduce(
        Kokkos::TeamThreadRange(member, std::int64_t(G) * q_len),
        [&](const std::int64_t t, Rows& acc) {
          if (!bad_row(t)) return;
          acc.min_val = t < acc.min_val ? t : acc.min_val;
          acc.max_val = t > acc.max_val ? t : acc.max_val;
        },
        Kokkos::MinMax<std::int64_t>(r));
    MaskedSpread out;
    out.any = r.min_val <= r.max_val;
    if (out.any) {
      out.first_row = r.min_val;
      out.last_row = r.max_val;
      out.lo = window.first(r.max_val / G, q_len, kv_len);
      out.hi = window.last(r.min_val / G, q_len, kv_len);
    }
    return out;
  };
  const auto softmax_nan = [&](std::int64_t t) {
    const T lse2 = ws.lse2[ws.row(p.fwd, b, hk, t)];
    return lse2 != lse2;
  };
  MaskedSpreads s;
  s.dk = reduce([&](std::int64_t t) { return softmax_nan(t) || !is_finite(ws.di[ws.row(p.fwd, b, hk, t)]); });
  s.dk_q = reduce([&](std::int64_t t) { return !all_finite(p.fwd.q_ptr(b, t / G, hk * G + static_cast<int>(t % G)), D); });
  s.dv = reduce(softmax_nan);
  s.dv_do = reduce([&](std::int64_t t) { return !all_finite(p.do_ptr(b, t / G, hk * G + static_cast<int>(t % G)), D); });
  return s;
}

}  // namespace detail
}  // namespace kattn
