// Ring attention's backward pass: the gradients of sum(o * dout) for a sequence sharded over the
// ranks as ring_attention shards it. dQ stays on the rank of its queries; dK and dV accumulators
// travel with their K/V shards round the ring (the K/V shards ahead, the accumulators one step
// behind, overlapping the local work) and come back to their owners. Every (query shard, key
// shard) pair is kattn::attention_backward with the global LSE and the mask placed by diagonal_shift.
//
// Deterministic mode (DistOptions::deterministic): gradients bitwise the same for every rank
// count and sharding. Every pair of fixed-size global chunks (query chunk, key chunk) is its own
// kattn::attention_backward call with a deterministic dQ strategy; dQ folds the key chunks in ascending
// global order, and each key segment's dK/dV accumulator tours the query segments (owner ->
// owner of the last query segment -> ... -> of the first -> owner) adding the query chunks in
// descending global order: one fixed order, whoever holds what.
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <type_traits>

#include "kattn/attention.hpp"
#include "kattn/backward.hpp"
#include "kattn/detail/attention_impl.hpp"
#include "kattn/dist/dense_call.hpp"
#include "kattn/dist/dist_options.hpp"
#include "kattn/kv.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace dist {
namespace detail {

class FailureLatch;

// outer: the latch of an enclosing distributed call (hybrid), which settles failures itself;
// null: the call has its own latch and settles before returning.
template <class ExecSpace, class T>
DistStats ring_backward_impl(MPI_Comm comm, const ExecSpace& space, const BackwardParams<T>& p, const Options& opt,
                             const DistOptions& d, const BackwardOptions& bopt, FailureLatch* outer = nullptr);

// K and V stored as KV (T, or bf16 or fp16 under float T), with p.fwd's k and v strides (p.fwd.k
// and p.fwd.v unused): they travel as stored.
template <class ExecSpace, class T, class KV>
DistStats ring_backward_impl(MPI_Comm comm, const ExecSpace& space, const BackwardParams<T>& p, const KV* k,
                             const KV* v, const Options& opt, const DistOptions& d, const BackwardOptions& bopt,
                             FailureLatch* outer = nullptr);

// A ragged batch (ragged_pieces.hpp): p the ragged params of this rank's packed arrays, lengths its
// local lengths. S: float, double, bf16 or fp16 (every array; lse float for 16 bits).
template <class ExecSpace, class S>
DistStats ring_ragged_backward_impl(MPI_Comm comm, const ExecSpace& space, const BackwardParams<S>& p,
                                    const BatchLengths& lengths, const Options& opt, const DistOptions& d,
                                    const BackwardOptions& bopt);

}  // namespace detail

// The gradients of ring_attention: the arguments of kattn::attention_backward with kv::dense
// shards, plus the communicator and DistOptions (the forward's). Shards as for ring_attention:
//   q, o, dout, dq [B, nq_r, Hq, D]; kv::dense(k, v) and dk, dv [B, nk_r, Hkv, D];
//   lse [B, Hq, nq_r], the natural-log LSE that ring_attention returned (the global one).
// dq, dk, dv are overwritten with this rank's gradients. bopt as for kattn::attention_backward; in
// deterministic mode the atomic dQ strategy is refused. Collective, with collective errors. 16-bit
// storage as for ring_attention (lse float): K and V travel as stored (half float's bytes) and
// the float backward reads their exact float widening; q, o and dout are widened once, dK/dV
// accumulate and travel in float, and dq, dk, dv are rounded once.
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView, class DoView,
          class DqView, class DkView, class DvView>
DistStats ring_attention_backward(MPI_Comm comm, const ExecSpace& space, const QView& q,
                                  const kv::Dense<KView, VView>& kv, const OView& o, const LseView& lse,
                                  const DoView& dout, const DqView& dq, const DkView& dk, const DvView& dv,
                                  const Options& opt = {}, const BackwardOptions& bopt = {},
                                  const DistOptions& d = {}) {
  static_assert(kattn::detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView, DoView, DqView,
                                                        DkView, DvView>(),
                "kattn::dist::ring_attention_backward: the views must be accessible from the execution space");
  return detail::dense_backward<detail::Grads16::kv_as_stored>(
      detail::DistCall::ring_attention_backward, comm, space, q, kv, o, lse, dout, dq, dk, dv, opt, bopt, d,
      [](const auto&... a) { return detail::ring_backward_impl(a...); });
}

// The gradients of ring_attention over a ragged batch: the arguments of kattn::attention_backward with
// kv::ragged, local and sharded as that ring_attention shards them: q, o, dout, dq [total_q_r, Hq, D];
// kv::ragged(k, v, layout) and dk, dv [total_kv_r, Hkv, D]; lse [total_q_r, Hq], the one
// ring_attention returned. Options, rules and errors as for that forward. Storage: float or double,
// or one 16-bit type for every array but lse (float): K and V travel as stored, everything else is
// widened in the ring's piece-major copies, dK/dV accumulate and travel in float, and dq, dk, dv
// are rounded once.
template <class ExecSpace, class QView, class KView, class VView, class MemorySpace, class OView, class LseView,
          class DoView, class DqView, class DkView, class DvView>
DistStats ring_attention_backward(MPI_Comm comm, const ExecSpace& space, const QView& q,
                                  const kv::Ragged<KView, VView, MemorySpace>& kv, const OView& o, const LseView& lse,
                                  const DoView& dout, const DqView& dq, const DkView& dk, const DvView& dv,
                                  const Options& opt = {}, const BackwardOptions& bopt = {},
                                  const DistOptions& d = {}) {
  static_assert(kattn::detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView, DoView, DqView,
                                                        DkView, DvView>() &&
                    kattn::detail::layout_accessible_from<ExecSpace, MemorySpace>(),
                "kattn::dist::ring_attention_backward: the views and the layout must be accessible from the execution "
                "space");
  using S = typename DqView::non_const_value_type;
  static_assert(kattn::detail::same_storage<QView, KView, VView, OView, DoView, DqView, DkView, DvView>,
                "kattn::dist::ring_attention_backward: a ragged batch takes q, k, v, o, dout, dq, dk and dv of one "
                "type (float, double, kattn::bf16 or kattn::fp16)");
  comm = library_comm(comm);  // kattn's traffic apart from the caller's
  BackwardParams<S> p;
  collective_check(comm, [&] {
    validate(opt);
    detail::validate(d);
    detail::refuse_atomic_if_deterministic(d, bopt);
    p = ragged_backward_params(q, kv.k, kv.v, o, lse, dout, dq, dk, dv, kv.layout);
  });
  detail::agree_call<S>(comm, detail::DistCall::ring_attention_backward_ragged);
  return detail::ring_ragged_backward_impl(comm, space, p, kv.layout.lengths, opt, d, bopt);
}

}  // namespace dist
}  // namespace kattn
