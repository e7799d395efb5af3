// Distributed decode: the KV cache is sharded over the ranks (rank r holds the next keys after
// rank r - 1's), the queries are replicated. Each rank attends over its shard and makes a
// finished partial state per query row; a user-defined MPI_Op (merge_op.hpp) merges them in
// MPI_Allreduce (every rank gets the output) or MPI_Reduce (one rank does): D + 1 numbers per
// query row, whatever the context length. Deterministic mode folds fixed-size key chunks in
// global order along the ranks instead (a chain), for the same bits on every rank count.
//
// Storage as for kattn::attention (docs/storage.md): a bf16 or fp16 cache under float or 16-bit
// queries. Partial rows always travel in the accumulation type (float for a 16-bit cache); 16-bit
// queries are widened to float first and o is rounded once, after the merge.
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>

#include "kattn/core/attention_params.hpp"
#include "kattn/core/storage.hpp"
#include "kattn/detail/attention_impl.hpp"
#include "kattn/detail/memory_check.hpp"
#include "kattn/detail/widening.hpp"
#include "kattn/dist/collective.hpp"
#include "kattn/dist/dist_options.hpp"
#include "kattn/errors.hpp"
#include "kattn/kv.hpp"
#include "kattn/options.hpp"
#include "kattn/shapes.hpp"

namespace kattn {
namespace dist {
namespace detail {

// Instantiated for (Q, T, KV) = (float, float, float), (double, double, double), (float, float, bf16)
// and (float, float, fp16).
template <class ExecSpace, class Q, class T, class KV>
DistStats decode_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<Q, T, KV>& p, const Options& opt,
                      const DistOptions& d);

// The float copies of 16-bit q and o: refused, naming them, when they do not fit.
template <class MemorySpace>
void require_widened_rows(Workspace* ws, std::uint64_t values) {
  kattn::detail::require_memory<MemorySpace>(ws, kattn::detail::saturating_mul(values, sizeof(float)),
                                             "kattn::dist::decode_attention: float copies of q and o",
                                             kattn::detail::concat(values, " values of 4 bytes"),
                                             "decode fewer query rows at a time, or give float queries");
}

}  // namespace detail

// Attention of replicated queries over a KV cache sharded in rank order: the arguments of
// kattn::attention with kv::dense shards, plus the communicator and DistOptions:
//   q [B, Nq, Hq, D] (the same on every rank), kv::dense(k, v) with k, v [B, nk_r, Hkv, D] (this
//   rank's keys: global positions [sum of nk over lower ranks, + nk_r)), o [B, Nq, Hq, D],
//   lse [B, Hq, Nq] (an empty view when not wanted).
// Options as for kattn::attention on the whole cache (causal: query i sees keys <= i + Nk - Nq; no
// block mask). d.root = -1: every rank gets o and lse; else only rank d.root does (the others' o
// and lse are left as they were). Options::splits: key splits of the local attention (0 = planned).
// Deterministic mode: every rank's shard but the last must hold a multiple of the chunk, so that
// chunks are global; the result is then bitwise the same for every rank count and split count.
// Collective, with collective errors; blocks until done.
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView>
DistStats decode_attention(MPI_Comm comm, const ExecSpace& space, const QView& q, const kv::Dense<KView, VView>& kv,
                           const OView& o, const LseView& lse, const Options& opt = {}, const DistOptions& d = {}) {
  static_assert(kattn::detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView>(),
                "kattn::dist::decode_attention: the views must be accessible from the execution space");
  using Params = kattn::detail::params_of<QView, KView, VView, OView, LseView>;  // the storage rule
  const MPI_Comm lib = library_comm(comm);  // kattn's traffic apart from the caller's
  if constexpr (is_16bit_v<typename Params::q_type>) {
    // 16-bit q: the float-query decode over the 16-bit cache on widened q (exact), its float o
    // rounded once into o where the result lands.
    const kattn::detail::Widening<ExecSpace> w(space, "kattn::dist::decode", opt.workspace);
    collective_check(lib, [&] {
      (void)dense_params(q, kv.k, kv.v, o, lse);
      detail::require_widened_rows<typename ExecSpace::memory_space>(opt.workspace, q.size() + o.size());
    });
    const auto o_float = w.out(o, "o");
    const DistStats stats = decode_attention(comm, space, w.in(q, "q"), kv, o_float, lse, opt, d);
    int rank = 0;
    MPI_Comm_rank(lib, &rank);
    if (d.root < 0 || rank == d.root) w.copy(o_float, o);
    space.fence();
    return stats;
  } else {
    Params p;
    collective_check(lib, [&] {
      validate(opt);
      detail::validate(d);
      p = dense_params(q, kv.k, kv.v, o, lse);
    });
    return detail::decode_impl(lib, space, p, opt, d);
  }
}

// The same without the LSE.
template <class ExecSpace, class QView, class KView, class VView, class OView>
DistStats decode_attention(MPI_Comm comm, const ExecSpace& space, const QView& q, const kv::Dense<KView, VView>& kv,
                           const OView& o, const Options& opt = {}, const DistOptions& d = {}) {
  using Acc = accumulate_t<typename OView::non_const_value_type>;
  return decode_attention(comm, space, q, kv, o, Kokkos::View<Acc***, typename OView::memory_space>(), opt, d);
}

}  // namespace dist
}  // namespace kattn
