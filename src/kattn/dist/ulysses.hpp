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
#include "kattn/dist/collective.hpp"
#include "kattn/dist/dist_options.hpp"
#include "kattn/dist/layout.hpp"
#include "kattn/kv.hpp"
#include "kattn/options.hpp"
#include "kattn/shapes.hpp"

namespace kattn {
namespace dist {
namespace detail {

void validate(const DistOptions& d);

template <class ExecSpace, class T>
DistStats ulysses_forward_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<T>& p, const Options& opt,
                               const DistOptions& d);

}  // namespace detail

// Forward attention sharded over heads. Arguments, shards and collective errors as for
// ring_attention (q [B, nq_r, Hq, D], kv::dense(k, v) with k, v [B, nk_r, Hkv, D], o [B, nq_r, Hq,
// D], lse [B, Hq, nq_r] or empty; rank r holds SequenceLayout(N, P, d.sharding, d.deterministic ?
// chunk : 1).segments_of(r)), and Hq must be a multiple of the rank count. Options as for
// kattn::attention (no block mask): the local call sees the whole sequence. Deterministic mode:
// the key tile is fixed from the whole problem and split-KV is off (unless Options::split_chunk
// is set), so o and lse are bitwise the same for every rank count and sharding. Every rank moves
// about (P-1)/P of its q, k, v, o shards, whatever the mask; memory: the whole sequence of Hq/P
// heads. Returns this rank's measurements.
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView>
DistStats ulysses_attention(MPI_Comm comm, const ExecSpace& space, const QView& q, const kv::Dense<KView, VView>& kv,
                            const OView& o, const LseView& lse, const Options& opt = {}, const DistOptions& d = {}) {
  static_assert(kattn::detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView>(),
                "kattn::dist::ulysses_attention: the views must be accessible from the execution space");
  using T = typename OView::non_const_value_type;
  AttentionParams<T> p;
  comm = library_comm(comm);  // kattn's traffic apart from the caller's
  collective_check(comm, [&] {
    validate(opt);
    detail::validate(d);
    p = dense_params(q, kv.k, kv.v, o, lse);
  });
  return detail::ulysses_forward_impl(comm, space, p, opt, d);
}

// The same without the LSE.
template <class ExecSpace, class QView, class KView, class VView, class OView>
DistStats ulysses_attention(MPI_Comm comm, const ExecSpace& space, const QView& q, const kv::Dense<KView, VView>& kv,
                            const OView& o, const Options& opt = {}, const DistOptions& d = {}) {
  using T = typename OView::non_const_value_type;
  return ulysses_attention(comm, space, q, kv, o, Kokkos::View<T***, typename OView::memory_space>(), opt, d);
}

}  // namespace dist
}  // namespace kattn
