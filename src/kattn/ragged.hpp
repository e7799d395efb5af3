// Ragged batches: sequences of different lengths packed without padding and found through indptr
// arrays (FlashInfer's layout). Sequence b owns rows [indptr[b], indptr[b + 1]) of a packed array:
//   q [total_q, Hq, D] with q_indptr [B + 1];  k, v [total_kv, Hkv, D] with kv_indptr [B + 1];
//   o [total_q, Hq, D];  lse [total_q, Hq] (natural log; FlashInfer's layout, row-major in the
//   query row so a request's rows are contiguous).
// Any sequence may be empty (no queries, no keys, or both); queries per sequence from 0 up, so
// decode (1), multi-token appends and prefills mix in one call.
//
// A layout is validated once on the host (index arrays are small: they are copied there) and may
// be reused for many calls on the same batch, e.g. every layer of a model in one decoding step.
// Index arrays may be int32 or int64 views in any memory space; the layout keeps int64 copies in
// MemorySpace for the kernels. Every inconsistency is a kattn::Error naming the array.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kattn/core/attention_params.hpp"
#include "kattn/detail/shapes.hpp"
#include "kattn/errors.hpp"

namespace kattn {

// Queries and keys of each sequence of a batch, on the host (what the split planner looks at).
struct BatchLengths {
  std::vector<std::int64_t> q_len, kv_len;
  std::int64_t max_q() const;
  std::int64_t max_kv() const;
};

inline std::int64_t BatchLengths::max_q() const {
  std::int64_t m = 0;
  for (std::int64_t x : q_len) m = x > m ? x : m;
  return m;
}
inline std::int64_t BatchLengths::max_kv() const {
  std::int64_t m = 0;
  for (std::int64_t x : kv_len) m = x > m ? x : m;
  return m;
}

namespace detail {

template <class View>
void require_index_view() {
  using V = typename View::non_const_value_type;
  static_assert(View::rank == 1, "kattn: index arrays (indptr, page indices, last page lengths) must be rank-1 views");
  static_assert(std::is_integral<V>::value && std::is_signed<V>::value && (sizeof(V) == 4 || sizeof(V) == 8),
                "kattn: index arrays must hold int32 or int64 values");
}

// An index array on the host, as int64.
template <class View>
std::vector<std::int64_t> index_values(const View& view) {
  require_index_view<View>();
  const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), view);
  std::vector<std::int64_t> out(host.extent(0));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::int64_t>(host(i));
  return out;
}

// The int64 copy the kernels read.
template <class MemorySpace>
Kokkos::View<std::int64_t*, MemorySpace> device_index(const std::vector<std::int64_t>& values, const std::string& label) {
  Kokkos::View<std::int64_t*, MemorySpace> d(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kattn::" + label),
                                             values.size());
  const Kokkos::View<const std::int64_t*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged> h(values.data(), values.size());
  Kokkos::deep_copy(d, h);
  return d;
}

// indptr of `batch` sequences (batch < 0: any): batch + 1 offsets from 0, non-decreasing.
inline void check_indptr(const std::vector<std::int64_t>& indptr, const char* name, std::int64_t batch,
                         const char* batch_from) {
  KATTN_REQUIRE(!indptr.empty(), name, ": expected B + 1 offsets (at least one), got an empty array");
  if (batch >= 0)
    KATTN_REQUIRE(static_cast<std::int64_t>(indptr.size()) == batch + 1, name, ": expected ", batch + 1,
                  " offsets (B + 1, B = ", batch, " from ", batch_from, "), got ", indptr.size());
  KATTN_REQUIRE(indptr[0] == 0, name, ": expected the first offset to be 0, got ", indptr[0]);
  for (std::size_t b = 1; b < indptr.size(); ++b)
    KATTN_REQUIRE(indptr[b] >= indptr[b - 1], name, ": expected non-decreasing offsets, got ", indptr[b - 1], " then ",
                  indptr[b], " at positions ", b - 1, " and ", b);
}

// The offsets of sequences of these lengths (B + 1, from 0), and back.
inline std::vector<std::int64_t> indptr_of(const std::vector<std::int64_t>& lengths) {
  std::vector<std::int64_t> indptr(lengths.size() + 1, 0);
  for (std::size_t b = 0; b < lengths.size(); ++b) indptr[b + 1] = indptr[b] + lengths[b];
  return indptr;
}
inline std::vector<std::int64_t> lengths_of(const std::vector<std::int64_t>& indptr) {
  std::vector<std::int64_t> len(indptr.size() - 1);
  for (std::size_t b = 0; b + 1 < indptr.size(); ++b) len[b] = indptr[b + 1] - indptr[b];
  return len;
}

