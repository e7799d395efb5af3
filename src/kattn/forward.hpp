// The tiled forward pass (FlashAttention): exact attention in O(N) extra memory.
#pragma once

#include <Kokkos_Core.hpp>

#include "kattn/options.hpp"
#include "kattn/params.hpp"
#include "kattn/shapes.hpp"

namespace kattn {
namespace detail {

template <class ExecSpace, class T>
void forward_impl(const ExecSpace& space, const AttentionParams<T>& p, const Options& opt);

template <class ExecSpace, class... Views>
constexpr bool accessible_from() {
  return (Kokkos::SpaceAccessibility<ExecSpace, typename Views::memory_space>::accessible && ...);
}

}  // namespace detail

// o = softmax(scale q k^T [masked]) v, and lse = log of the softmax denominator per row.
//   q [B, Nq, Hq, D], k and v [B, Nk, Hkv, D] (Hq a multiple of Hkv), o [B, Nq, Hq, D],
//   lse [B, Hq, Nq] (natural log; -inf for a row that sees no key, whose o is 0).
// Any layout whose last dim is contiguous; float or double; runs on `space`, asynchronously
// like any Kokkos kernel. Bad shapes or options throw kattn::Error before any work starts.
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView>
void forward(const ExecSpace& space, const QView& q, const KView& k, const VView& v, const OView& o,
             const LseView& lse, const Options& opt = {}) {
  static_assert(detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView>(),
                "kattn::forward: the views must be accessible from the execution space");
  validate(opt);
  detail::forward_impl(space, dense_params(q, k, v, o, lse), opt);
}

// The same without the LSE.
template <class ExecSpace, class QView, class KView, class VView, class OView>
void forward(const ExecSpace& space, const QView& q, const KView& k, const VView& v, const OView& o,
             const Options& opt = {}) {
  using T = typename OView::non_const_value_type;
  forward(space, q, k, v, o, Kokkos::View<T***, typename OView::memory_space>(), opt);
}

}  // namespace kattn
