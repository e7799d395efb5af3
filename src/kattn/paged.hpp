// Paged KV caches (vLLM's PagedAttention, FlashInfer's layout): K and V live in pages
//   k, v [num_pages, page_size, Hkv, D]
// and sequence b's keys are the pages kv_page_indices[kv_page_indptr[b] .. kv_page_indptr[b + 1])
// in that order, every one full but the last, which holds kv_last_page_len[b] keys (1 .. page_size;
// a sequence without pages has no keys, and its last page length must be 0). Pages may be in any
// order and shared between sequences (a common prefix). Queries are ragged (ragged.hpp):
// q [total_q, Hq, D] with q_indptr [B + 1]; o like q; lse [total_q, Hq].
//
// Like RaggedLayout, a PagedLayout is validated once on the host and reusable; every page index
// out of range, offset array out of order or last-page length out of bounds is a kattn::Error
// naming the array and the position, before any kernel runs.
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "kattn/core/attention_params.hpp"
#include "kattn/detail/shapes.hpp"
#include "kattn/errors.hpp"
#include "kattn/ragged.hpp"

namespace kattn {

template <class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
struct PagedLayout {
  using memory_space = MemorySpace;
  Kokkos::View<std::int64_t*, MemorySpace> q_indptr, page_indptr, page_indices, last_page_len;
  std::int64_t batch = 0;
  std::int64_t total_q = 0;
  std::int64_t page_size = 0;
  std::int64_t pages_needed = 0;   // 1 + the largest page index (0 when no page is used)
  std::int64_t largest_at = -1;    // position of that index in page_indices
  std::int64_t repeated_at = -1;   // the first position in page_indices of a page listed before (shared)
  BatchLengths lengths;
};

// Validates the page table of B sequences for pages of page_size keys: q_indptr, kv_page_indptr
// [B + 1], kv_page_indices [kv_page_indptr[B]] (>= 0), kv_last_page_len [B]. Index arrays are int32
// or int64 views in any memory space. The page indices are checked against the cache's page count
// when the layout is used with k and v.
template <class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space, class QIndptr, class PageIndptr,
          class PageIndices, class LastPageLen>
PagedLayout<MemorySpace> make_paged_layout(const QIndptr& q_indptr, const PageIndptr& kv_page_indptr,
                                           const PageIndices& kv_page_indices, const LastPageLen& kv_last_page_len,
                                           std::int64_t page_size) {
  const std::vector<std::int64_t> qi = detail::index_values(q_indptr);
  const std::vector<std::int64_t> pi = detail::index_values(kv_page_indptr);
  const std::vector<std::int64_t> idx = detail::index_values(kv_page_indices);
  const std::vector<std::int64_t> last = detail::index_values(kv_last_page_len);
  KATTN_REQUIRE(page_size >= 1, "page_size: expected at least 1 key per page, got ", page_size);
  detail::check_indptr(qi, "q_indptr", -1, "");
  const std::int64_t B = static_cast<std::int64_t>(qi.size()) - 1;
  KATTN_REQUIRE(B <= INT32_MAX, "q_indptr: more sequences than fit in 32 bits: ", B);
  detail::check_indptr(pi, "kv_page_indptr", B, "q_indptr");
  KATTN_REQUIRE(static_cast<std::int64_t>(idx.size()) == pi.back(), "kv_page_indices: expected ", pi.back(),
                " entries (the last offset of kv_page_indptr), got ", idx.size());
  KATTN_REQUIRE(static_cast<std::int64_t>(last.size()) == B, "kv_last_page_len: expected ", B,
                " entries (one per sequence, B from q_indptr), got ", last.size());
  PagedLayout<MemorySpace> layout;
  for (std::size_t i = 0; i < idx.size(); ++i) {
    KATTN_REQUIRE(idx[i] >= 0 && idx[i] < INT64_MAX, "kv_page_indices: expected page indices >= 0 (and below 2^63 - 1), got ",
                  idx[i], " at position ", i);
    if (idx[i] + 1 > layout.pages_needed) {
      layout.pages_needed = idx[i] + 1;
      layout.largest_at = static_cast<std::int64_t>(i);
    }
  }
  {  // pages listed twice (shared by sequences): read by the forward, refused by the backward.
    // Sorted (index, position) pairs: memory follows the table, not the largest page index.
    std::vector<std::pair<std::int64_t, std::int64_t>> at(idx.size());
    for (std::size_t i = 0; i < idx.size(); ++i) at[i] = {idx[i], static_cast<std::int64_t>(i)};
    std::sort(at.begin(), at.end());
    for (std::size_t i = 1; i < at.size(); ++i)
      if (at[i].first == at[i - 1].first && (layout.repeated_at < 0 || at[i].second < layout.repeated_at))
        layout.repeated_at = at[i].second;
  }
  layout.lengths.q_len = detail::lengths_of(qi);
  layout.lengths.kv_len.resize(B);
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t pages = pi[b + 1] - pi[b];
    if (pages == 0) {
      KATTN_REQUIRE(last[b] == 0, "kv_last_page_len: sequence ", b, " has no pages, so expected 0, got ", last[b]);
    } else {
      KATTN_REQUIRE(last[b] >= 1 && last[b] <= page_size, "kv_last_page_len: expected 1 .. ", page_size,
                    " (the page size) for sequence ", b, ", got ", last[b]);
    }
    // A sequence's keys must count in 64 bits (the kernels index keys with int64).
    KATTN_REQUIRE(pages == 0 || pages - 1 <= (INT64_MAX - last[b]) / page_size, "kv_page_indptr: sequence ", b, " has ",
                  pages, " pages of ", page_size, " keys, more keys than fit in 64 bits");
    layout.lengths.kv_len[b] = pages == 0 ? 0 : (pages - 1) * page_size + last[b];
  }
  layout.batch = B;
  layout.total_q = qi.back();
  layout.page_size = page_size;
  layout.q_indptr = detail::device_index<MemorySpace>(qi, "q_indptr");
  layout.page_indptr = detail::device_index<MemorySpace>(pi, "kv_page_indptr");
  layout.page_indices = detail::device_index<MemorySpace>(idx, "kv_page_indices");
  layout.last_page_len = detail::device_index<MemorySpace>(last, "kv_last_page_len");
  return layout;
}