// q [total_q, Hq, D], o likewise, lse [total_q, Hq] (or empty): into p's query side. Returns
// (Hq, D) through p; total_q is checked against the layout's.
template <class QView, class OView, class LseView, class P>
void ragged_query_params(const QView& q, const OView& o, const LseView& lse, std::int64_t total_q,
                         const char* total_from, P& p) {
  static_assert(QView::rank == 3 && OView::rank == 3, "kattn: ragged q and o must be rank-3 views [total_q, heads, dim]");
  static_assert(LseView::rank == 2, "kattn: ragged lse must be a rank-2 view [total_q, heads]");
  const std::int64_t Hq = q.extent(1), D = q.extent(2);
  KATTN_REQUIRE(static_cast<std::int64_t>(q.extent(0)) == total_q, "q: expected ", total_q, " rows (the last offset of ",
                total_from, "), got ", q.extent(0));
  KATTN_REQUIRE(D >= 1, "q: expected a head dim of at least 1, got ", D);
  KATTN_REQUIRE(Hq >= 1, "q: expected at least one query head, got ", Hq);
  require_extent(o, "o", 0, "rows", total_q, "q");
  require_extent(o, "o", 1, "heads", Hq, "q");
  require_extent(o, "o", 2, "head dim", D, "q");
  const bool want_lse = lse.size() > 0 || lse.data() != nullptr;
  if (want_lse) {
    require_extent(lse, "lse", 0, "rows", total_q, "q");
    require_extent(lse, "lse", 1, "heads", Hq, "q");
  }
  require_contiguous_dim(q, "q");
  require_contiguous_dim(o, "o");
  KATTN_REQUIRE(Hq <= INT32_MAX && D <= INT32_MAX, "q: heads and head dim must each fit in 32 bits");
  p.q = rows_operand(q);
  p.o = rows_operand(o);
  if (want_lse) p.lse = lse_operand(lse);
  p.heads_q = static_cast<int>(Hq);
  p.head_dim = static_cast<int>(D);
  p.q_total = total_q;
}

// The KV heads of k (already shape-checked against v): Hq must be a multiple.
inline void check_gqa(std::int64_t heads_q, std::int64_t heads_kv) {
  KATTN_REQUIRE(heads_kv >= 1, "k: expected at least one KV head, got ", heads_kv);
  KATTN_REQUIRE(heads_q % heads_kv == 0, "q: expected a number of heads that is a multiple of the ", heads_kv,
                " KV heads of k (GQA), got ", heads_q);
}

}  // namespace detail

// A validated ragged batch: B sequences, q_indptr and kv_indptr [B + 1] as int64 in MemorySpace.
template <class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space>
struct RaggedLayout {
  using memory_space = MemorySpace;
  Kokkos::View<std::int64_t*, MemorySpace> q_indptr, kv_indptr;
  std::int64_t batch = 0;
  std::int64_t total_q = 0, total_kv = 0;
  BatchLengths lengths;
};

// Validates q_indptr and kv_indptr [B + 1] (int32 or int64, any memory space): both start at 0,
// never decrease, and have the same length. Their last offsets are checked against the arrays
// when the layout is used.
template <class MemorySpace = Kokkos::DefaultExecutionSpace::memory_space, class QIndptr, class KvIndptr>
RaggedLayout<MemorySpace> make_ragged_layout(const QIndptr& q_indptr, const KvIndptr& kv_indptr) {
  const std::vector<std::int64_t> qi = detail::index_values(q_indptr);
  const std::vector<std::int64_t> ki = detail::index_values(kv_indptr);
  detail::check_indptr(qi, "q_indptr", -1, "");
  detail::check_indptr(ki, "kv_indptr", static_cast<std::int64_t>(qi.size()) - 1, "q_indptr");
  RaggedLayout<MemorySpace> layout;
  layout.batch = static_cast<std::int64_t>(qi.size()) - 1;
  KATTN_REQUIRE(layout.batch <= INT32_MAX, "q_indptr: more sequences than fit in 32 bits: ", layout.batch);
  layout.total_q = qi.back();
  layout.total_kv = ki.back();
  layout.lengths.q_len = detail::lengths_of(qi);
  layout.lengths.kv_len = detail::lengths_of(ki);
  layout.q_indptr = detail::device_index<MemorySpace>(qi, "q_indptr");
  layout.kv_indptr = detail::device_index<MemorySpace>(ki, "kv_indptr");
  return layout;
}

// A ragged problem's params: q, o [total_q, Hq, D], k, v [total_kv, Hkv, D], lse [total_q, Hq]
// (an empty view: not wanted), checked against the layout.
template <class QView, class KView, class VView, class OView, class LseView, class MemorySpace>
detail::params_of<QView, KView, VView, OView, LseView> ragged_params(const QView& q, const KView& k, const VView& v,
                                                                     const OView& o, const LseView& lse,
                                                                     const RaggedLayout<MemorySpace>& layout) {
  static_assert(KView::rank == 3 && VView::rank == 3, "kattn: ragged k and v must be rank-3 views [total_kv, heads, dim]");
  detail::params_of<QView, KView, VView, OView, LseView> p;
  detail::ragged_query_params(q, o, lse, layout.total_q, "q_indptr", p);
  KATTN_REQUIRE(static_cast<std::int64_t>(k.extent(0)) == layout.total_kv, "k: expected ", layout.total_kv,
                " rows (the last offset of kv_indptr), got ", k.extent(0));
  detail::require_extent(k, "k", 2, "head dim", p.head_dim, "q");
  detail::check_gqa(p.heads_q, k.extent(1));
  detail::require_extent(v, "v", 0, "rows", layout.total_kv, "k");
  detail::require_extent(v, "v", 1, "KV heads", k.extent(1), "k");
  detail::require_extent(v, "v", 2, "head dim", p.head_dim, "q");
  detail::require_contiguous_dim(k, "k");
  detail::require_contiguous_dim(v, "v");
  p.k = detail::rows_operand(k);
  p.v = detail::rows_operand(v);
  p.batch = static_cast<int>(layout.batch);
  p.heads_kv = static_cast<int>(k.extent(1));
  p.q_len = layout.lengths.max_q();
  p.kv_len = layout.lengths.max_kv();
  p.q_indptr = layout.q_indptr.data();
  p.kv_indptr = layout.kv_indptr.data();
  return p;
}

}  // namespace kattn
