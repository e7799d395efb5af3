// The forward kernels (the tiled and row-tiled attention kernels, the merge of split partials),
// compiled here once per backend and storage (float, double, bf16, fp16, and float queries over
// a bf16 or fp16 cache): every entry point that runs them is defined in this file, declared in
// detail/attention_impl.hpp.
#include <numeric>
#include <string>

#include "kattn/block_mask.hpp"
#include "kattn/compat.hpp"
#include "kattn/detail/alibi.hpp"
#include "kattn/detail/attention_impl.hpp"
#include "kattn/detail/backends.hpp"
#include "kattn/detail/block_sparse_launch.hpp"
#include "kattn/detail/cuda_dispatch.hpp"
#include "kattn/detail/head_major_kv.hpp"
#include "kattn/detail/launch.hpp"
#include "kattn/detail/score_bias_check.hpp"
#include "kattn/detail/tile_sizes.hpp"
#include "kattn/plan_splits.hpp"

namespace kattn {
namespace detail {
namespace {

// Under a block mask (dense keys): tiles aligned to the mask's blocks, key chunks of whole blocks.
template <class ExecSpace, class Q, class T, class KV>
SplitPlan block_sparse_attention(const ExecSpace& space, const AttentionParams<Q, T, KV>& p, const Options& opt,
                                 const BlockMask& mask) {
  const std::string name = "kattn::attention::block_sparse";
  compat::ScopedRegion region(name);
  check_block_mask(mask, p.heads_q, p.q_len, p.kv_len);
  if (p.batch == 0 || p.q_len == 0 || p.heads_q == 0) return SplitPlan{};
  const int G = p.group_size();
  // Tiles aligned to the mask blocks where the options leave them free, at most the planner's.
  const TileGeometry dense = plan_tiles<ExecSpace, T>(space, p.head_dim, p.q_len * G, opt).geometry;
  const bool row_tiles = row_tile_rows<ExecSpace, T>(p.q_len * G, opt) > 0;  // decode shapes keep them
  const int cap_q = row_tiles ? static_cast<int>(p.q_len * G) : dense.block_q;
  const Options topt = aligned_options(opt, mask.block(), G, p.q_len, p.kv_len, cap_q, dense.block_k);
  const DeviceMask<ExecSpace> dm(mask, opt.workspace);
  SplitPlan plan = plan_splits(space, p, topt);
  with_tiled_kernel(space, p, topt, [&](auto& kern) {
    kern.bs = dm.bs;
    if (plan.splits > 1 && p.kv_len > 0) {
      // Chunks of whole mask blocks and whole key tiles, so that a split never cuts a tile.
      const std::int64_t per = plan.chunk > 0 ? plan.chunk : (p.kv_len + plan.splits - 1) / plan.splits;
      const std::int64_t B = mask.block(), bk = kern.geo.block_k;
      const std::int64_t align = B / std::gcd(B, bk) * bk;
      plan.chunk = (per + align - 1) / align * align;
      plan.splits = static_cast<int>((p.kv_len + plan.chunk - 1) / plan.chunk);
      plan.reason += "; chunks rounded to " + std::to_string(plan.chunk) + " keys (whole mask blocks)";
    }
    launch_tiles(space, p, kern, SplitSpec{plan.splits, plan.splits > 1 ? plan.chunk : 0}, name, opt.workspace);
  });
  compat::fence(space, "kattn::attention::block_sparse: the mask copy is freed on return");
  return plan;
}

// attention_impl once p carries its ALiBi slopes.
template <class ExecSpace, class Q, class T, class KV>
SplitPlan attention_tiles(const ExecSpace& space, const AttentionParams<Q, T, KV>& p, const Options& opt,
                          const BatchLengths& lengths) {
  if (opt.block_mask) return block_sparse_attention(space, p, opt, *opt.block_mask);
  if (p.batch == 0 || p.q_len == 0 || p.heads_q == 0) return SplitPlan{};
  if (SplitPlan cuda_plan; ran_on_cuda_kernels(space, p, opt, lengths, cuda_plan)) return cuda_plan;
  const SplitPlan plan = plan_splits(space, p, opt, lengths);
  const SplitSpec split{plan.splits, plan.chunk};
  AttentionParams<Q, T, KV> run = p;
  const HeadMajorKV<ExecSpace, KV> head_major =
      lengths.q_len.empty() ? make_head_major(space, run, opt.workspace) : HeadMajorKV<ExecSpace, KV>{};
  if (opt.progress)
    run_attention_with_progress(space, run, opt, split, "kattn::attention");
  else
    run_attention(space, run, opt, split, "kattn::attention");
  if (head_major) compat::fence(space, "kattn::attention: the head-major K and V are freed on return");
  return plan;
}

}  // namespace

template <class ExecSpace, class Q, class T, class KV>
SplitPlan attention_impl(const ExecSpace& space, const AttentionParams<Q, T, KV>& p, const Options& opt,
                         const BatchLengths& lengths) {
  require_bias(opt, p);
  return with_alibi(space, p, opt, [&](const auto& pa) { return attention_tiles(space, pa, opt, lengths); });
}

template <class ExecSpace, class Q, class T, class KV>
void chunk_partials(const ExecSpace& space, const AttentionParams<Q, T, KV>& p, const Options& opt, int chunks,
                    std::int64_t chunk, T* ws_o, T* ws_lse) {
  require_bias(opt, p);
  if (p.batch == 0 || p.q_len == 0 || chunks == 0) return;
  // Always the transposed tiles, whatever run_attention would pick for the shape: their per-row
  // arithmetic is the same at every rank count.
  with_alibi(space, p, opt, [&](const auto& pa) {
    with_column_kernel(space, pa, opt, [&](auto& kern) {
      kern.splits = chunks;
      kern.chunk = chunk;
      kern.ws.rows = pa.q_total * pa.heads_q;
      kern.ws.o = ws_o;
      kern.ws.lse = ws_lse;
      auto policy = team_policy<ExecSpace, T>(space, kern.league_size(), kern);
      policy.set_scratch_size(kern.scratch_level, Kokkos::PerTeam(kern.scratch_bytes()));
      Kokkos::parallel_for("kattn::dist::chunk_partials", policy, kern);
    });
  });
}

#define KATTN_INSTANTIATE_ATTENTION(Space, Q, KV)                   \
  template SplitPlan attention_impl<Space, Q, accumulate_t<Q>, KV>( \
      const Space&, const AttentionParams<Q, accumulate_t<Q>, KV>&, const Options&, const BatchLengths&);
#define KATTN_INSTANTIATE_CHUNK_PARTIALS(Space, Q, KV)                                                 \
  template void chunk_partials<Space, Q, accumulate_t<Q>, KV>(                                         \
      const Space&, const AttentionParams<Q, accumulate_t<Q>, KV>&, const Options&, int, std::int64_t, \
      accumulate_t<Q>*, accumulate_t<Q>*);
#define KATTN_INSTANTIATE_FORWARD_KERNELS(Space, T) \
  KATTN_INSTANTIATE_ATTENTION(Space, T, T)          \
  KATTN_INSTANTIATE_CHUNK_PARTIALS(Space, T, T)
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_FORWARD_KERNELS)
// 16-bit storage, and float queries over a 16-bit cache (decode with a bf16 / fp16 KV cache; its
// chunk partials for the MPI layer's deterministic decode).
#define KATTN_INSTANTIATE_16BIT_ATTENTION(Space, S) \
  KATTN_INSTANTIATE_ATTENTION(Space, S, S)          \
  KATTN_INSTANTIATE_ATTENTION(Space, float, S)      \
  KATTN_INSTANTIATE_CHUNK_PARTIALS(Space, float, S)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_16BIT_ATTENTION, bf16)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_16BIT_ATTENTION, fp16)

}  // namespace detail
}  // namespace kattn
