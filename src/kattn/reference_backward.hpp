// The textbook backward of attention, S, P, dP and dS materialised ([B, Hq, Nq, Nk] each of two
// arrays, O(Nq Nk) memory per head): the oracle of the backward tests (in double) and of
// `kattn grad --check`. It recomputes the softmax itself and uses D = rowsum(P * dP), so it
// needs neither o nor lse:
//   S = scale q k^T [softcapped, + ALiBi, + bias, masked], P = softmax(S), dP = dO V^T,
//   dS = P (dP - D) (d(bias), summed over its broadcast dims),
//   dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO (dK, dV summed over each GQA group),
// with softcap's dS scaled by 1 - tanh^2(s / softcap).
#pragma once

#include <Kokkos_Core.hpp>

#include <vector>

#include "kattn/backward_params.hpp"
#include "kattn/backward_shapes.hpp"
#include "kattn/detail/accessible.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace detail {

// Reads q, k, v, dout (and the ragged indptrs) of p; ignores o and lse.
template <class ExecSpace, class T>
std::vector<double> reference_backward_impl(const ExecSpace& space, const BackwardParams<T>& p, const Options& opt,
                                            const ScoreBiasGradient& dbias = {});

}  // namespace detail

// Same shapes as kattn::attention_backward over kv::dense, without o and lse. Returns when the gradients are
// written, with the sinks' gradient (empty without Options::sinks); with dbias (the backward's
// BackwardOptions::dbias), the bias's gradient written there too.
template <class ExecSpace, class QView, class KView, class VView, class DoView, class DqView, class DkView,
          class DvView>
std::vector<double> reference_backward(const ExecSpace& space, const QView& q, const KView& k, const VView& v, const DoView& dout,
                        const DqView& dq, const DkView& dk, const DvView& dv, const Options& opt = {},
                        const ScoreBiasGradient& dbias = {}) {
  static_assert(detail::accessible_from<ExecSpace, QView, KView, VView, DoView, DqView, DkView, DvView>(),
                "kattn::reference_backward: the views must be accessible from the execution space");
  using T = typename DqView::non_const_value_type;
  validate(opt);
  // dout stands in for o (same shape) so that the dense validation applies; o is never read.
  const Kokkos::View<T***, typename DqView::memory_space> no_lse;
  BackwardParams<T> p;
  p.fwd = dense_params(q, k, v, detail::writable_alias(dout), no_lse);
  p.fwd.o = {};
  detail::check_gradient_views(q, k, v, dout, dout, dq, dk, dv);
  detail::fill_gradients(p, dout, dq, dk, dv);
  return detail::reference_backward_impl(space, p, opt, dbias);
}

}  // namespace kattn
