// The front matter of kattn::dist::attention and attention_backward (attention.hpp), written once
// for every scheme and kv kind: kattn's own communicator, the collective checks of the options, the
// DistOptions and the shapes (the same kattn::Error on every rank), what the scheme takes of the
// storage, the call and the storage type agreed by every rank, then the scheme on the validated
// params (schemes.hpp). Internal.
//
// 16-bit storage (kattn::bf16 or kattn::fp16 q, k, v, o; lse float): ring and sharded_kv widen q
// (exact), take k and v as they are stored and round the float o once (the ring sends K/V in 16
// bits, sharded_kv's rows travel in float); ulysses and hybrid take all four as stored (their
// all-to-alls move them in 16 bits, and they round o themselves). The backward: the ring runs in
// float on float copies of q, o and dout with k and v as stored and rounds dq, dk and dv once (it
// sends K/V in 16 bits and accumulates dK/dV in float); ulysses and hybrid take all nine arrays as
// stored (they widen after their all-to-alls, sum in float and round each gradient once).
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <type_traits>

#include "kattn/backward.hpp"
#include "kattn/core/storage.hpp"
#include "kattn/detail/memory_check.hpp"
#include "kattn/detail/shapes.hpp"
#include "kattn/detail/alibi.hpp"
#include "kattn/detail/score_bias_check.hpp"
#include "kattn/detail/sinks.hpp"
#include "kattn/detail/widening.hpp"
#include "kattn/distributed/collective.hpp"
#include "kattn/distributed/detail/agreement.hpp"
#include "kattn/distributed/detail/schemes.hpp"
#include "kattn/distributed/options.hpp"
#include "kattn/errors.hpp"
#include "kattn/kv.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace dist {
namespace detail {

inline DistCall forward_call(Scheme s) {
  switch (s) {
    case Scheme::ulysses:
      return DistCall::ulysses_forward;
    case Scheme::hybrid:
      return DistCall::hybrid_forward;
    case Scheme::sharded_kv:
      return DistCall::sharded_kv_forward;
    case Scheme::grid:
      return DistCall::grid_forward;
    default:
      return DistCall::ring_forward;
  }
}

inline DistCall backward_call(Scheme s) {
  return s == Scheme::ulysses ? DistCall::ulysses_backward
         : s == Scheme::hybrid ? DistCall::hybrid_backward
         : s == Scheme::grid   ? DistCall::grid_backward
                               : DistCall::ring_backward;
}

inline bool head_sharded(const DistOptions& d) { return d.scheme == Scheme::ulysses || d.scheme == Scheme::hybrid; }

// The same call and storage type on every rank, agreed before the call's own checks: the ranks
// then run the same collective steps whatever scheme and type they were given.
template <class S>
void agree_call(MPI_Comm comm, DistCall call) {
  collective_agree(comm, {call_field(call), Agreed::dtype<S>("q")});
}

// The checks every call makes first, on every rank inside one collective_check.
inline void validate_call(const Options& opt, const DistOptions& d) {
  validate(opt);
  validate(d);
  // Only the ring has a transfer-free stand-in (DistOptions::communicate = false measures its overlap).
  KATTN_REQUIRE(d.communicate || d.scheme == Scheme::ring, "communicate: false is for the ring's forward alone; ",
                name(d.scheme), " always transfers");
  // A rank passes the bias of the scores it computes (agreement.hpp, require_sharded_bias): the
  // ring's blocks stay on the rank of their queries, sharded_kv's on the rank of their keys,
  // ulysses' and hybrid's on the rank of their heads (and hybrid's group rows), so no bias value
  // moves; the grid does not take one yet (docs/distributed-reference.md).
  KATTN_REQUIRE(!opt.bias.active() || d.scheme != Scheme::grid,
                "bias: the distributed calls take one with scheme ring, ulysses, hybrid or sharded-kv, got ",
                name(d.scheme));
}

inline void refuse_atomic_if_deterministic(const DistOptions& d, const BackwardOptions& bopt) {
  KATTN_REQUIRE(!(d.deterministic && bopt.dq == DqStrategy::atomic),
                "dq: the atomic strategy is not deterministic; choose key_chunks or query_pass, or drop "
                "deterministic");
}

// Only the ring and the grid take a ragged batch.
inline void require_ring_for_ragged(const DistOptions& d) {
  KATTN_REQUIRE(d.scheme == Scheme::ring || d.scheme == Scheme::grid,
                "scheme: a ragged batch takes scheme ring or grid, got ", name(d.scheme));
}

// The float copies a 16-bit call makes (`values` of them): refused, naming them, when they do not fit.
template <class MemorySpace>
void require_float_copies(Workspace* ws, std::uint64_t values, const char* arrays, const DistOptions& d) {
  kattn::detail::require_memory<MemorySpace>(
      ws, kattn::detail::saturating_mul(values, sizeof(float)),
      kattn::detail::concat("kattn::dist: float copies of the 16-bit ", arrays),
      kattn::detail::concat(values, " values of 4 bytes"),
      d.scheme == Scheme::sharded_kv ? "decode fewer query rows at a time, or give float queries"
                                     : "give float arrays, or spread the sequence over more ranks");
}

// A float view with view's extents and strides and no data: the float params of a call that reads
// k and v as stored take their addressing from it.
template <class View>
auto float_shape_of(const View& view) {
  using Shape = Kokkos::View<float****, typename View::array_layout, typename View::memory_space,
                             Kokkos::MemoryUnmanaged>;
  return Shape(static_cast<float*>(nullptr), view.layout());
}

// Whether this rank's o and lse receive the result (sharded_kv with a root: that rank only).
inline bool receives_result(MPI_Comm comm, const DistOptions& d) {
  if (d.scheme != Scheme::sharded_kv || d.root < 0) return true;
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank == d.root;
}

// The ring, grid or sharded_kv on params in float or double (q, o and the rows in T; K/V as stored).
template <class ExecSpace, class T, class KV>
DistStats ring_or_sharded_kv(MPI_Comm comm, const ExecSpace& space, const AttentionParams<T, T, KV>& p,
                             const Options& opt, const DistOptions& d) {
  if (d.scheme == Scheme::grid) return grid_forward_impl(comm, space, p, opt, d);
  return d.scheme == Scheme::sharded_kv ? sharded_kv_impl(comm, space, p, opt, d)
                                        : ring_forward_impl(comm, space, p, opt, d);
}

// The same, then the sinks (Options::sinks) merged once into each finished row where it lands: on
// the final rows, so that the result is the same at every rank count.
template <class ExecSpace, class T, class KV>
DistStats ring_or_sharded_kv_with_sinks(MPI_Comm comm, const ExecSpace& space, const AttentionParams<T, T, KV>& p,
                                        const Options& opt, const DistOptions& d) {
  return kattn::detail::with_sinks(
      space, p, opt, [&](const auto& ps) { return ring_or_sharded_kv(comm, space, ps, opt, d); },
      receives_result(comm, d));
}

// The forward over dense shards, any scheme.
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView>
DistStats forward(MPI_Comm comm, const ExecSpace& space, const QView& q, const kv::Dense<KView, VView>& kv,
                  const OView& o, const LseView& lse, const Options& opt, const DistOptions& d) {
  using Params = kattn::detail::params_of<QView, KView, VView, OView, LseView>;  // the storage rule
  using S = typename Params::q_type;
  using KV = typename Params::kv_type;
  comm = library_comm(comm);  // kattn's traffic apart from the caller's
  if (head_sharded(d)) {
    Params p;
    collective_check(comm, [&] {
      validate_call(opt, d);
      p = dense_params(q, kv.k, kv.v, o, lse);
      kattn::detail::require_sinks(opt, p.heads_q);
    kattn::detail::require_alibi(opt, p.heads_q);
      KATTN_REQUIRE((std::is_same_v<S, KV>), "scheme: ", name(d.scheme),
                    " takes q, k and v of one storage type (a 16-bit cache under float queries: ring or sharded-kv)");
    });
    agree_call<S>(comm, forward_call(d.scheme));
    if constexpr (std::is_same_v<S, KV>)
      return kattn::detail::with_sinks(space, p, opt,
                                       [&](const auto& ps) { return head_sharded_forward_impl(comm, space, ps, opt, d); });
    return {};  // refused above on every rank
  } else if constexpr (is_16bit_v<S>) {
    // The float-query call over the 16-bit cache on widened q (exact), its float o rounded once
    // into o where the result lands.
    using Float = typename kattn::detail::FloatCopy<ExecSpace, 4>::type;
    const kattn::detail::Widening<ExecSpace> w(space, "kattn::dist", opt.workspace);
    Float q_float, o_float;
    AttentionParams<float, float, KV> p;
    collective_check(comm, [&] {
      validate_call(opt, d);
      (void)dense_params(q, kv.k, kv.v, o, lse);
      require_float_copies<typename ExecSpace::memory_space>(opt.workspace, q.size() + o.size(), "q and o", d);
      q_float = w.in(q, "q");
      o_float = w.out(o, "o");
      p = dense_params(q_float, kv.k, kv.v, o_float, lse);
      kattn::detail::require_sinks(opt, p.heads_q);
    kattn::detail::require_alibi(opt, p.heads_q);
    });
    agree_call<S>(comm, forward_call(d.scheme));
    const DistStats stats = ring_or_sharded_kv_with_sinks(comm, space, p, opt, d);
    if (receives_result(comm, d)) w.copy(o_float, o);
    space.fence();
    return stats;
  } else {
    Params p;
    collective_check(comm, [&] {
      validate_call(opt, d);
      p = dense_params(q, kv.k, kv.v, o, lse);
      kattn::detail::require_sinks(opt, p.heads_q);
    kattn::detail::require_alibi(opt, p.heads_q);
    });
    agree_call<S>(comm, forward_call(d.scheme));
    return ring_or_sharded_kv_with_sinks(comm, space, p, opt, d);
  }
}

// The forward over a ragged batch: the ring or the grid.
template <class ExecSpace, class QView, class KView, class VView, class MemorySpace, class OView, class LseView>
DistStats forward(MPI_Comm comm, const ExecSpace& space, const QView& q, const kv::Ragged<KView, VView, MemorySpace>& kv,
                  const OView& o, const LseView& lse, const Options& opt, const DistOptions& d) {
  using S = typename OView::non_const_value_type;
  static_assert(std::is_same_v<S, typename KView::non_const_value_type>,
                "kattn::dist::attention: a ragged batch takes q, k, v and o of one type (float, double, "
                "kattn::bf16 or kattn::fp16)");
  comm = library_comm(comm);  // kattn's traffic apart from the caller's
  kattn::detail::params_of<QView, KView, VView, OView, LseView> p;
  collective_check(comm, [&] {
    validate_call(opt, d);
    require_ring_for_ragged(d);
    kattn::detail::refuse_bias(opt, "a ragged batch over MPI");
    p = ragged_params(q, kv.k, kv.v, o, lse, kv.layout);
    kattn::detail::require_sinks(opt, p.heads_q);
    kattn::detail::require_alibi(opt, p.heads_q);
  });
  agree_call<S>(comm, d.scheme == Scheme::grid ? DistCall::grid_ragged_forward : DistCall::ring_ragged_forward);
  return kattn::detail::with_sinks(space, p, opt, [&](const auto& ps) {
    return d.scheme == Scheme::grid ? grid_ragged_forward_impl(comm, space, ps, kv.layout.lengths, opt, d)
                                    : ring_ragged_forward_impl(comm, space, ps, kv.layout.lengths, opt, d);
  });
}

inline void validate_backward_call(const Options& opt, const BackwardOptions& bopt, const DistOptions& d) {
  validate_call(opt, d);
  KATTN_REQUIRE(d.scheme != Scheme::sharded_kv,
                "scheme: sharded-kv has no backward (it serves inference); use ring, grid, ulysses or hybrid");
  KATTN_REQUIRE(d.communicate, "communicate: false is for the ring's forward alone; the backward always transfers");
  refuse_atomic_if_deterministic(d, bopt);
}

// The ring's or the grid's dense backward on params in float or double, K/V as stored at k, v.
template <class ExecSpace, class T, class KV>
DistStats ring_or_grid_backward(MPI_Comm comm, const ExecSpace& space, const BackwardParams<T>& p, const KV* k,
                                const KV* v, const Options& opt, const DistOptions& d, const BackwardOptions& bopt) {
  return d.scheme == Scheme::grid ? grid_backward_impl(comm, space, p, k, v, opt, d, bopt)
                                  : ring_backward_impl(comm, space, p, k, v, opt, d, bopt);
}

// The dense backward on the arrays as stored: the ring over float or double, ulysses and hybrid
// over every storage.
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView, class DoView,
          class DqView, class DkView, class DvView>
DistStats backward_as_stored(MPI_Comm comm, const ExecSpace& space, const QView& q, const kv::Dense<KView, VView>& kv,
                             const OView& o, const LseView& lse, const DoView& dout, const DqView& dq,
                             const DkView& dk, const DvView& dv, const Options& opt, const BackwardOptions& bopt,
                             const DistOptions& d) {
  using S = typename DqView::non_const_value_type;
  BackwardParams<S> p;
  collective_check(comm, [&] {
    validate_backward_call(opt, bopt, d);
    p = backward_params(q, kv.k, kv.v, o, lse, dout, dq, dk, dv);
    kattn::detail::require_sinks(opt, p.fwd.heads_q);
    kattn::detail::require_alibi(opt, p.fwd.heads_q);
  });
  agree_call<S>(comm, backward_call(d.scheme));
  if (head_sharded(d)) return head_sharded_backward_impl(comm, space, p, opt, d, bopt);
  if constexpr (!is_16bit_v<S>) return ring_or_grid_backward(comm, space, p, p.fwd.k.data, p.fwd.v.data, opt, d, bopt);
  return {};  // the 16-bit ring and grid run on float copies (backward)
}

// The sinks' gradient over every rank's rows of the backward p (this rank's): each head's exact sum
// added over the ranks (integer limbs: any order gives the same sum), then rounded.
template <class ExecSpace, class BP>
std::vector<double> dist_sink_gradients(MPI_Comm comm, const ExecSpace& space, const BP& p, const Options& opt) {
  std::vector<kattn::detail::ExactSum> sums = kattn::detail::sink_gradient_sums(space, p, opt);
  for (kattn::detail::ExactSum& s : sums) {
    MPI_Allreduce(MPI_IN_PLACE, s.limbs(), kattn::detail::ExactSum::kLimbs, MPI_INT64_T, MPI_SUM, comm);
    MPI_Allreduce(MPI_IN_PLACE, &s.special(), 1, MPI_DOUBLE, MPI_SUM, comm);
  }
  return kattn::detail::values_of(sums);
}

// The backward over dense shards (backward_of_rows, below), then the sinks' gradient.
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView, class DoView,
          class DqView, class DkView, class DvView>
DistStats backward_of_rows(MPI_Comm comm, const ExecSpace& space, const QView& q, const kv::Dense<KView, VView>& kv,
                           const OView& o, const LseView& lse, const DoView& dout, const DqView& dq, const DkView& dk,
                           const DvView& dv, const Options& opt, const BackwardOptions& bopt, const DistOptions& d);
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView, class DoView,
          class DqView, class DkView, class DvView>
DistStats backward(MPI_Comm comm, const ExecSpace& space, const QView& q, const kv::Dense<KView, VView>& kv,
                   const OView& o, const LseView& lse, const DoView& dout, const DqView& dq, const DkView& dk,
                   const DvView& dv, const Options& opt, const BackwardOptions& bopt, const DistOptions& d) {
  comm = library_comm(comm);  // kattn's traffic apart from the caller's
  DistStats stats = backward_of_rows(comm, space, q, kv, o, lse, dout, dq, dk, dv, opt, bopt, d);
  if (!opt.sinks.empty())
    stats.dsinks = dist_sink_gradients(comm, space, backward_params(q, kv.k, kv.v, o, lse, dout, dq, dk, dv), opt);
  return stats;
}

// The backward over dense shards: ring, grid, ulysses or hybrid.
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView, class DoView,
          class DqView, class DkView, class DvView>
DistStats backward_of_rows(MPI_Comm comm, const ExecSpace& space, const QView& q, const kv::Dense<KView, VView>& kv,
                           const OView& o, const LseView& lse, const DoView& dout, const DqView& dq, const DkView& dk,
                           const DvView& dv, const Options& opt, const BackwardOptions& bopt, const DistOptions& d) {
  using S = typename DqView::non_const_value_type;
  static_assert(
      !is_16bit_v<S> || kattn::detail::same_storage<QView, KView, VView, OView, DoView, DqView, DkView, DvView>,
      "kattn::dist::attention_backward: q, k, v, o, dout, dq, dk and dv must have one 16-bit type (lse float)");
  if constexpr (is_16bit_v<S>) {
    if (head_sharded(d)) return backward_as_stored(comm, space, q, kv, o, lse, dout, dq, dk, dv, opt, bopt, d);
    // The ring in float on float copies of q, o and dout, k and v as stored; dq, dk, dv rounded once.
    using Float = typename kattn::detail::FloatCopy<ExecSpace, 4>::type;
    const kattn::detail::Widening<ExecSpace> w(space, "kattn::dist", opt.workspace);
    Float qf, of, dof, dqf, dkf, dvf;
    BackwardParams<float> p;
    collective_check(comm, [&] {
      validate_backward_call(opt, bopt, d);
      require_float_copies<typename ExecSpace::memory_space>(
          opt.workspace, q.size() + o.size() + dout.size() + dq.size() + dk.size() + dv.size(),
          "q, o, dout and the three gradients", d);
      qf = w.in(q, "q"), of = w.in(o, "o"), dof = w.in(dout, "dout");
      dqf = w.out(dq, "dq"), dkf = w.out(dk, "dk"), dvf = w.out(dv, "dv");
      p = backward_params(qf, float_shape_of(kv.k), float_shape_of(kv.v), of, lse, dof, dqf, dkf, dvf);
      kattn::detail::require_sinks(opt, p.fwd.heads_q);
    kattn::detail::require_alibi(opt, p.fwd.heads_q);
    });
    agree_call<S>(comm, backward_call(d.scheme));
    const DistStats stats = ring_or_grid_backward(comm, space, p, kv.k.data(), kv.v.data(), opt, d, bopt);
    w.copy(dqf, dq), w.copy(dkf, dk), w.copy(dvf, dv);
    space.fence();
    return stats;
  } else {
    return backward_as_stored(comm, space, q, kv, o, lse, dout, dq, dk, dv, opt, bopt, d);
  }
}

// The backward over a ragged batch: the ring or the grid.
template <class ExecSpace, class QView, class KView, class VView, class MemorySpace, class OView, class LseView,
          class DoView, class DqView, class DkView, class DvView>
DistStats backward(MPI_Comm comm, const ExecSpace& space, const QView& q,
                   const kv::Ragged<KView, VView, MemorySpace>& kv, const OView& o, const LseView& lse,
                   const DoView& dout, const DqView& dq, const DkView& dk, const DvView& dv, const Options& opt,
                   const BackwardOptions& bopt, const DistOptions& d) {
  using S = typename DqView::non_const_value_type;
  static_assert(kattn::detail::same_storage<QView, KView, VView, OView, DoView, DqView, DkView, DvView>,
                "kattn::dist::attention_backward: a ragged batch takes q, k, v, o, dout, dq, dk and dv of one "
                "type (float, double, kattn::bf16 or kattn::fp16)");
  comm = library_comm(comm);  // kattn's traffic apart from the caller's
  BackwardParams<S> p;
  collective_check(comm, [&] {
    validate_backward_call(opt, bopt, d);
    require_ring_for_ragged(d);
    kattn::detail::refuse_bias(opt, "a ragged batch over MPI");
    p = ragged_backward_params(q, kv.k, kv.v, o, lse, dout, dq, dk, dv, kv.layout);
    kattn::detail::require_sinks(opt, p.fwd.heads_q);
    kattn::detail::require_alibi(opt, p.fwd.heads_q);
  });
  const bool grid = d.scheme == Scheme::grid;
  agree_call<S>(comm, grid ? DistCall::grid_ragged_backward : DistCall::ring_ragged_backward);
  DistStats stats = grid ? grid_ragged_backward_impl(comm, space, p, kv.layout.lengths, opt, d, bopt)
                         : ring_ragged_backward_impl(comm, space, p, kv.layout.lengths, opt, d, bopt);
  if (!opt.sinks.empty()) stats.dsinks = dist_sink_gradients(comm, space, p, opt);
  return stats;
}

// The empty lse view of a call made without one (o's rank less one).
template <class OView>
using NoLse = std::conditional_t<
    OView::rank == 4,
    Kokkos::View<accumulate_t<typename OView::non_const_value_type>***, typename OView::memory_space>,
    Kokkos::View<accumulate_t<typename OView::non_const_value_type>**, typename OView::memory_space>>;

}  // namespace detail
}  // namespace dist
}  // namespace kattn
