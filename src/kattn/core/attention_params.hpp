// The plain description of one attention problem that every kernel takes: raw pointers and
// 64-bit element strides (FlashInfer-style params), so dense, ragged and paged layouts and any
// view layout with a contiguous head dim share one kernel. The public entry points fill it
// from Kokkos views and validate it; kernels trust it. No Kokkos here: the hand-written CUDA
// kernels' params are built from it (kattn/detail/cuda/kernel_params.hpp).
#pragma once

#include "kattn/core/host_device.hpp"
#include "kattn/core/operand.hpp"
#include "kattn/core/request_rows.hpp"
#include "kattn/core/storage.hpp"

#include <cstdint>

namespace kattn {

// T: the storage type of q and o; KV: that of k and v (a 16-bit cache under float queries, or T);
// Acc: the type kernels compute in and of lse (float for 16-bit storage: core/storage.hpp).
template <class T, class Acc = accumulate_t<T>, class KV = T>
struct AttentionParams {
  using q_type = T;
  using kv_type = KV;
  using acc_type = Acc;

  // q (b, i, h, d) = q.data[b * q.stride_batch + i * q.stride_seq + h * q.stride_head + d]; in a
  // ragged batch, row i of sequence b is global row q_indptr[b] + i and the batch stride is 0.
  Operand<const T> q;
  // k, v (b, j, h, d) likewise (kv_indptr for ragged); paged: page p, slot s at
  // p * stride_batch + s * stride_seq.
  Operand<const KV> k, v;
  // o like q; lse (b, h, i) at b * stride_batch + h * stride_head + i * stride_seq (row
  // q_indptr[b] + i when ragged); lse may be null.
  Operand<T> o;
  Operand<Acc> lse;

  int batch = 0;
  int heads_q = 0;
  int heads_kv = 0;
  int head_dim = 0;
  // Dense: every sequence has q_len queries and kv_len keys. Ragged/paged: the longest.
  std::int64_t q_len = 0;
  std::int64_t kv_len = 0;
  // Query positions of the whole batch: batch * q_len when dense, q_indptr[batch] when ragged.
  std::int64_t q_total = 0;

  // Ragged batches (null when dense): sequence b owns rows [indptr[b], indptr[b + 1]).
  const std::int64_t* q_indptr = nullptr;
  const std::int64_t* kv_indptr = nullptr;
  // Paged KV (null when not paged): sequence b's pages are
  // kv_page_indices[kv_page_indptr[b] .. kv_page_indptr[b + 1]), the last one holding
  // kv_last_page_len[b] keys.
  const std::int64_t* kv_page_indptr = nullptr;
  const std::int64_t* kv_page_indices = nullptr;
  const std::int64_t* kv_last_page_len = nullptr;
  std::int64_t page_size = 0;
  std::int64_t num_pages = 0;  // pages in k and v: every page index is below it

  // ALiBi (core/alibi.hpp): each query head's slope times log2(e), the kernels' score units; null
  // when the call has none. Set by the forward's entry points from Options::alibi_slopes.
  const Acc* alibi_log2 = nullptr;
  // A cascade's prefix pass with ALiBi or a bias (detail/cascade.hpp): the requests its one
  // sequence's rows belong to. Inactive everywhere else.
  RequestRows requests;

  KATTN_CORE_INLINE int group_size() const { return heads_q / heads_kv; }

  KATTN_CORE_INLINE std::int64_t seq_q_len(int b) const {
    return q_indptr ? q_indptr[b + 1] - q_indptr[b] : q_len;
  }
  KATTN_CORE_INLINE std::int64_t seq_kv_len(int b) const {
    if (kv_page_indptr) {
      const std::int64_t pages = kv_page_indptr[b + 1] - kv_page_indptr[b];
      return pages == 0 ? 0 : (pages - 1) * page_size + kv_last_page_len[b];
    }
    return kv_indptr ? kv_indptr[b + 1] - kv_indptr[b] : kv_len;
  }
  // Query position i of sequence b (tile work that knows its sequence's lengths passes them) as
  // the score variants place it: itself, or in a cascade's prefix pass the query of its request.
  KATTN_CORE_INLINE QueryAt query_at(int b, std::int64_t i, std::int64_t seq_q, std::int64_t seq_kv) const {
    return requests.active() ? requests.at(i) : QueryAt{b, i, seq_q, seq_kv};
  }
  // Global query row of (b, i): indexes o/lse in ragged layouts and the split workspace.
  KATTN_CORE_INLINE std::int64_t q_row(int b, std::int64_t i) const {
    return q_indptr ? q_indptr[b] + i : std::int64_t(b) * q_len + i;
  }
  // Offset of query row i of sequence b (dense or ragged) for a q-like operand.
  template <class U>
  KATTN_CORE_INLINE U* q_row_ptr(const Operand<U>& a, int b, std::int64_t i, int h) const {
    return a.data + (q_indptr ? (q_indptr[b] + i) * a.stride_seq : b * a.stride_batch + i * a.stride_seq) +
           h * a.stride_head;
  }
  KATTN_CORE_INLINE const T* q_ptr(int b, std::int64_t i, int h) const { return q_row_ptr(q, b, i, h); }
  KATTN_CORE_INLINE T* o_ptr(int b, std::int64_t i, int h) const { return q_row_ptr(o, b, i, h); }
  KATTN_CORE_INLINE Acc* lse_ptr(int b, std::int64_t i, int h) const { return q_row_ptr(lse, b, i, h); }
  // Key j of sequence b, head h, in a k-like operand (dense, ragged or paged).
  template <class U>
  KATTN_CORE_INLINE U* kv_row_ptr(const Operand<U>& a, int b, std::int64_t j, int h) const {
    std::int64_t at = 0;
    if (kv_page_indptr) {
      const std::int64_t page = kv_page_indices[kv_page_indptr[b] + j / page_size];
      at = page * a.stride_batch + (j % page_size) * a.stride_seq;
    } else if (kv_indptr) {
      at = (kv_indptr[b] + j) * a.stride_seq;
    } else {
      at = b * a.stride_batch + j * a.stride_seq;
    }
    return a.data + at + h * a.stride_head;
  }
  KATTN_CORE_INLINE const KV* k_ptr(int b, std::int64_t j, int h) const { return kv_row_ptr(k, b, j, h); }
  KATTN_CORE_INLINE const KV* v_ptr(int b, std::int64_t j, int h) const { return kv_row_ptr(v, b, j, h); }
};

}  // namespace kattn
