// Block-sparse attention (FlashAttention's section 3.3, FlashInfer's BSR masks): the forward,
// split-KV and backward passes under a block mask (block_mask.hpp), skipping every key tile
// that no row of a query tile lists, so time and traffic follow the kept fraction. The mask
// combines with every option (causal, window, softcap, scale, GQA): a score is kept iff both
// keep it. Dense layouts ([B, N, H, D] views) only; the mask is the same for every sequence.
//
//   kattn::BlockMask m = kattn::make_block_mask(kattn::parse_block_pattern("local:2,global:1"), 64, Nq, Nk);
//   kattn::forward(space, q, k, v, o, lse, m, opt);
//
// Tiles: the kernels' key tile is cut to divide the mask block (or to be the block) and a query
// tile to hold the positions of one mask block, when the options leave block_q / block_k at 0,
// so that a tile is either skipped or computed whole; tiles chosen in the options may straddle
// blocks (still exact: the partly kept tiles are masked element-wise).
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "kattn/backward.hpp"
#include "kattn/block_mask.hpp"
#include "kattn/block_patterns.hpp"
#include "kattn/errors.hpp"
#include "kattn/forward.hpp"
#include "kattn/options.hpp"
#include "kattn/params.hpp"
#include "kattn/shapes.hpp"
#include "kattn/core/split_planner.hpp"

namespace kattn {

// Refuses a mask that does not fit a problem of `heads_q` query heads, Nq queries, Nk keys.
inline void check_block_mask(const BlockMask& mask, int heads_q, std::int64_t q_len, std::int64_t kv_len) {
  KATTN_REQUIRE(!mask.empty(), "block_mask: the mask is empty (default-constructed); build it with BlockMask::from_bsr, ",
                "from_dense or make_block_mask");
  const std::int64_t B = mask.block();
  KATTN_REQUIRE(mask.heads() == 1 || mask.heads() == heads_q, "block_mask: expected 1 head (shared) or ", heads_q,
                " (one per query head), got ", mask.heads());
  KATTN_REQUIRE(mask.q_blocks() == (q_len + B - 1) / B, "block_mask: expected ", (q_len + B - 1) / B,
                " query blocks (", q_len, " queries / block ", B, ", rounded up), got ", mask.q_blocks());
  KATTN_REQUIRE(mask.k_blocks() == (kv_len + B - 1) / B, "block_mask: expected ", (kv_len + B - 1) / B,
                " key blocks (", kv_len, " keys / block ", B, ", rounded up), got ", mask.k_blocks());
}

namespace detail {

// One split when `split` is false (the forward), else planned like kattn::splitkv with chunks
// rounded to whole mask blocks. Returns the split used.
template <class ExecSpace, class T>
SplitPlan block_sparse_impl(const ExecSpace& space, const AttentionParams<T>& p, const Options& opt,
                            const BlockMask& mask, bool split);

template <class ExecSpace, class T>
BackwardInfo block_sparse_backward_impl(const ExecSpace& space, const BackwardParams<T>& p, const Options& opt,
                                        const BackwardOptions& bopt, const BlockMask& mask);

}  // namespace detail

// kattn::forward under a block mask: same views and results, where query i of head h sees key j
// only if block (i / B, j / B) is listed for h (B = mask.block()) and the options allow it.
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView>
void forward(const ExecSpace& space, const QView& q, const KView& k, const VView& v, const OView& o,
             const LseView& lse, const BlockMask& mask, const Options& opt = {}) {
  static_assert(detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView>(),
                "kattn::forward: the views must be accessible from the execution space");
  validate(opt);
  const auto p = dense_params(q, k, v, o, lse);
  check_block_mask(mask, p.heads_q, p.q_len, p.kv_len);
  detail::block_sparse_impl(space, p, opt, mask, false);
}

// kattn::splitkv under a block mask (dense layout): key chunks hold whole mask blocks.
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView>
SplitPlan splitkv(const ExecSpace& space, const QView& q, const KView& k, const VView& v, const OView& o,
                  const LseView& lse, const BlockMask& mask, const Options& opt = {}) {
  static_assert(detail::accessible_from<ExecSpace, QView, KView, VView, OView, LseView>(),
                "kattn::splitkv: the views must be accessible from the execution space");
  validate(opt);
  const auto p = dense_params(q, k, v, o, lse);
  check_block_mask(mask, p.heads_q, p.q_len, p.kv_len);
  return detail::block_sparse_impl(space, p, opt, mask, true);
}

// kattn::backward under the block mask the forward ran with (o and lse from that forward).
template <class ExecSpace, class QView, class KView, class VView, class OView, class LseView, class DoView,
          class DqView, class DkView, class DvView>
BackwardInfo backward(const ExecSpace& space, const QView& q, const KView& k, const VView& v, const OView& o,
                      const LseView& lse, const DoView& dout, const DqView& dq, const DkView& dk, const DvView& dv,
                      const BlockMask& mask, const Options& opt = {}, const BackwardOptions& bopt = {}) {
  static_assert(
      detail::backward_accessible_from<ExecSpace, QView, KView, VView, OView, LseView, DoView, DqView, DkView, DvView>(),
      "kattn::backward: the views must be accessible from the execution space");
  validate(opt);
  const BackwardParams<typename DqView::non_const_value_type> p = backward_params(q, k, v, o, lse, dout, dq, dk, dv);
  check_block_mask(mask, p.fwd.heads_q, p.fwd.q_len, p.fwd.kv_len);
  return detail::block_sparse_backward_impl(space, p, opt, bopt, mask);
}

}  // namespace kattn
