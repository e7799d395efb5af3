// Validation of the backward pass's arguments into a BackwardParams, dense and ragged: every
// refusal names the argument, what was expected and what came. Runs on the host before any kernel.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <type_traits>

#include "kattn/backward_params.hpp"
#include "kattn/errors.hpp"
#include "kattn/shapes.hpp"

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
  constexpr int s = DoView::rank == 4 ? 1 : 0;  // dense: stride 0 is the batch; ragged: no batch dim
  p.dout = dout.data();
  p.dq = dq.data();
  p.dk = dk.data();
  p.dv = dv.data();
  if (s) {
    p.do_stride_batch = dout.stride(0);
    p.dq_stride_batch = dq.stride(0);
    p.dk_stride_batch = dk.stride(0);
    p.dv_stride_batch = dv.stride(0);
  }
  p.do_stride_seq = dout.stride(s);
  p.do_stride_head = dout.stride(s + 1);
  p.dq_stride_seq = dq.stride(s);
  p.dq_stride_head = dq.stride(s + 1);
  p.dk_stride_seq = dk.stride(s);
  p.dk_stride_head = dk.stride(s + 1);
  p.dv_stride_seq = dv.stride(s);
  p.dv_stride_head = dv.stride(s + 1);
}

template <class QView, class KView, class VView, class OView, class DoView, class DqView, class DkView,
          class DvView>
void check_gradient_views(const QView& q, const KView& k, const VView& v, const OView& o, const DoView& dout,
                          const DqView& dq, const DkView& dk, const DvView& dv) {
  constexpr bool dense = QView::rank == 4;
  static const char* const q_dims4[] = {"batch", "sequence length", "heads", "head dim"};
  static const char* const q_dims3[] = {"total length", "heads", "head dim"};
  const char* const* dims = dense ? q_dims4 : q_dims3;
  require_same_extents(dout, "do", q, "q", dims);
  require_same_extents(dq, "dq", q, "q", dims);
  require_same_extents(dk, "dk", k, "k", dims);
  require_same_extents(dv, "dv", v, "v", dims);
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

// Host copy of an indptr view, checked: B + 1 entries, starting at 0, non-decreasing, ending at
// `total` (the length of the arrays it indexes). Returns the longest sequence.
template <class IndptrView>
std::int64_t check_indptr(const IndptrView& indptr, const char* name, std::int64_t batch, std::int64_t total,
                          const char* total_from) {
  static_assert(IndptrView::rank == 1, "kattn: indptr views must be rank 1");
  static_assert(std::is_same<typename IndptrView::non_const_value_type, std::int64_t>::value,
                "kattn: indptr views must hold std::int64_t");
  KATTN_REQUIRE(static_cast<std::int64_t>(indptr.extent(0)) == batch + 1, name, ": expected ", batch + 1,
                " entries (batch + 1), got ", indptr.extent(0));
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), indptr);
  KATTN_REQUIRE(h(0) == 0, name, ": expected 0 as the first entry, got ", h(0));
  std::int64_t longest = 0;
  for (std::int64_t b = 0; b < batch; ++b) {
    KATTN_REQUIRE(h(b + 1) >= h(b), name, ": expected non-decreasing entries, got ", h(b + 1), " after ", h(b),
                  " at ", b + 1);
    longest = h(b + 1) - h(b) > longest ? h(b + 1) - h(b) : longest;
  }
  KATTN_REQUIRE(h(batch) == total, name, ": expected the last entry to be ", total, " (", total_from, "), got ",
                h(batch));
  return longest;
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
  static_assert(detail::all_of_type<T, QView, KView, VView, OView, LseView, DoView, DkView, DvView>(),
                "kattn: q, k, v, o, lse, do, dq, dk and dv must have the same scalar type");
  KATTN_REQUIRE(lse.data() != nullptr || q.extent(0) * q.extent(1) * q.extent(2) == 0,
                "lse: required by the backward pass (the forward's natural-log LSE, [B, Hq, Nq])");
  BackwardParams<T> p;
  // o and lse are read, never written: AttentionParams holds them as T*, so const views pass
  // through non-const unmanaged aliases.
  p.fwd = dense_params(q, k, v, detail::writable_alias(o), detail::writable_alias(lse));
  detail::check_gradient_views(q, k, v, o, dout, dq, dk, dv);
  detail::fill_gradients(p, dout, dq, dk, dv);
  return p;
}

