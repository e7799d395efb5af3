// Validation of the backward pass's arguments into a BackwardParams, dense and ragged: every
// refusal names the argument, what was expected and what came. Runs on the host before any kernel.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <type_traits>

#include "kattn/backward_params.hpp"
#include "kattn/detail/shapes.hpp"
#include "kattn/errors.hpp"
#include "kattn/paged.hpp"
#include "kattn/ragged.hpp"

namespace kattn {
namespace detail {

// `view` has the extents of `like` (named like_name), all of them.
template <class View, class Like>
void require_same_extents(const View& view, const char* name, const Like& like, const char* like_name,
                          const char* const* what) {
  static_assert(int(View::rank) == int(Like::rank), "kattn: rank mismatch");
  for (int d = 0; d < static_cast<int>(View::rank); ++d)
    require_extent(view, name, d, what[d], static_cast<std::int64_t>(like.extent(d)), like_name);
}

template <class T, class... Views>
constexpr bool all_of_type() {
  return (std::is_same<typename Views::non_const_value_type, T>::value && ...);
}

// Gradient outputs must not overlap the inputs they are computed from (a kernel would read
// values it has already overwritten). Checked for contiguous views; strided views (slices of
// one packed tensor interleave without overlapping) only must not start at the same element.
template <class Out, class In>
void require_distinct(const Out& out, const char* out_name, const In& in, const char* in_name) {
  if (out.span() == 0 || in.span() == 0) return;
  if (!out.span_is_contiguous() || !in.span_is_contiguous()) {
    KATTN_REQUIRE(static_cast<const void*>(out.data()) != static_cast<const void*>(in.data()), out_name,
                  ": must not overlap ", in_name);
    return;
  }
  const auto* o0 = reinterpret_cast<const char*>(out.data());
  const auto* o1 = o0 + out.span() * sizeof(typename Out::value_type);
  const auto* i0 = reinterpret_cast<const char*>(in.data());
  const auto* i1 = i0 + in.span() * sizeof(typename In::value_type);
  KATTN_REQUIRE(o1 <= i0 || i1 <= o0, out_name, ": must not overlap ", in_name);
}

template <class T, class DoView, class DqView, class DkView, class DvView>
void fill_gradients(BackwardParams<T>& p, const DoView& dout, const DqView& dq, const DkView& dk, const DvView& dv) {
  p.dout = detail::rows_operand(dout);
  p.dq = detail::rows_operand(dq);
  p.dk = detail::rows_operand(dk);
  p.dv = detail::rows_operand(dv);
}

template <class QView, class KView, class VView, class OView, class DoView, class DqView, class DkView,
          class DvView>
void check_gradient_views(const QView& q, const KView& k, const VView& v, const OView& o, const DoView& dout,
                          const DqView& dq, const DkView& dk, const DvView& dv) {
  static const char* const dims4[] = {"batch", "sequence length", "heads", "head dim"};
  static const char* const dims3[] = {"total length", "heads", "head dim"};
  static const char* const page_dims[] = {"pages", "page size", "heads", "head dim"};
  const char* const* q_dims = QView::rank == 4 ? dims4 : dims3;
  // Rank-4 keys under rank-3 queries: a paged cache.
  const char* const* k_dims = KView::rank == 3 ? dims3 : (QView::rank == 3 ? page_dims : dims4);
  require_same_extents(dout, "do", q, "q", q_dims);
  require_same_extents(dq, "dq", q, "q", q_dims);
  require_same_extents(dk, "dk", k, "k", k_dims);
  require_same_extents(dv, "dv", v, "v", k_dims);
  require_contiguous_dim(dout, "do");
  require_contiguous_dim(dq, "dq");
  require_contiguous_dim(dk, "dk");
  require_contiguous_dim(dv, "dv");
  require_distinct(dq, "dq", dk, "dk");
  require_distinct(dq, "dq", dv, "dv");
  require_distinct(dk, "dk", dv, "dv");
  const auto inputs = [&](const auto& out, const char* name) {
    require_distinct(out, name, q, "q");
    require_distinct(out, name, k, "k");
    require_distinct(out, name, v, "v");
    require_distinct(out, name, o, "o");
    require_distinct(out, name, dout, "do");
  };
  inputs(dq, "dq");
  inputs(dk, "dk");
  inputs(dv, "dv");
}

// The same memory as a non-const unmanaged view (for inputs that AttentionParams holds as T*).
template <class View>
auto writable_alias(const View& view) {
  using T = typename View::non_const_value_type;
  using Alias = Kokkos::View<typename View::non_const_data_type, typename View::array_layout,
                             typename View::memory_space, Kokkos::MemoryUnmanaged>;
  static_assert(std::is_same<typename Alias::non_const_value_type, T>::value, "kattn: alias type");
  return Alias(const_cast<T*>(view.data()), view.layout());
}

// The backward problem of a filled forward part: the gradient views checked against the inputs
// (extents, distinct memory, one storage type T for all but lse, which is in T's accumulation type)
// and their pointers and strides taken.
template <class T, class QView, class KView, class VView, class OView, class LseView, class DoView, class DqView,
          class DkView, class DvView>
BackwardParams<T> with_gradients(const AttentionParams<T>& fwd, const QView& q, const KView& k, const VView& v,
                                 const OView& o, const DoView& dout, const DqView& dq, const DkView& dk,
                                 const DvView& dv) {
  static_assert(all_of_type<T, QView, KView, VView, OView, DoView, DqView, DkView, DvView>() &&
                    all_of_type<accumulate_t<T>, LseView>(),
                "kattn: q, k, v, o, do, dq, dk and dv must have the same scalar type, and lse its accumulation "
                "type");
  BackwardParams<T> p;
  p.fwd = fwd;
  check_gradient_views(q, k, v, o, dout, dq, dk, dv);
  fill_gradients(p, dout, dq, dk, dv);
  return p;
}

}  // namespace detail

// Dense layout: q, o, do, dq [B, Nq, Hq, D]; k, v, dk, dv [B, Nk, Hkv, D]; lse [B, Hq, Nq]
// (required: the forward's natural-log LSE).
template <class QView, class KView, class VView, class OView, class LseView, class DoView, class DqView,
          class DkView, class DvView>
BackwardParams<typename DqView::non_const_value_type> backward_params(const QView& q, const KView& k,
                                                                      const VView& v, const OView& o,
                                                                      const LseView& lse, const DoView& dout,
                                                                      const DqView& dq, const DkView& dk,
                                                                      const DvView& dv) {
  using T = typename DqView::non_const_value_type;
  static_assert(DoView::rank == 4 && DqView::rank == 4 && DkView::rank == 4 && DvView::rank == 4,
                "kattn: do, dq, dk and dv must be rank-4 views [batch, seq, heads, dim]");
  KATTN_REQUIRE(lse.data() != nullptr || q.extent(0) * q.extent(1) * q.extent(2) == 0,
                "lse: required by the backward pass (the forward's natural-log LSE, [B, Hq, Nq])");
  // o and lse are read, never written: AttentionParams holds them as T*, so const views pass
  // through non-const unmanaged aliases.
  return detail::with_gradients<T, QView, KView, VView, OView, LseView>(
      dense_params(q, k, v, detail::writable_alias(o), detail::writable_alias(lse)), q, k, v, o, dout, dq, dk, dv);
}

// A ragged batch (ragged.hpp): q, o, dout, dq [total_q, Hq, D]; k, v, dk, dv [total_kv, Hkv, D];
// lse [total_q, Hq], the layout the ragged forward writes; all checked against the layout.
template <class QView, class KView, class VView, class OView, class LseView, class DoView, class DqView,
          class DkView, class DvView, class MemorySpace>
BackwardParams<typename DqView::non_const_value_type> ragged_backward_params(
    const QView& q, const KView& k, const VView& v, const OView& o, const LseView& lse, const DoView& dout,
    const DqView& dq, const DkView& dk, const DvView& dv, const RaggedLayout<MemorySpace>& layout) {
  using T = typename DqView::non_const_value_type;
  static_assert(DoView::rank == 3 && DqView::rank == 3 && DkView::rank == 3 && DvView::rank == 3,
                "kattn: ragged do, dq, dk and dv must be rank-3 views [total, heads, dim]");
  const AttentionParams<T> fwd = ragged_params(q, k, v, detail::writable_alias(o), detail::writable_alias(lse), layout);
  KATTN_REQUIRE(fwd.lse.data != nullptr, "lse: required, the forward's lse [total_q, Hq]");
  return detail::with_gradients<T, QView, KView, VView, OView, LseView>(fwd, q, k, v, o, dout, dq, dk, dv);
}

// A paged cache (paged.hpp): q, o, dout, dq [total_q, Hq, D]; k, v, dk, dv [num_pages, page_size,
// Hkv, D]; lse [total_q, Hq]. Every page in at most one place of the page table: a page shared by
// sequences would need the sum of their dK and dV, which the backward does not form.
template <class QView, class KView, class VView, class OView, class LseView, class DoView, class DqView,
          class DkView, class DvView, class MemorySpace>
BackwardParams<typename DqView::non_const_value_type> paged_backward_params(
    const QView& q, const KView& k, const VView& v, const OView& o, const LseView& lse, const DoView& dout,
    const DqView& dq, const DkView& dk, const DvView& dv, const PagedLayout<MemorySpace>& layout) {
  using T = typename DqView::non_const_value_type;
  static_assert(DoView::rank == 3 && DqView::rank == 3 && DkView::rank == 4 && DvView::rank == 4,
                "kattn: paged do and dq must be rank-3 views [total_q, heads, dim], dk and dv rank-4 "
                "[num_pages, page_size, heads, dim]");
  KATTN_REQUIRE(layout.repeated_at < 0, "kv_page_indices: the page at position ", layout.repeated_at,
                " is listed earlier too (shared by sequences); the backward needs each page in one place "
                "(its dK and dV would be the sum over the sequences that share it)");
  const AttentionParams<T> fwd = paged_params(q, k, v, detail::writable_alias(o), detail::writable_alias(lse), layout);
  KATTN_REQUIRE(fwd.lse.data != nullptr, "lse: required, the forward's lse [total_q, Hq]");
  return detail::with_gradients<T, QView, KView, VView, OView, LseView>(fwd, q, k, v, o, dout, dq, dk, dv);
}

}  // namespace kattn