// A paged problem's params: q, o [total_q, Hq, D], lse [total_q, Hq] (or empty), k and v
// [num_pages, page_size, Hkv, D], checked against the layout.
template <class QView, class KView, class VView, class OView, class LseView, class MemorySpace>
detail::params_of<QView, KView, VView, OView, LseView> paged_params(const QView& q, const KView& k, const VView& v,
                                                                    const OView& o, const LseView& lse,
                                                                    const PagedLayout<MemorySpace>& layout) {
  static_assert(KView::rank == 4 && VView::rank == 4,
                "kattn: paged k and v must be rank-4 views [num_pages, page_size, heads, dim]");
  detail::params_of<QView, KView, VView, OView, LseView> p;
  detail::ragged_query_params(q, o, lse, layout.total_q, "q_indptr", p);
  KATTN_REQUIRE(static_cast<std::int64_t>(k.extent(1)) == layout.page_size, "k: expected pages of ", layout.page_size,
                " keys (the layout's page size), got ", k.extent(1));
  KATTN_REQUIRE(layout.pages_needed <= static_cast<std::int64_t>(k.extent(0)), "kv_page_indices: page index ",
                layout.pages_needed - 1, " at position ", layout.largest_at, " is out of range for k with ",
                k.extent(0), " pages");
  detail::require_extent(k, "k", 3, "head dim", p.head_dim, "q");
  detail::check_gqa(p.heads_q, k.extent(2));
  detail::require_extent(v, "v", 0, "pages", k.extent(0), "k");
  detail::require_extent(v, "v", 1, "page size", k.extent(1), "k");
  detail::require_extent(v, "v", 2, "KV heads", k.extent(2), "k");
  detail::require_extent(v, "v", 3, "head dim", p.head_dim, "q");
  detail::require_contiguous_dim(k, "k");
  detail::require_contiguous_dim(v, "v");
  p.k = detail::rows_operand(k);
  p.v = detail::rows_operand(v);
  p.batch = static_cast<int>(layout.batch);
  p.heads_kv = static_cast<int>(k.extent(2));
  p.q_len = layout.lengths.max_q();
  p.kv_len = layout.lengths.max_kv();
  p.q_indptr = layout.q_indptr.data();
  p.kv_page_indptr = layout.page_indptr.data();
  p.kv_page_indices = layout.page_indices.data();
  p.kv_last_page_len = layout.last_page_len.data();
  p.page_size = layout.page_size;
  p.num_pages = static_cast<std::int64_t>(k.extent(0));
  return p;
}

}  // namespace kattn
