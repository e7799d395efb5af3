// The backward pass of attention (FlashAttention's, with recomputation): dQ, dK, dV of the loss
// sum(O * dO) from q, k, v, the forward's o and lse, and dO, in O(N) extra memory: the scores
// and probabilities are recomputed tile by tile from q, k and the saved lse, never stored.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstddef>

#include "kattn/backward_options.hpp"
#include "kattn/backward_params.hpp"
#include "kattn/backward_shapes.hpp"
#include "kattn/detail/block_sparse.hpp"
#include "kattn/options.hpp"

namespace kattn {

// What a backward call did (decided before any kernel runs).
struct BackwardInfo {
  DqStrategy dq = DqStrategy::key_chunks;  // the strategy used (never automatic)
  bool deterministic = true;               // bitwise reproducible for every thread count and schedule
  int chunks = 1;                          // key_chunks: the chunk count (else key-pass teams per head)
  int block_q = 0, block_k = 0;            // tile sizes
  std::size_t workspace_bytes = 0;         // extra device memory beyond the arguments
};

namespace detail {

template <class ExecSpace, class T>
BackwardInfo backward_impl(const ExecSpace& space, const BackwardParams<T>& p, const Options& opt,
                           const BackwardOptions& bopt, const BlockSparse& bs = {});

template <class ExecSpace, class... Views>
constexpr bool backward_accessible_from() {
  return (Kokkos::SpaceAccessibility<ExecSpace, typename Views::memory_space>::accessible && ...);
}

}  // namespace detail

// dq, dk, dv = the gradients of sum(o * dout) with respect to q, k, v, where o = attention(q, k, v)
// under `opt` (the options the forward ran with: mask, softcap, scale; block sizes may differ).
//   q, o, dout, dq [B, Nq, Hq, D]; k, v, dk, dv [B, Nk, Hkv, D] (Hq a multiple of Hkv; dk and dv
//   sum over the query heads of each KV head's group); lse [B, Hq, Nq], the forward's natural-log
//   LSE (-inf for a row that sees no key).
// Any layout whose last dim is contiguous; float or double. dq, dk, dv are overwritten (keys no
// query sees get 0). Returns when the gradients are written (the workspace is freed on return).
// Bad shapes or options throw kattn::Error before any work starts.
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView, class DoView,
          class DqView, class DkView, class DvView>
BackwardInfo backward(const ExecSpace& space, const QView& q, const KView& k, const VView& v, const OView& o,
                      const LseView& lse, const DoView& dout, const DqView& dq, const DkView& dk, const DvView& dv,
                      const Options& opt = {}, const BackwardOptions& bopt = {}) {
  static_assert(
      detail::backward_accessible_from<ExecSpace, QView, KView, VView, OView, LseView, DoView, DqView, DkView, DvView>(),
      "kattn::backward: the views must be accessible from the execution space");
  validate(opt);
  return detail::backward_impl(space, backward_params(q, k, v, o, lse, dout, dq, dk, dv), opt, bopt);
}

// The same for a ragged batch (ragged.hpp): q, o, dout, dq [total_q, Hq, D]; k, v, dk, dv
// [total_kv, Hkv, D]; lse [total_q, Hq], as the ragged forward writes it; the layout the forward
// ran with (int32 or int64 indptrs, validated once by make_ragged_layout).
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView, class DoView,
          class DqView, class DkView, class DvView, class MemorySpace>
BackwardInfo backward_ragged(const ExecSpace& space, const QView& q, const KView& k, const VView& v, const OView& o,
                             const LseView& lse, const DoView& dout, const DqView& dq, const DkView& dk,
                             const DvView& dv, const RaggedLayout<MemorySpace>& layout, const Options& opt = {},
                             const BackwardOptions& bopt = {}) {
  static_assert(detail::backward_accessible_from<ExecSpace, QView, KView, VView, OView, LseView, DoView, DqView,
                                                 DkView, DvView>() &&
                    Kokkos::SpaceAccessibility<ExecSpace, MemorySpace>::accessible,
                "kattn::backward_ragged: the views and the layout must be accessible from the execution space");
  validate(opt);
  return detail::backward_impl(space, ragged_backward_params(q, k, v, o, lse, dout, dq, dk, dv, layout), opt, bopt);
}

}  // namespace kattn
