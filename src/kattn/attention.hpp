// The front door: one call for attention over every way keys and values are stored.
//
//   kattn::attention(space, q, kv, o, lse, opt)
//   kattn::attention_backward(space, q, kv, o, lse, dout, dq, dk, dv, opt, bopt)   (dense, ragged, paged)
//
// `kv` says how keys and values are stored (kattn::kv::dense, ragged, paged, cascade); split-KV
// (opt.splits, opt.split_chunk; planned when both are 0) and block-sparse masks (opt.block_mask)
// are options of the same call. Every kind writes lse in the layout its backward reads, so a
// forward's outputs always feed attention_backward.
//
//   dense    q, o [B, Nq, Hq, D]        k, v [B, Nk, Hkv, D]                 lse [B, Hq, Nq]
//   ragged   q, o [total_q, Hq, D]      k, v [total_kv, Hkv, D]              lse [total_q, Hq]
//   paged    q, o [total_q, Hq, D]      k, v [num_pages, page_size, Hkv, D]  lse [total_q, Hq]
//   cascade  a shared prefix k, v [Np, Hkv, D] seen by every request, then a ragged or paged
//            suffix per request; q, o, lse as the suffix's
//
// lse may be an empty view where it is not wanted (forward only). Asynchronous like every kattn
// kernel, except where a plan must read the layout on the host.
#pragma once

#include <Kokkos_Core.hpp>

#include "kattn/backward.hpp"
#include "kattn/block_mask.hpp"
#include "kattn/block_patterns.hpp"
#include "kattn/detail/attention_impl.hpp"
#include "kattn/detail/cascade.hpp"
#include "kattn/detail/shapes.hpp"
#include "kattn/detail/sinks.hpp"
#include "kattn/detail/tuning.hpp"
#include "kattn/detail/widening.hpp"
#include "kattn/detail/zero_fill.hpp"
#include "kattn/kv.hpp"
#include "kattn/options.hpp"
#include "kattn/paged.hpp"
#include "kattn/plan_splits.hpp"
#include "kattn/ragged.hpp"

