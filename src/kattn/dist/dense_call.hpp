// The front door every distributed call over dense shards shares (ring, head sharding, hybrid;
// forward and backward): kattn's own communicator, the collective checks of the options, the
// DistOptions and the shapes, the call and the storage type agreed by every rank (the same
// kattn::Error on every rank), then the call's implementation on the validated params. Internal;
// the public entry points keep their own static_assert, whose message names them.
//
// 16-bit storage (kattn::bf16 or kattn::fp16 q, k, v, o; lse float): the forward either widens q
// (exact), passes k and v as they are stored and rounds the float o once (KV16::as_stored: the
// ring, which sends K/V in 16 bits), or passes all four as stored (KV16::all_stored: head sharding
// and hybrid, whose all-to-alls move them in 16 bits and which round o themselves). The backward
// either runs the float implementation on float copies of q, o and dout with k and v as stored,
// and rounds dq, dk and dv once (Grads16::kv_as_stored: the ring, which sends K/V in 16 bits and
// accumulates dK/dV in float), or passes all nine arrays as stored (Grads16::all_stored: head
// sharding and hybrid, which widen after their all-to-alls, sum in float and round each gradient
// once).
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdint>

#include "kattn/backward.hpp"
#include "kattn/core/storage.hpp"
#include "kattn/detail/memory_check.hpp"
#include "kattn/detail/widening.hpp"
#include "kattn/dist/agreement.hpp"
#include "kattn/dist/collective.hpp"
#include "kattn/dist/dist_options.hpp"
#include "kattn/errors.hpp"
#include "kattn/kv.hpp"
#include "kattn/options.hpp"
#include "kattn/shapes.hpp"

