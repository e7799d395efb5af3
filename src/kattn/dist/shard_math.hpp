// Host-side arithmetic shared by the distributed schedules: where a shard pair's diagonal lies,
// whether any of its (query, key) pairs is visible, and how many are. Internal.
#pragma once

#include <cstdint>

#include "kattn/core/key_window.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace dist {
namespace detail {

// Options for the query rows [q_global, q_global + q_len) of a sequence of Nq queries against
// the keys [k_global, k_global + kv_len) of Nk keys: the user's mask moved by the shift of
// core/key_window.hpp, shift = (qo - ko) + (Nk - Nq) - (kv_len - q_len), on top of the user's own shift.
// One split and no progress callback: the MPI layer cuts the keys and reports progress itself.
inline Options shard_options(const Options& opt, std::int64_t q_global, std::int64_t q_len, std::int64_t Nq,
                             std::int64_t k_global, std::int64_t kv_len, std::int64_t Nk) {
  Options o = opt;
  o.diagonal_shift = opt.diagonal_shift + (q_global - k_global) + (Nk - Nq) - (kv_len - q_len);
  o.splits = 1;
  o.split_chunk = 0;
  o.progress = nullptr;
  return o;
}

// Visible (query, key) pairs of a shard pair with these options (0: skip it before launching).
inline std::int64_t visible_pairs(const Options& o, std::int64_t q_len, std::int64_t kv_len) {
  if (q_len == 0 || kv_len == 0) return 0;
  const KeyWindow w = KeyWindow::from(o);
  std::int64_t pairs = 0;
  for (std::int64_t i = 0; i < q_len; ++i) {
    const std::int64_t f = w.first(i, q_len, kv_len), l = w.last(i, q_len, kv_len);
    if (l >= f) pairs += l - f + 1;
  }
  return pairs;
}

// The keys [lo, hi] of [0, kv_len) that some query row of [0, q_len) sees; lo > hi when none.
struct KeyRange {
  std::int64_t lo = 0, hi = -1;
  bool empty() const { return lo > hi; }
};
inline KeyRange visible_keys(const Options& o, std::int64_t q_len, std::int64_t kv_len) {
  KeyRange r{kv_len, -1};
  if (q_len == 0 || kv_len == 0) return r;
  const KeyWindow w = KeyWindow::from(o);
  // first(i) and last(i) never decrease with i; rows that see nothing contribute nothing.
  for (std::int64_t i = 0; i < q_len; ++i) {
    const std::int64_t f = w.first(i, q_len, kv_len), l = w.last(i, q_len, kv_len);
    if (l < f) continue;
    if (f < r.lo) r.lo = f;
    if (l > r.hi) r.hi = l;
  }
  return r;
}

}  // namespace detail
}  // namespace dist
}  // namespace kattn
