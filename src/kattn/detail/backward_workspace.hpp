// The backward pass's row-indexed workspaces: lse2 and D per query row, and (key_chunks) the
// partial dQ of key chunks 1, 2, ... (chunk 0 adds straight into dQ). Rows are (position, head
// of the GQA group) pairs, position-major as in the tiled kernels, so the rows of one tile are
// contiguous.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "kattn/core/attention_params.hpp"

namespace kattn {
namespace detail {

template <class T>
struct BackwardWorkspace {
  T* lse2 = nullptr;  // [heads_kv][rows]: lse in log2 units, +inf for a row that saw no key
  T* di = nullptr;    // [heads_kv][rows]: D = rowsum(dO * O)
  T* dq = nullptr;    // key_chunks: [chunks - 1][heads_kv][rows][dims], partial dQ of chunks 1 ..
  int* bad_keys = nullptr;  // [batch][heads_kv][head_dim]: nonzero when a key's k[d] is not finite
                            // (backward_nonfinite.hpp)
  std::int64_t rows = 0;  // rows per KV head: total query positions x group
  int dims = 0;           // padded head dim of the dQ partials

  // Row t (= position * group + head in group) of sequence b, KV head hk.
  KOKKOS_INLINE_FUNCTION std::int64_t row(const AttentionParams<T>& p, int b, int hk, std::int64_t t) const {
    return hk * rows + p.q_row(b, 0) * p.group_size() + t;
  }
  KOKKOS_INLINE_FUNCTION int* bad_keys_of(const AttentionParams<T>& p, int b, int hk) const {
    return bad_keys + (std::int64_t(b) * p.heads_kv + hk) * p.head_dim;
  }
  // Start of that row in chunk c's partial dQ (c >= 1).
  KOKKOS_INLINE_FUNCTION T* dq_row(const AttentionParams<T>& p, int c, int b, int hk, std::int64_t t) const {
    return dq + (std::int64_t(c - 1) * p.heads_kv * rows + row(p, b, hk, t)) * dims;
  }
};

}  // namespace detail
}  // namespace kattn