namespace kattn {
namespace dist {
namespace detail {

// The float copies a 16-bit call makes (`values` of them): refused, naming them, when they do not fit.
template <class MemorySpace>
void require_float_copies(Workspace* ws, std::uint64_t values, const char* arrays) {
  kattn::detail::require_memory<MemorySpace>(ws, kattn::detail::saturating_mul(values, sizeof(float)),
                                             kattn::detail::concat("kattn::dist: float copies of the 16-bit ", arrays),
                                             kattn::detail::concat(values, " values of 4 bytes"),
                                             "give float arrays, or spread the sequence over more ranks");
}

// The same call and storage type on every rank, agreed before the call's own checks: the ranks
// then run the same collective steps whatever type they were given.
template <class S>
void agree_call(MPI_Comm comm, DistCall call) {
  collective_agree(comm, {call_field(call), Agreed::dtype<S>("q")});
}

inline void refuse_atomic_if_deterministic(const DistOptions& d, const BackwardOptions& bopt) {
  KATTN_REQUIRE(!(d.deterministic && bopt.dq == DqStrategy::atomic),
                "dq: the atomic strategy is not deterministic; choose key_chunks or query_pass, or drop "
                "deterministic");
}

// How a forward over 16-bit storage hands q, k, v and o to its implementation (see the top).
enum class KV16 { as_stored, all_stored };

// A float view with view's extents and strides and no data: the float params of a call that reads
// k and v as stored take their addressing from it.
template <class View>
auto float_shape_of(const View& view) {
  using Shape = Kokkos::View<float****, typename View::array_layout, typename View::memory_space,
                             Kokkos::MemoryUnmanaged>;
  return Shape(static_cast<float*>(nullptr), view.layout());
}

// impl(comm, space, params, opt, d) once q, kv, o and lse pass the checks on every rank.
template <KV16 kv16, class ExecSpace, class QView, class KView, class VView, class OView, class LseView, class Impl>
DistStats dense_forward(DistCall call, MPI_Comm comm, const ExecSpace& space, const QView& q,
                        const kv::Dense<KView, VView>& kv, const OView& o, const LseView& lse, const Options& opt,
                        const DistOptions& d, const Impl& impl) {
  using S = typename OView::non_const_value_type;
  // The storage rule, at compile time.
  kattn::detail::params_of<QView, KView, VView, OView, LseView> checked;
  comm = library_comm(comm);  // kattn's traffic apart from the caller's
  if constexpr (is_16bit_v<S> && kv16 == KV16::as_stored) {
    using Float = typename kattn::detail::FloatCopy<ExecSpace, 4>::type;
    const kattn::detail::Widening<ExecSpace> w(space, "kattn::dist", opt.workspace);
    Float q_float, o_float;
    AttentionParams<float, float, S> p;
    collective_check(comm, [&] {
      validate(opt);
      validate(d);
      checked = dense_params(q, kv.k, kv.v, o, lse);
      require_float_copies<typename ExecSpace::memory_space>(opt.workspace, q.size() + o.size(), "q and o");
      q_float = w.in(q, "q");
      o_float = w.out(o, "o");
      p = dense_params(q_float, kv.k, kv.v, o_float, lse);
    });
    agree_call<S>(comm, call);
    const DistStats stats = impl(comm, space, p, opt, d);
    w.copy(o_float, o);
    space.fence();
    return stats;
  } else {
    collective_check(comm, [&] {
      validate(opt);
      validate(d);
      checked = dense_params(q, kv.k, kv.v, o, lse);
    });
    agree_call<S>(comm, call);
    return impl(comm, space, checked, opt, d);
  }
}

// How a backward over 16-bit storage hands its arrays to its implementation (see the top).
enum class Grads16 { kv_as_stored, all_stored };

// impl(comm, space, params, opt, d, bopt) once the backward's arguments pass the checks on every
// rank; the atomic dQ strategy is refused in deterministic mode. Grads16::kv_as_stored calls
// impl(comm, space, params, k, v, opt, d, bopt) with float params whose k and v are strides only.
template <Grads16 grads16, class ExecSpace, class QView, class KView, class VView, class OView, class LseView,
          class DoView, class DqView, class DkView, class DvView, class Impl>
DistStats dense_backward(DistCall call, MPI_Comm comm, const ExecSpace& space, const QView& q,
                         const kv::Dense<KView, VView>& kv, const OView& o, const LseView& lse, const DoView& dout,
                         const DqView& dq, const DkView& dk, const DvView& dv, const Options& opt,
                         const BackwardOptions& bopt, const DistOptions& d, const Impl& impl) {
  using S = typename DqView::non_const_value_type;
  comm = library_comm(comm);  // kattn's traffic apart from the caller's
  static_assert(
      !is_16bit_v<S> || kattn::detail::same_storage<QView, KView, VView, OView, DoView, DqView, DkView, DvView>,
      "kattn::dist: q, k, v, o, dout, dq, dk and dv must have one 16-bit type (lse float)");
  if constexpr (is_16bit_v<S> && grads16 == Grads16::kv_as_stored) {
    using Float = typename kattn::detail::FloatCopy<ExecSpace, 4>::type;
    const kattn::detail::Widening<ExecSpace> w(space, "kattn::dist", opt.workspace);
    Float qf, of, dof, dqf, dkf, dvf;
    BackwardParams<float> p;
    collective_check(comm, [&] {
      validate(opt);
      validate(d);
      refuse_atomic_if_deterministic(d, bopt);
      require_float_copies<typename ExecSpace::memory_space>(
          opt.workspace, q.size() + o.size() + dout.size() + dq.size() + dk.size() + dv.size(),
          "q, o, dout and the three gradients");
      qf = w.in(q, "q"), of = w.in(o, "o"), dof = w.in(dout, "dout");
      dqf = w.out(dq, "dq"), dkf = w.out(dk, "dk"), dvf = w.out(dv, "dv");
      p = backward_params(qf, float_shape_of(kv.k), float_shape_of(kv.v), of, lse, dof, dqf, dkf, dvf);
    });
    agree_call<S>(comm, call);
    const DistStats stats = impl(comm, space, p, kv.k.data(), kv.v.data(), opt, d, bopt);
    w.copy(dqf, dq), w.copy(dkf, dk), w.copy(dvf, dv);
    space.fence();
    return stats;
  } else {
    BackwardParams<S> p;
    collective_check(comm, [&] {
      validate(opt);
      validate(d);
      refuse_atomic_if_deterministic(d, bopt);
      p = backward_params(q, kv.k, kv.v, o, lse, dout, dq, dk, dv);
    });
    agree_call<S>(comm, call);
    return impl(comm, space, p, opt, d, bopt);
  }
}

// The empty lse view of the calls made without one.
template <class OView>
using NoLse = Kokkos::View<accumulate_t<typename OView::non_const_value_type>***, typename OView::memory_space>;

}  // namespace detail
}  // namespace dist
}  // namespace kattn
