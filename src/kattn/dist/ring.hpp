// Ring attention: exact attention over a sequence sharded over the ranks of a communicator.
// Each rank holds a shard of Q, K and V (SequenceLayout says which positions); K/V shards travel
// round the ring with non-blocking point-to-point messages while the local tile work runs, and
// each rank folds the partial states of its query rows with the state algebra. In deterministic
// mode the keys are folded in fixed-size global chunks in global order instead, so the outputs
// are bitwise the same for every rank count and sharding.
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <type_traits>

#include "kattn/core/attention_params.hpp"
#include "kattn/detail/attention_impl.hpp"
#include "kattn/attention.hpp"
#include "kattn/dist/dense_call.hpp"
#include "kattn/dist/dist_options.hpp"
#include "kattn/dist/layout.hpp"
#include "kattn/dist/ragged_layout.hpp"
#include "kattn/kv.hpp"
#include "kattn/options.hpp"
#include "kattn/shapes.hpp"

namespace kattn {
namespace dist {
namespace detail {

// Instantiated for (T, KV) = (float, float), (double, double), (float, bf16) and (float, fp16): K/V
// travel in their storage type, partial states and the merge are in T.
class FailureLatch;

// outer: the latch of an enclosing distributed call (hybrid), which settles failures itself;
// null: the call has its own latch and settles before returning.
template <class ExecSpace, class T, class KV>
DistStats ring_forward_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<T, T, KV>& p,
                            const Options& opt, const DistOptions& d, FailureLatch* outer = nullptr);

// A ragged batch (ragged_pieces.hpp): p the ragged params of this rank's packed arrays, lengths its
// local lengths. S: float, double, bf16 or fp16 (q, k, v, o; lse float for 16 bits).
template <class ExecSpace, class S>
DistStats ring_ragged_forward_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<S>& p,
                                   const BatchLengths& lengths, const Options& opt, const DistOptions& d);

}  // namespace detail

// Forward attention of a sequence of Nq queries and Nk keys (the sums of the local lengths),
// sharded over `comm` as sharded_layout(N, P, d) says (dist_options.hpp): the
// arguments of kattn::attention with kv::dense shards, plus the communicator and DistOptions:
//   q [B, nq_r, Hq, D], kv::dense(k, v) with k, v [B, nk_r, Hkv, D] (this rank's positions, in
//   global order), o [B, nq_r, Hq, D], lse [B, Hq, nq_r] (natural log; -inf for a row that sees no
//   key; an empty view when not wanted).
// Options as for kattn::attention (causal is bottom-right aligned on the global sequence; window,
// softcap, scale, GQA, any lengths; no block mask). Collective: every rank calls it with the same
// options; bad input on any rank throws the same kattn::Error on every rank. Blocks until done
// (the outputs are ready on return). Returns this rank's measurements.
// Storage: float or double, or q, k, v, o of one 16-bit type (kattn::bf16, kattn::fp16) with lse in
// float: K/V shards travel in their 16 bits, partial states and the merge are in float, o is
// rounded once (dense_call.hpp).
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView>
DistStats ring_attention(MPI_Comm comm, const ExecSpace& space, const QView& q, const kv::Dense<KView, VView>& kv,
                         const OView& o, const LseView& lse, const Options& opt = {}, const DistOptions& d = {}) {
  static_assert(kattn::detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView>(),
                "kattn::dist::ring_attention: the views must be accessible from the execution space");
  return detail::dense_forward<detail::KV16::as_stored>(
      detail::DistCall::ring_attention, comm, space, q, kv, o, lse, opt, d,
      [](const auto&... a) { return detail::ring_forward_impl(a...); });
}

// Forward attention of a ragged batch (ragged_layout.hpp): every sequence sharded over `comm` as the
// dense call shards one sequence (d.sharding), each rank holding its piece(s) of every sequence
// packed in sequence order: the arguments of kattn::attention with kv::ragged, local:
//   q, o [total_q_r, Hq, D], kv::ragged(k, v, layout) with k, v [total_kv_r, Hkv, D] and the layout
//   of the local indptr (ragged_local_indptr: the same on every rank), lse [total_q_r, Hq] (or empty).
// Options: causal (each sequence's own triangle, bottom-right aligned) or full, windows (each
// sequence's own band), diagonal shifts, softcap, scale, GQA; no block mask. Zigzag needs every
// local length even. Deterministic mode: every sequence sharded on whole chunks (the local indptr
// of ragged_local_indptr with these DistOptions, different on each rank), its bits those of the
// deterministic dense call on it alone, for every rank count (ragged_sequences.hpp). Storage: float or
// double, or q, k, v, o of one 16-bit type with lse float: as the dense call, K/V travel in 16 bits,
// the states and merge are in float and o is rounded once. Collective, with collective errors,
// like the dense call. Returns this rank's measurements.
template <class ExecSpace, class QView, class KView, class VView, class MemorySpace, class OView, class LseView>
DistStats ring_attention(MPI_Comm comm, const ExecSpace& space, const QView& q,
                         const kv::Ragged<KView, VView, MemorySpace>& kv, const OView& o, const LseView& lse,
                         const Options& opt = {}, const DistOptions& d = {}) {
  static_assert(kattn::detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView>() &&
                    kattn::detail::layout_accessible_from<ExecSpace, MemorySpace>(),
                "kattn::dist::ring_attention: the views and the layout must be accessible from the execution space");
  using S = typename OView::non_const_value_type;
  static_assert(std::is_same_v<S, typename KView::non_const_value_type>,
                "kattn::dist::ring_attention: a ragged batch takes q, k, v and o of one type (float, double, "
                "kattn::bf16 or kattn::fp16)");
  comm = library_comm(comm);  // kattn's traffic apart from the caller's
  kattn::detail::params_of<QView, KView, VView, OView, LseView> p;
  collective_check(comm, [&] {
    validate(opt);
    detail::validate(d);
    p = ragged_params(q, kv.k, kv.v, o, lse, kv.layout);
  });
  detail::agree_call<S>(comm, detail::DistCall::ring_attention_ragged);
  return detail::ring_ragged_forward_impl(comm, space, p, kv.layout.lengths, opt, d);
}

// The same without the LSE.
template <class ExecSpace, class QView, class KView, class VView, class OView>
DistStats ring_attention(MPI_Comm comm, const ExecSpace& space, const QView& q, const kv::Dense<KView, VView>& kv,
                         const OView& o, const Options& opt = {}, const DistOptions& d = {}) {
  return ring_attention(comm, space, q, kv, o, detail::NoLse<OView>(), opt, d);
}

}  // namespace dist
}  // namespace kattn
