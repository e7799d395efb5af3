// The backward pass of hybrid attention (hybrid.hpp): inside each group of U ranks an all-to-all
// gives each member the group's share of q, k, v, o, lse and dO for its heads, ring attention's
// backward runs across the groups, and an all-to-all returns dq, dk, dv to the members' positions
// (dK, dV of a KV head computed in parts by several members summed in member order).
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>

#include "kattn/backward.hpp"
#include "kattn/detail/attention_impl.hpp"
#include "kattn/dist/dense_call.hpp"
#include "kattn/dist/dist_options.hpp"
#include "kattn/dist/hybrid_grid.hpp"
#include "kattn/kv.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace dist {
namespace detail {

template <class ExecSpace, class T>
DistStats hybrid_backward_impl(MPI_Comm comm, const ExecSpace& space, const BackwardParams<T>& p, const Options& opt,
                               const DistOptions& d, const BackwardOptions& bopt);

}  // namespace detail

// The gradients of hybrid_attention: arguments as for ring_attention_backward, shards as for
// hybrid_attention (lse the global one). Deterministic mode: the ring's deterministic backward, so
// the gradients are bitwise those of ring_attention_backward's deterministic mode for every grid
// whose U divides Hkv (other grids are refused in that mode). Collective, with collective errors.
// 16-bit storage as for ulysses_attention_backward, the rings computing in float.
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView, class DoView,
          class DqView, class DkView, class DvView>
DistStats hybrid_attention_backward(MPI_Comm comm, const ExecSpace& space, const QView& q,
                                    const kv::Dense<KView, VView>& kv, const OView& o, const LseView& lse,
                                    const DoView& dout, const DqView& dq, const DkView& dk, const DvView& dv,
                                    const Options& opt = {}, const BackwardOptions& bopt = {},
                                    const DistOptions& d = {}) {
  static_assert(
      kattn::detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView, DoView, DqView, DkView, DvView>(),
      "kattn::dist::hybrid_attention_backward: the views must be accessible from the execution space");
  return detail::dense_backward<detail::Grads16::all_stored>(
      detail::DistCall::hybrid_attention_backward, comm, space, q, kv, o, lse, dout, dq, dk, dv, opt, bopt, d,
      [](const auto&... a) { return detail::hybrid_backward_impl(a...); });
}

}  // namespace dist
}  // namespace kattn
