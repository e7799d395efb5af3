// Hybrid attention (USP): head sharding inside groups of U ranks and ring attention across the
// R = P / U groups. An all-to-all inside each group gives each member the group's whole share of
// the sequence for Hq/U heads; the ranks holding the same heads in every group run ring attention
// on those shares; an all-to-all returns o and lse to the members' positions (hybrid_grid.hpp).
// U = P is head sharding alone, U = 1 the ring alone.
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>

#include "kattn/core/attention_params.hpp"
#include "kattn/detail/attention_impl.hpp"
#include "kattn/dist/dense_call.hpp"
#include "kattn/dist/dist_options.hpp"
#include "kattn/dist/hybrid_grid.hpp"
#include "kattn/kv.hpp"
#include "kattn/options.hpp"
#include "kattn/shapes.hpp"

namespace kattn {
namespace dist {
namespace detail {

template <class ExecSpace, class T>
DistStats hybrid_forward_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<T>& p, const Options& opt,
                              const DistOptions& d);

}  // namespace detail

// Forward attention over the grid P = d.ulysses_size x R. Arguments as for ring_attention, rank r
// holding hybrid_layout(N, P, d).segments_of(r); Hq a multiple of U. Options as for the ring
// (causal, windows, softcap, scale, GQA, zigzag sharding of the ring over the groups). Deterministic
// mode is the ring's: o and lse bitwise the same as ring_attention's deterministic mode for every
// grid and sharding. Collective, with collective errors. Returns this rank's measurements (the
// inner rings' included). 16-bit storage (lse float): the all-to-alls move q, k, v and o in their
// 16 bits and the rings K/V; each ring computes in float on q widened exactly, o rounded once.
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView>
DistStats hybrid_attention(MPI_Comm comm, const ExecSpace& space, const QView& q, const kv::Dense<KView, VView>& kv,
                           const OView& o, const LseView& lse, const Options& opt = {}, const DistOptions& d = {}) {
  static_assert(kattn::detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView>(),
                "kattn::dist::hybrid_attention: the views must be accessible from the execution space");
  return detail::dense_forward<detail::KV16::all_stored>(
      detail::DistCall::hybrid_attention, comm, space, q, kv, o, lse, opt, d,
      [](const auto&... a) { return detail::hybrid_forward_impl(a...); });
}

}  // namespace dist
}  // namespace kattn
