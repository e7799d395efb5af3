// Head-sharded attention (DeepSpeed-Ulysses) over a sequence sharded over the ranks of a
// communicator: an all-to-all gives each rank the whole sequence for Hq/P query heads and the KV
// heads they use (sharded when Hkv % P == 0, else each rank gets the KV heads its query heads
// need); kattn's local attention runs on it; an all-to-all brings o and lse back to the sequence
// shards. Each head's whole sequence is on one rank, so no partial states are merged.
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>

#include "kattn/core/attention_params.hpp"
#include "kattn/detail/attention_impl.hpp"
#include "kattn/dist/dense_call.hpp"
#include "kattn/dist/dist_options.hpp"
#include "kattn/dist/layout.hpp"
#include "kattn/kv.hpp"
#include "kattn/options.hpp"
#include "kattn/shapes.hpp"

namespace kattn {
namespace dist {
namespace detail {

template <class ExecSpace, class T>
DistStats ulysses_forward_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<T>& p, const Options& opt,
                               const DistOptions& d);

}  // namespace detail

// Forward attention sharded over heads. Arguments, shards and collective errors as for
// ring_attention (q [B, nq_r, Hq, D], kv::dense(k, v) with k, v [B, nk_r, Hkv, D], o [B, nq_r, Hq,
// D], lse [B, Hq, nq_r] or empty; rank r holds sharded_layout(N, P, d).segments_of(r),
// dist_options.hpp), and Hq must be a multiple of the rank count. Options as for
// kattn::attention (no block mask): the local call sees the whole sequence. Deterministic mode:
// the key tile is fixed from the whole problem and split-KV is off (unless Options::split_chunk
// is set), so o and lse are bitwise the same for every rank count and sharding. Every rank moves
// about (P-1)/P of its q, k, v, o shards, whatever the mask; memory: the whole sequence of Hq/P
// heads. Returns this rank's measurements. 16-bit storage (lse float): the all-to-alls move q, k, v
// and o in their 16 bits, and the local attention (kattn::attention's 16-bit path, computing in
// float) rounds o once.
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView>
DistStats ulysses_attention(MPI_Comm comm, const ExecSpace& space, const QView& q, const kv::Dense<KView, VView>& kv,
                            const OView& o, const LseView& lse, const Options& opt = {}, const DistOptions& d = {}) {
  static_assert(kattn::detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView>(),
                "kattn::dist::ulysses_attention: the views must be accessible from the execution space");
  return detail::dense_forward<detail::KV16::all_stored>(
      detail::DistCall::ulysses_attention, comm, space, q, kv, o, lse, opt, d,
      [](const auto&... a) { return detail::ulysses_forward_impl(a...); });
}

// The same without the LSE.
template <class ExecSpace, class QView, class KView, class VView, class OView>
DistStats ulysses_attention(MPI_Comm comm, const ExecSpace& space, const QView& q, const kv::Dense<KView, VView>& kv,
                            const OView& o, const Options& opt = {}, const DistOptions& d = {}) {
  return ulysses_attention(comm, space, q, kv, o, detail::NoLse<OView>(), opt, d);
}

}  // namespace dist
}  // namespace kattn
