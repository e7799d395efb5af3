// The textbook algorithm (FlashAttention's Algorithm 0): S = scale q k^T, P = softmax(S), O = P V,
// as three kernels with S and P materialised in memory, O(Nq Nk) extra memory per head. It is the
// oracle of the tests (in double) and `kattn run --algo naive`.
#pragma once

#include <Kokkos_Core.hpp>

#include "kattn/core/attention_params.hpp"
#include "kattn/detail/accessible.hpp"
#include "kattn/detail/shapes.hpp"
#include "kattn/options.hpp"
#include "kattn/paged.hpp"
#include "kattn/ragged.hpp"

namespace kattn {
namespace detail {

template <class ExecSpace, class T>
void reference_impl(const ExecSpace& space, const AttentionParams<T>& p, const Options& opt);

}  // namespace detail

// Same arguments and results as kattn::attention over kv::dense. Masked keys take no part in a row (their P is 0
// and their V row is not read); a row that sees no key gets o = 0, lse = -inf.
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView>
void reference(const ExecSpace& space, const QView& q, const KView& k, const VView& v, const OView& o,
               const LseView& lse, const Options& opt = {}) {
  static_assert(detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView>(),
                "kattn::reference: the views must be accessible from the execution space");
  validate(opt);
  detail::reference_impl(space, dense_params(q, k, v, o, lse), opt);
}

// The same on a ragged batch (ragged.hpp) or a paged KV cache (paged.hpp): arguments as for
// kattn::attention with that kv kind.
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView, class MemorySpace>
void reference(const ExecSpace& space, const QView& q, const KView& k, const VView& v, const OView& o,
               const LseView& lse, const RaggedLayout<MemorySpace>& layout, const Options& opt = {}) {
  static_assert(detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView>() &&
                    detail::layout_accessible_from<ExecSpace, MemorySpace>(),
                "kattn::reference: the views and the layout must be accessible from the execution space");
  validate(opt);
  detail::reference_impl(space, ragged_params(q, k, v, o, lse, layout), opt);
}
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView, class MemorySpace>
void reference(const ExecSpace& space, const QView& q, const KView& k, const VView& v, const OView& o,
               const LseView& lse, const PagedLayout<MemorySpace>& layout, const Options& opt = {}) {
  static_assert(detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView>() &&
                    detail::layout_accessible_from<ExecSpace, MemorySpace>(),
                "kattn::reference: the views and the layout must be accessible from the execution space");
  validate(opt);
  detail::reference_impl(space, paged_params(q, k, v, o, lse, layout), opt);
}

}  // namespace kattn
