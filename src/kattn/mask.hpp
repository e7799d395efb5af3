// Which keys a query row sees: causal (bottom-right aligned), sliding window, or all.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "kattn/options.hpp"

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

  static KeyWindow from(const Options& opt) {
    KeyWindow w{opt.window_left, opt.window_right, opt.diagonal_shift};
    if (opt.causal) w.right = 0;  // min(right, 0) for every right, unbounded included
    return w;
  }

  // First visible key of query i (may exceed last(i): then the row sees nothing).
  KOKKOS_INLINE_FUNCTION std::int64_t first(std::int64_t i, std::int64_t q_len, std::int64_t kv_len) const {
    if (left < 0) return 0;
    const std::int64_t f = i + (kv_len - q_len) + shift - left;
    return f < 0 ? 0 : f;
  }
  // Last visible key of query i, or -1 ... kv_len - 1.
  KOKKOS_INLINE_FUNCTION std::int64_t last(std::int64_t i, std::int64_t q_len, std::int64_t kv_len) const {
    if (right < 0) return kv_len - 1;
    const std::int64_t l = i + (kv_len - q_len) + shift + right;
    return l < kv_len - 1 ? l : kv_len - 1;
  }
  // The query rows that see some key of [kb, ke] (kb <= ke < kv_len) form the interval
  // [first_query(kb), last_query(ke)] (it may be empty, or hold rows that see no key at all):
  // the inverse of first/last, for kernels that loop over queries per key tile (the backward).
  KOKKOS_INLINE_FUNCTION std::int64_t first_query(std::int64_t kb, std::int64_t q_len, std::int64_t kv_len) const {
    if (right < 0) return 0;
    const std::int64_t i = kb - (kv_len - q_len) - shift - right;
    return i < 0 ? 0 : i;
  }
  KOKKOS_INLINE_FUNCTION std::int64_t last_query(std::int64_t ke, std::int64_t q_len, std::int64_t kv_len) const {
    if (left < 0) return q_len - 1;
    const std::int64_t i = ke - (kv_len - q_len) - shift + left;
    return i < q_len - 1 ? i : q_len - 1;
  }
  KOKKOS_INLINE_FUNCTION bool visible(std::int64_t i, std::int64_t j, std::int64_t q_len,
                                      std::int64_t kv_len) const {
    return j >= first(i, q_len, kv_len) && j <= last(i, q_len, kv_len);
  }
};

}  // namespace kattn