// Ragged batch: sequence b owns query rows [q_indptr[b], q_indptr[b + 1]) and key rows
// [kv_indptr[b], kv_indptr[b + 1]). q, o, do, dq [total_q, Hq, D]; k, v, dk, dv [total_k, Hkv, D];
// lse [Hq, total_q]; q_indptr, kv_indptr [B + 1] of std::int64_t in memory the kernels can read.
template <class QView, class KView, class VView, class OView, class LseView, class DoView, class DqView,
          class DkView, class DvView, class IndptrView>
BackwardParams<typename DqView::non_const_value_type> ragged_backward_params(
    const QView& q, const KView& k, const VView& v, const OView& o, const LseView& lse, const DoView& dout,
    const DqView& dq, const DkView& dk, const DvView& dv, const IndptrView& q_indptr, const IndptrView& kv_indptr) {
  using T = typename DqView::non_const_value_type;
  static_assert(QView::rank == 3 && KView::rank == 3 && VView::rank == 3 && OView::rank == 3 && DoView::rank == 3 &&
                    DqView::rank == 3 && DkView::rank == 3 && DvView::rank == 3,
                "kattn: ragged q, k, v, o, do, dq, dk and dv must be rank-3 views [total, heads, dim]");
  static_assert(LseView::rank == 2, "kattn: ragged lse must be a rank-2 view [heads, total_q]");
  static_assert(detail::all_of_type<T, QView, KView, VView, OView, LseView, DoView, DkView, DvView>(),
                "kattn: q, k, v, o, lse, do, dq, dk and dv must have the same scalar type");
  const std::int64_t Tq = q.extent(0), Hq = q.extent(1), D = q.extent(2);
  const std::int64_t Tk = k.extent(0), Hkv = k.extent(1);
  const std::int64_t B = static_cast<std::int64_t>(q_indptr.extent(0)) - 1;
  KATTN_REQUIRE(B >= 0, "q_indptr: expected batch + 1 entries, got none");
  KATTN_REQUIRE(D >= 1, "q: expected a head dim of at least 1, got ", D);
  KATTN_REQUIRE(Hq >= 1, "q: expected at least one query head, got ", Hq);
  KATTN_REQUIRE(Hkv >= 1, "k: expected at least one KV head, got ", Hkv);
  detail::require_extent(k, "k", 2, "head dim", D, "q");
  KATTN_REQUIRE(Hq % Hkv == 0, "q: expected a number of heads that is a multiple of the ", Hkv,
                " KV heads of k (GQA), got ", Hq);
  static const char* const dims[] = {"total length", "heads", "head dim"};
  detail::require_same_extents(v, "v", k, "k", dims);
  detail::require_same_extents(o, "o", q, "q", dims);
  detail::require_extent(lse, "lse", 0, "heads", Hq, "q");
  detail::require_extent(lse, "lse", 1, "total length", Tq, "q");
  detail::require_contiguous_dim(q, "q");
  detail::require_contiguous_dim(k, "k");
  detail::require_contiguous_dim(v, "v");
  detail::require_contiguous_dim(o, "o");
  detail::check_gradient_views(q, k, v, o, dout, dq, dk, dv);
  const std::int64_t q_len = detail::check_indptr(q_indptr, "q_indptr", B, Tq, "rows of q");
  const std::int64_t kv_len = detail::check_indptr(kv_indptr, "kv_indptr", B, Tk, "rows of k");
  KATTN_REQUIRE(B <= INT32_MAX && Hq <= INT32_MAX && D <= INT32_MAX,
                "q: batch, heads and head dim must each fit in 32 bits");

  BackwardParams<T> p;
  AttentionParams<T>& f = p.fwd;
  f.q = q.data();
  f.q_stride_seq = q.stride(0);
  f.q_stride_head = q.stride(1);
  f.k = k.data();
  f.k_stride_seq = k.stride(0);
  f.k_stride_head = k.stride(1);
  f.v = v.data();
  f.v_stride_seq = v.stride(0);
  f.v_stride_head = v.stride(1);
  f.o = const_cast<T*>(o.data());  // read only in the backward
  f.o_stride_seq = o.stride(0);
  f.o_stride_head = o.stride(1);
  f.lse = const_cast<T*>(lse.data());  // read only in the backward
  f.lse_stride_head = lse.stride(0);
  f.lse_stride_seq = lse.stride(1);
  f.batch = static_cast<int>(B);
  f.heads_q = static_cast<int>(Hq);
  f.heads_kv = static_cast<int>(Hkv);
  f.head_dim = static_cast<int>(D);
  f.q_len = q_len;
  f.kv_len = kv_len;
  f.q_total = Tq;
  f.q_indptr = q_indptr.data();
  f.kv_indptr = kv_indptr.data();
  detail::fill_gradients(p, dout, dq, dk, dv);
  return p;
}

}  // namespace kattn
