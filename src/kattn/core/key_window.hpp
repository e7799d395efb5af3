// Which keys a query row sees: causal (bottom-right aligned), sliding window, or all; and the
// clamp of that interval to a key tile. Written once for every kernel (forward, split-KV,
// backward, the MPI shard arithmetic, the CUDA kernels) and for the references. No Kokkos here.
#pragma once

#include <cstdint>

#include "kattn/core/host_device.hpp"

namespace kattn {

// The visible keys of query i form one interval [first(i), last(i)] that moves right with i.
// Bounds are relative to the diagonal key i + (kv_len - q_len) + shift; a negative bound means
// unbounded. `shift` places a shard of a longer sequence (ring attention): a query shard at
// global offset qo against a key shard at offset ko of sequences of lengths Nq, Nk has
// shift = (qo - ko) + (Nk - Nq) - (kv_len - q_len).
struct KeyWindow {
  std::int64_t left = -1;   // keys before the diagonal
  std::int64_t right = -1;  // keys after the diagonal
  std::int64_t shift = 0;   // moves the diagonal right by this many keys

  // From kattn::Options (options.hpp), or anything with its four mask fields.
  template <class MaskOptions>
  static KeyWindow from(const MaskOptions& opt) {
    KeyWindow w{opt.window_left, opt.window_right, opt.diagonal_shift};
    if (opt.causal) w.right = 0;  // min(right, 0) for every right, unbounded included
    return w;
  }
  KATTN_CORE_INLINE static KeyWindow causal() { return {-1, 0, 0}; }

  // The key on query i's diagonal (the causal mask's last key; ALiBi's distance 0), whether or not
  // the window bounds either side. May lie outside [0, kv_len).
  KATTN_CORE_INLINE std::int64_t diagonal(std::int64_t i, std::int64_t q_len, std::int64_t kv_len) const {
    return i + (kv_len - q_len) + shift;
  }

  // First visible key of query i (may exceed last(i): then the row sees nothing).
  KATTN_CORE_INLINE std::int64_t first(std::int64_t i, std::int64_t q_len, std::int64_t kv_len) const {
    if (left < 0) return 0;
    const std::int64_t f = diagonal(i, q_len, kv_len) - left;
    return f < 0 ? 0 : f;
  }
  // Last visible key of query i, or -1 ... kv_len - 1.
  KATTN_CORE_INLINE std::int64_t last(std::int64_t i, std::int64_t q_len, std::int64_t kv_len) const {
    if (right < 0) return kv_len - 1;
    const std::int64_t l = diagonal(i, q_len, kv_len) + right;
    return l < kv_len - 1 ? l : kv_len - 1;
  }
  // The query rows that see some key of [kb, ke] (kb <= ke < kv_len) form the interval
  // [first_query(kb), last_query(ke)] (it may be empty, or hold rows that see no key at all):
  // the inverse of first/last, for kernels that loop over queries per key tile (the backward).
  KATTN_CORE_INLINE std::int64_t first_query(std::int64_t kb, std::int64_t q_len, std::int64_t kv_len) const {
    if (right < 0) return 0;
    const std::int64_t i = kb - (kv_len - q_len) - shift - right;
    return i < 0 ? 0 : i;
  }
  KATTN_CORE_INLINE std::int64_t last_query(std::int64_t ke, std::int64_t q_len, std::int64_t kv_len) const {
    if (left < 0) return q_len - 1;
    const std::int64_t i = ke - (kv_len - q_len) - shift + left;
    return i < q_len - 1 ? i : q_len - 1;
  }
  KATTN_CORE_INLINE bool visible(std::int64_t i, std::int64_t j, std::int64_t q_len, std::int64_t kv_len) const {
    return j >= first(i, q_len, kv_len) && j <= last(i, q_len, kv_len);
  }
  // How many keys query i sees (0: none).
  KATTN_CORE_INLINE std::int64_t keys_seen(std::int64_t i, std::int64_t q_len, std::int64_t kv_len) const {
    const std::int64_t n = last(i, q_len, kv_len) - first(i, q_len, kv_len) + 1;
    return n > 0 ? n : 0;
  }
  // The visible (query, key) pairs of the queries [i_begin, i_end) (all of them by default): what
  // FLOP counts, progress fractions and the distributed schedules count. On the host, O(queries).
  std::int64_t visible_pairs(std::int64_t q_len, std::int64_t kv_len, std::int64_t i_begin = 0,
                             std::int64_t i_end = -1) const {
    if (i_end < 0) i_end = q_len;
    std::int64_t pairs = 0;
    for (std::int64_t i = i_begin; i < i_end; ++i) pairs += keys_seen(i, q_len, kv_len);
    return pairs;
  }

  // The keys [begin, end) of the tile of n_keys keys at kb that query i sees (begin == end: none).
  KATTN_CORE_INLINE void tile_keys(std::int64_t i, std::int64_t kb, int n_keys, std::int64_t q_len, std::int64_t kv_len,
                                   int& begin, int& end) const {
    const std::int64_t f = first(i, q_len, kv_len) - kb;
    const std::int64_t l = last(i, q_len, kv_len) - kb + 1;
    begin = static_cast<int>(f < 0 ? 0 : (f > n_keys ? n_keys : f));
    end = static_cast<int>(l < begin ? begin : (l > n_keys ? n_keys : l));
  }
  // The keys of that tile some query of [i_first, i_last] may see lie in [begin, end): from the
  // first query's first key to the last query's last (both move right with i). A superset.
  KATTN_CORE_INLINE void tile_keys_of_rows(std::int64_t i_first, std::int64_t i_last, std::int64_t kb, int n_keys,
                                           std::int64_t q_len, std::int64_t kv_len, int& begin, int& end) const {
    int unused = 0;
    tile_keys(i_first, kb, n_keys, q_len, kv_len, begin, unused);
    tile_keys(i_last, kb, n_keys, q_len, kv_len, unused, end);
  }
  // Whether every query of [i_first, i_last] sees all n_keys keys from kb (then no mask is needed).
  KATTN_CORE_INLINE bool rows_see_whole_tile(std::int64_t i_first, std::int64_t i_last, std::int64_t kb, int n_keys,
                                             std::int64_t q_len, std::int64_t kv_len) const {
    return kb >= first(i_last, q_len, kv_len) && kb + n_keys - 1 <= last(i_first, q_len, kv_len);
  }
};

}  // namespace kattn
