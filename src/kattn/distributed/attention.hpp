// The distributed door: kattn::attention and kattn::attention_backward over the ranks of an MPI
// communicator, each rank passing its shard, the scheme an option.
//
//   kattn::dist::attention(comm, space, q, kv, o, lse, opt, d)
//   kattn::dist::attention_backward(comm, space, q, kv, o, lse, dout, dq, dk, dv, opt, bopt, d)
//
// d.scheme (options.hpp) says how the work is spread: ring (the default), ulysses, hybrid, or
// sharded_kv (the KV cache sharded, the queries replicated: distributed decode). The arguments are
// the local door's (attention.hpp) with kv::dense shards, or kv::ragged for the ring, plus the
// communicator and DistOptions; the rows of the sequence rank r holds are
// layout_of(N, P, d).segments_of(r) (layout.hpp; a ragged batch: ragged_layout.hpp):
//
//   dense    q, o [B, nq_r, Hq, D]   k, v [B, nk_r, Hkv, D]   lse [B, Hq, nq_r]
//            (sharded_kv: q, o [B, Nq, Hq, D] and lse [B, Hq, Nq] the same on every rank)
//   ragged   q, o [total_q_r, Hq, D]   k, v [total_kv_r, Hkv, D] with the layout of the local
//            indptr (ragged_local_indptr)   lse [total_q_r, Hq]
//
// Options as for kattn::attention on the whole sequence (causal is bottom-right aligned on the
// global sequence; window, softcap, scale, GQA, any lengths; no block mask); lse may be empty or
// left out (forward). Storage: float or double, or one 16-bit type (kattn::bf16, kattn::fp16) for
// every array but lse (float); ring and sharded_kv also take float queries over a 16-bit cache.
// 16-bit arrays travel in 16 bits where the scheme moves them as stored; states, partial rows and
// the ring backward's dK/dV are in float, and each result is rounded once.
//
// Collective: every rank calls with the same options; bad input on any rank throws the same
// kattn::Error on every rank, and a failure in the middle of a call (memory, a progress callback)
// ends the call on every rank with that error, never a hang. Blocks until done (the outputs are
// ready on return). Returns this rank's measurements; traffic.hpp predicts its bytes sent.
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>

#include "kattn/backward_options.hpp"
#include "kattn/detail/accessible.hpp"
#include "kattn/distributed/detail/door.hpp"
#include "kattn/distributed/layout.hpp"
#include "kattn/distributed/options.hpp"
#include "kattn/distributed/ragged_layout.hpp"
#include "kattn/kv.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace dist {

// o (and lse) = attention of q over dense shards of keys and values, d.scheme spreading the work.
// ring: K/V shards travel round the ring while the local tile work runs. ulysses: all-to-alls give
// each rank the whole sequence of Hq / P heads (Hq a multiple of P). hybrid: ulysses inside groups
// of d.ulysses_size ranks, the ring across the groups (Hq a multiple of the group size).
// sharded_kv: each rank attends over its keys (rank r holds the keys after rank r - 1's; causal:
// query i sees keys <= i + Nk - Nq) and the finished rows are merged by a reduction, to every rank
// (d.root = -1) or to d.root only (the others' o and lse are left as they were); Options::splits
// splits the local keys. Deterministic mode (d.deterministic): o and lse bitwise the same for every
// rank count, sharding and grid (sharded_kv: every shard but the last a multiple of the chunk).
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView>
DistStats attention(MPI_Comm comm, const ExecSpace& space, const QView& q, const kv::Dense<KView, VView>& kv,
                    const OView& o, const LseView& lse, const Options& opt = {}, const DistOptions& d = {}) {
  static_assert(kattn::detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView>(),
                "kattn::dist::attention: the views must be accessible from the execution space");
  return detail::forward(comm, space, q, kv, o, lse, opt, d);
}

// A ragged batch (scheme ring): every sequence sharded over the ranks as a dense sequence is
// (ragged_layout.hpp), each rank holding its piece(s) of every sequence packed in sequence order.
// causal and windows are each sequence's own (bottom-right aligned); zigzag needs every local
// length even. Deterministic mode: every sequence sharded on whole chunks, its bits those of the
// deterministic dense call on it alone, for every rank count.
template <class ExecSpace, class QView, class KView, class VView, class MemorySpace, class OView, class LseView>
DistStats attention(MPI_Comm comm, const ExecSpace& space, const QView& q,
                    const kv::Ragged<KView, VView, MemorySpace>& kv, const OView& o, const LseView& lse,
                    const Options& opt = {}, const DistOptions& d = {}) {
  static_assert(kattn::detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView>() &&
                    kattn::detail::layout_accessible_from<ExecSpace, MemorySpace>(),
                "kattn::dist::attention: the views and the layout must be accessible from the execution space");
  return detail::forward(comm, space, q, kv, o, lse, opt, d);
}