namespace kattn {
namespace detail {

inline void require_dense_for_block_mask(const Options& opt, const char* kind) {
  KATTN_REQUIRE(opt.block_mask == nullptr, "block_mask: supported with dense keys and values, not with ", kind);
}

// The backward kernels, then the sinks' gradient (the kernels need nothing else for them: lse
// includes the sinks).
template <class ExecSpace, class BP>
BackwardInfo backward_with_sinks(const ExecSpace& space, const BP& p, const Options& opt, const BackwardOptions& bopt) {
  require_sinks(opt, p.fwd.heads_q);
  BackwardInfo info = backward_impl(space, p, opt, bopt);
  info.dsinks = sink_gradients(space, p, opt);
  return info;
}

// Whether a bf16 backward on this space multiplies as bf16 pairs (host_backward_cpu_products).
template <class ExecSpace, class QView>
bool backward_pairs(const Options& opt) {
  if constexpr (Tuning<ExecSpace, float>::host && std::is_same_v<typename QView::non_const_value_type, bf16>)
    return host_backward_cpu_products(opt.cpu_products, true) == CpuProducts::bf16_dot;
  (void)opt;
  return false;
}

// The backward of one kv kind: params(q, k, v, o, dout, dq, dk, dv) describes the problem on float
// or double views (the caller's, or for 16-bit storage their float copies: widened_backward), then
// the kernels and the sinks' gradient.
template <class ExecSpace, class QView, class KView, class VView, class OView, class DoView, class DqView,
          class DkView, class DvView, class Params>
BackwardInfo float_backward(const ExecSpace& space, const QView& q, const KView& k, const VView& v, const OView& o,
                            const DoView& dout, const DqView& dq, const DkView& dk, const DvView& dv,
                            const Options& opt, const Params& params, const BackwardOptions& bopt) {
  if constexpr (is_16bit_view<QView>) {
    return widened_backward(space, q, k, v, o, dout, dq, dk, dv, opt.workspace, backward_pairs<ExecSpace, QView>(opt),
                            [&](auto qf, auto kf, auto vf, auto of, auto df, auto dqf, auto dkf, auto dvf, bool pairs) {
                              auto p = params(qf, kf, vf, of, df, dqf, dkf, dvf);
                              p.pair_products = pairs;
                              return backward_with_sinks(space, p, opt, bopt);
                            });
  } else {
    return backward_with_sinks(space, params(q, k, v, o, dout, dq, dk, dv), opt, bopt);
  }
}

}  // namespace detail

// o (and lse) = attention of q over dense keys and values; returns the split it used.
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView>
SplitPlan attention(const ExecSpace& space, const QView& q, const kv::Dense<KView, VView>& kv, const OView& o,
                    const LseView& lse, const Options& opt = {}) {
  static_assert(detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView>(),
                "kattn::attention: the views must be accessible from the execution space");
  validate(opt);
  return detail::with_sinks(space, dense_params(q, kv.k, kv.v, o, lse), opt,
                            [&](const auto& p) { return detail::attention_impl(space, p, opt, BatchLengths{}); });
}

template <class ExecSpace, class QView, class KView, class VView, class MemorySpace, class OView, class LseView>
SplitPlan attention(const ExecSpace& space, const QView& q, const kv::Ragged<KView, VView, MemorySpace>& kv,
                    const OView& o, const LseView& lse, const Options& opt = {}) {
  static_assert(detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView>() &&
                    detail::layout_accessible_from<ExecSpace, MemorySpace>(),
                "kattn::attention: the views and the layout must be accessible from the execution space");
  validate(opt);
  detail::require_dense_for_block_mask(opt, "a ragged batch");
  return detail::with_sinks(space, ragged_params(q, kv.k, kv.v, o, lse, kv.layout), opt,
                            [&](const auto& p) { return detail::attention_impl(space, p, opt, kv.layout.lengths); });
}

template <class ExecSpace, class QView, class KView, class VView, class MemorySpace, class OView, class LseView>
SplitPlan attention(const ExecSpace& space, const QView& q, const kv::Paged<KView, VView, MemorySpace>& kv,
                    const OView& o, const LseView& lse, const Options& opt = {}) {
  static_assert(detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView>() &&
                    detail::layout_accessible_from<ExecSpace, MemorySpace>(),
                "kattn::attention: the views and the layout must be accessible from the execution space");
  validate(opt);
  detail::require_dense_for_block_mask(opt, "a paged cache");
  return detail::with_sinks(space, paged_params(q, kv.k, kv.v, o, lse, kv.layout), opt,
                            [&](const auto& p) { return detail::attention_impl(space, p, opt, kv.layout.lengths); });
}

// Cascade: the prefix pass and the suffix pass each plan their own split.
template <class ExecSpace, class QView, class KPView, class VPView, class Suffix, class OView, class LseView>
void attention(const ExecSpace& space, const QView& q, const kv::Cascade<KPView, VPView, Suffix>& kv, const OView& o,
               const LseView& lse, const Options& opt = {}) {
  using SK = decltype(kv.suffix.k);
  using SV = decltype(kv.suffix.v);
  using Layout = decltype(kv.suffix.layout);
  static_assert(detail::accessible_from<ExecSpace, QView, KPView, VPView, SK, SV, OView, LseView>() &&
                    detail::layout_accessible_from<ExecSpace, typename Layout::memory_space>(),
                "kattn::attention: the views and the layout must be accessible from the execution space");
  detail::require_dense_for_block_mask(opt, "a cascade");
  detail::cascade_impl(
      space, q, kv.k_prefix, kv.v_prefix, o, lse, opt, kv.suffix.layout.lengths,
      detail::CascadeSuffix<ExecSpace, SK, SV, Layout>{space, kv.suffix.k, kv.suffix.v, kv.suffix.layout});
}

// dq, dk, dv = the gradients of sum(o * dout) for the o and lse the forward wrote with the same kv
// and options (tile sizes may differ; block_mask the forward's); shapes as q, k, v (dk and dv sum
// over the query heads of each KV head's group; keys no query sees get 0). Returns when the
// gradients are written. In 16-bit storage (every array of q's bf16 or fp16 type, lse float), the
// float backward runs on widened copies and the gradients are rounded once (detail/widening.hpp);
// bf16 on a CPU whose products are bf16 dot products (Options::cpu_products) multiplies as bf16
// pairs, P and dS rounded to bf16 (docs/storage.md).
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView, class DoView,
          class DqView, class DkView, class DvView>
BackwardInfo attention_backward(const ExecSpace& space, const QView& q, const kv::Dense<KView, VView>& kv,
                                const OView& o, const LseView& lse, const DoView& dout, const DqView& dq,
                                const DkView& dk, const DvView& dv, const Options& opt = {},
                                const BackwardOptions& bopt = {}) {
  static_assert(
      detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView, DoView, DqView, DkView, DvView>(),
      "kattn::attention_backward: the views must be accessible from the execution space");
  validate(opt);
  return detail::float_backward(space, q, kv.k, kv.v, o, dout, dq, dk, dv, opt,
                                [&](auto qf, auto kf, auto vf, auto of, auto df, auto dqf, auto dkf, auto dvf) {
                                  return backward_params(qf, kf, vf, of, lse, df, dqf, dkf, dvf);
                                },
                                bopt);
}

template <class ExecSpace, class QView, class KView, class VView, class MemorySpace, class OView, class LseView,
          class DoView, class DqView, class DkView, class DvView>
BackwardInfo attention_backward(const ExecSpace& space, const QView& q, const kv::Ragged<KView, VView, MemorySpace>& kv,
                                const OView& o, const LseView& lse, const DoView& dout, const DqView& dq,
                                const DkView& dk, const DvView& dv, const Options& opt = {},
                                const BackwardOptions& bopt = {}) {
  static_assert(
      detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView, DoView, DqView, DkView, DvView>() &&
          detail::layout_accessible_from<ExecSpace, MemorySpace>(),
      "kattn::attention_backward: the views and the layout must be accessible from the execution space");
  validate(opt);
  detail::require_dense_for_block_mask(opt, "a ragged batch");
  return detail::float_backward(space, q, kv.k, kv.v, o, dout, dq, dk, dv, opt,
                                [&](auto qf, auto kf, auto vf, auto of, auto df, auto dqf, auto dkf, auto dvf) {
                                  return ragged_backward_params(qf, kf, vf, of, lse, df, dqf, dkf, dvf, kv.layout);
                                },
                                bopt);
}

// A paged cache: dk, dv [num_pages, page_size, Hkv, D] like k and v; slots no sequence uses get 0.
// Every page in one place of the page table (a page shared by sequences is refused).
template <class ExecSpace, class QView, class KView, class VView, class MemorySpace, class OView, class LseView,
          class DoView, class DqView, class DkView, class DvView>
BackwardInfo attention_backward(const ExecSpace& space, const QView& q, const kv::Paged<KView, VView, MemorySpace>& kv,
                                const OView& o, const LseView& lse, const DoView& dout, const DqView& dq,
                                const DkView& dk, const DvView& dv, const Options& opt = {},
                                const BackwardOptions& bopt = {}) {
  static_assert(
      detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView, DoView, DqView, DkView, DvView>() &&
          detail::layout_accessible_from<ExecSpace, MemorySpace>(),
      "kattn::attention_backward: the views and the layout must be accessible from the execution space");
  validate(opt);
  detail::require_dense_for_block_mask(opt, "a paged cache");
  return detail::float_backward(space, q, kv.k, kv.v, o, dout, dq, dk, dv, opt,
                                [&](auto qf, auto kf, auto vf, auto of, auto df, auto dqf, auto dkf, auto dvf) {
                                  const auto p = paged_backward_params(qf, kf, vf, of, lse, df, dqf, dkf, dvf,
                                                                       kv.layout);
                                  detail::zero_fill(space, dkf);  // the kernels write the slots that hold keys
                                  detail::zero_fill(space, dvf);
                                  return p;
                                },
                                bopt);
}

}  // namespace kattn
