// The backward pass of head-sharded attention (ulysses.hpp): the all-to-all gives each rank the
// whole sequence of its heads of q, k, v, o, lse and dO, kattn's backward runs on it, and dq, dk,
// dv go back to the sequence shards; a KV head whose query heads sit on several ranks (Hkv % P !=
// 0) gets its dK, dV summed over those ranks in rank order.
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>

#include "kattn/backward.hpp"
#include "kattn/detail/attention_impl.hpp"
#include "kattn/dist/dense_call.hpp"
#include "kattn/dist/dist_options.hpp"
#include "kattn/kv.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace dist {
namespace detail {

template <class ExecSpace, class T>
DistStats ulysses_backward_impl(MPI_Comm comm, const ExecSpace& space, const BackwardParams<T>& p, const Options& opt,
                                const DistOptions& d, const BackwardOptions& bopt);

}  // namespace detail

// The gradients of ulysses_attention: arguments and shards as for ring_attention_backward (lse
// the global one ulysses_attention or ring_attention returned). dq, dk, dv are overwritten.
// Deterministic mode: bitwise the same gradients for every rank count that divides Hkv (each rank
// then holds whole GQA groups); other rank counts are refused in that mode. Collective, with
// collective errors. 16-bit storage (lse float): q, k, v, o and dout travel in their 16 bits, the
// backward computes in float on widened copies, and each gradient is rounded once (dq, and dk, dv
// when each KV head is on one rank, then travel back in 16 bits; a KV head computed in parts on
// several ranks has its float parts summed first).
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView, class DoView,
          class DqView, class DkView, class DvView>
DistStats ulysses_attention_backward(MPI_Comm comm, const ExecSpace& space, const QView& q,
                                     const kv::Dense<KView, VView>& kv, const OView& o, const LseView& lse,
                                     const DoView& dout, const DqView& dq, const DkView& dk, const DvView& dv,
                                     const Options& opt = {}, const BackwardOptions& bopt = {},
                                     const DistOptions& d = {}) {
  static_assert(
      kattn::detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView, DoView, DqView, DkView, DvView>(),
      "kattn::dist::ulysses_attention_backward: the views must be accessible from the execution space");
  return detail::dense_backward<detail::Grads16::all_stored>(
      detail::DistCall::ulysses_attention_backward, comm, space, q, kv, o, lse, dout, dq, dk, dv, opt, bopt, d,
      [](const auto&... a) { return detail::ulysses_backward_impl(a...); });
}

}  // namespace dist
}  // namespace kattn