// The same without the LSE.
template <class ExecSpace, class QView, class KView, class VView, class OView>
DistStats attention(MPI_Comm comm, const ExecSpace& space, const QView& q, const kv::Dense<KView, VView>& kv,
                    const OView& o, const Options& opt = {}, const DistOptions& d = {}) {
  return attention(comm, space, q, kv, o, detail::NoLse<OView>(), opt, d);
}
template <class ExecSpace, class QView, class KView, class VView, class MemorySpace, class OView>
DistStats attention(MPI_Comm comm, const ExecSpace& space, const QView& q,
                    const kv::Ragged<KView, VView, MemorySpace>& kv, const OView& o, const Options& opt = {},
                    const DistOptions& d = {}) {
  return attention(comm, space, q, kv, o, detail::NoLse<OView>(), opt, d);
}

// Paged and cascade caches are not sharded.
template <class ExecSpace, class QView, class KView, class VView, class MemorySpace, class OView, class LseView>
DistStats attention(MPI_Comm, const ExecSpace&, const QView&, const kv::Paged<KView, VView, MemorySpace>&,
                    const OView&, const LseView&, const Options& = {}, const DistOptions& = {}) {
  static_assert(sizeof(KView) == 0, "kattn::dist::attention: dense or ragged keys and values (a paged cache is not "
                                    "sharded; kattn::attention takes it on one rank)");
  return {};
}
template <class ExecSpace, class QView, class KPView, class VPView, class Suffix, class OView, class LseView>
DistStats attention(MPI_Comm, const ExecSpace&, const QView&, const kv::Cascade<KPView, VPView, Suffix>&,
                    const OView&, const LseView&, const Options& = {}, const DistOptions& = {}) {
  static_assert(sizeof(KPView) == 0, "kattn::dist::attention: dense or ragged keys and values (a cascade is not "
                                     "sharded; kattn::attention takes it on one rank)");
  return {};
}

// dq, dk, dv = this rank's shards of the gradients of sum(o * dout), for the o and lse the forward
// returned (the global lse) with the same kv, options and DistOptions: the arguments of
// kattn::attention_backward with kv::dense shards (ring, ulysses, hybrid) or kv::ragged (ring),
// shaped as q, k, v; overwritten. bopt as for kattn::attention_backward (the atomic dQ strategy is
// refused in deterministic mode). Deterministic mode: bitwise the same gradients for every rank
// count and sharding (ulysses and hybrid: for every group size that divides Hkv, each rank then
// summing whole GQA groups; other group sizes are refused in that mode). A KV head whose query
// heads sit on several ranks gets its dK, dV summed over them in rank order.
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView, class DoView,
          class DqView, class DkView, class DvView>
DistStats attention_backward(MPI_Comm comm, const ExecSpace& space, const QView& q, const kv::Dense<KView, VView>& kv,
                             const OView& o, const LseView& lse, const DoView& dout, const DqView& dq,
                             const DkView& dk, const DvView& dv, const Options& opt = {},
                             const BackwardOptions& bopt = {}, const DistOptions& d = {}) {
  static_assert(kattn::detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView, DoView, DqView,
                                               DkView, DvView>(),
                "kattn::dist::attention_backward: the views must be accessible from the execution space");
  return detail::backward(comm, space, q, kv, o, lse, dout, dq, dk, dv, opt, bopt, d);
}

template <class ExecSpace, class QView, class KView, class VView, class MemorySpace, class OView, class LseView,
          class DoView, class DqView, class DkView, class DvView>
DistStats attention_backward(MPI_Comm comm, const ExecSpace& space, const QView& q,
                             const kv::Ragged<KView, VView, MemorySpace>& kv, const OView& o, const LseView& lse,
                             const DoView& dout, const DqView& dq, const DkView& dk, const DvView& dv,
                             const Options& opt = {}, const BackwardOptions& bopt = {}, const DistOptions& d = {}) {
  static_assert(kattn::detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView, DoView, DqView,
                                               DkView, DvView>() &&
                    kattn::detail::layout_accessible_from<ExecSpace, MemorySpace>(),
                "kattn::dist::attention_backward: the views and the layout must be accessible from the execution "
                "space");
  return detail::backward(comm, space, q, kv, o, lse, dout, dq, dk, dv, opt, bopt, d);
}

}  // namespace dist
}  // namespace kattn
