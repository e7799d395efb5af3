#include "kattn/backward.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "kattn/block_mask.hpp"
#include "kattn/compat.hpp"
#include "kattn/core/key_window.hpp"
#include "kattn/core/score_scaling.hpp"
#include "kattn/core/state.hpp"
#include "kattn/cpu_products.hpp"
#include "kattn/detail/alibi.hpp"
#include "kattn/detail/backends.hpp"
#include "kattn/detail/bias_gradient.hpp"
#include "kattn/detail/backward_key_pass.hpp"
#include "kattn/detail/backward_plan.hpp"
#include "kattn/detail/backward_query_pass.hpp"
#include "kattn/detail/backward_rows.hpp"
#include "kattn/detail/block_sparse_launch.hpp"
#include "kattn/detail/memory_check.hpp"
#include "kattn/detail/progress.hpp"
#include "kattn/detail/score_bias_check.hpp"
#include "kattn/workspace.hpp"

namespace kattn {
namespace detail {

namespace {

// prepare (D, lse2) -> key pass (dK, dV [, dQ partials or atomics] [, d(bias)]) -> query pass (dQ)
// or the sum of the dQ partials [-> the sum of d(bias)], each labelled "kattn::backward::<step>".
template <class ExecSpace, class T>
BackwardInfo backward_kernels(const ExecSpace& space, const BackwardParams<T>& p, const Options& opt,
                              const BackwardOptions& bopt, const BlockSparse& bs) {
  compat::ScopedRegion region("kattn::backward");
  const AttentionParams<T>& f = p.fwd;
  const BackwardPlan plan = plan_backward<ExecSpace, T>(space, f.batch, f.heads_kv, f.group_size(), f.head_dim,
                                                        f.q_len, f.kv_len, f.q_total, opt, bopt);
  BackwardInfo info;
  info.dq = plan.dq;
  info.deterministic = plan.deterministic;
  info.chunks = plan.chunks;
  info.block_q = plan.geo.block_q;
  info.block_k = plan.geo.block_k;
  info.workspace_bytes = plan.workspace_bytes;
  Workspace* const held = opt.workspace;
  const BiasGradient<ExecSpace, T> dbias(space, bopt.dbias, f.batch, f.heads_q, held);
  if (f.batch == 0 || f.heads_q == 0) {
    dbias.finish();  // a broadcast dbias of no sequences or heads: 0
    if (opt.progress) report_progress(opt, 1.0);
    return info;
  }

  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Mem = typename ExecSpace::memory_space;
  using Array = Kokkos::View<T*, Mem>;
  const std::size_t rows = std::size_t(f.heads_kv) * plan.ws_rows;
  {
    const std::uint64_t row_values = saturating_mul(f.heads_kv, plan.ws_rows);
    const bool partials = plan.dq == DqStrategy::key_chunks && plan.chunks > 1 && f.q_len > 0;
    const std::uint64_t values =
        saturating_add(saturating_mul(2, row_values),
                       partials ? saturating_mul(saturating_mul(plan.chunks - 1, row_values), plan.geo.kp_dims) : 0);
    require_memory<Mem>(
        held, saturating_mul(values, sizeof(T)), "kattn::backward: the workspace (D, lse and dQ partials)",
        concat(f.q_total, " query rows x ", f.heads_q, " heads x (2",
               partials ? concat(" + ", plan.chunks - 1, " chunks x ", plan.geo.kp_dims, " dims") : std::string(),
               ") values of ", sizeof(T), " bytes"),
        "use the query-pass or atomic dQ strategy (no dQ partials) or fewer sequences");
  }
  const Array lse2 = take_buffer<T, Mem>(held, space, "kattn::backward::lse2", rows);
  const Array di = take_buffer<T, Mem>(held, space, "kattn::backward::D", rows);
  Array dq_partials;
  // Chunks 1.. only (chunk 0 adds into dQ), zero-initialised: the key pass adds into them.
  if (plan.dq == DqStrategy::key_chunks && plan.chunks > 1 && f.q_len > 0)
    dq_partials = take_zeroed<T, Mem>(held, space, "kattn::backward::dq_partials",
                                      std::size_t(plan.chunks - 1) * rows * plan.geo.kp_dims);
  const Kokkos::View<int*, Mem> bad_keys =
      take_zeroed<int, Mem>(held, space, "kattn::backward::bad_keys", std::size_t(f.batch) * f.heads_kv * f.head_dim);
  BackwardWorkspace<T> ws;
  ws.bad_keys = bad_keys.data();
  ws.lse2 = lse2.data();
  ws.di = di.data();
  ws.dq = dq_partials.data();
  ws.rows = plan.ws_rows;
  ws.dims = plan.geo.kp_dims;


  const ScoreScaling sc = ScoreScaling::make(f.head_dim, opt.scale, opt.softcap);
  GradientScales<T> g;
  g.ds_scale = static_cast<T>(sc.scale);
  g.cap_log2 = static_cast<T>(sc.cap_log2);
  g.inv_cap = static_cast<T>(sc.inv_cap);
  const T score_scale = static_cast<T>(sc.q_scale);
  const KeyWindow window = KeyWindow::from(opt);

  if (f.q_len > 0) {
    BackwardPrepare<ExecSpace, T> prep{p, ws, plan.dq != DqStrategy::query_pass};
    Kokkos::parallel_for("kattn::backward::prepare", Policy(space, prep.league_size(), Kokkos::AUTO), prep);
  }
  // Options::progress on a dense problem: each pass in pieces of tiles, reported after each;
  // otherwise (or ragged batches) one launch per pass and one report at the end.
  std::optional<BackwardPieces> pieces;
  double reported = 0;
  const auto report_piece = [&](double fraction) {  // increasing fractions; 1 once, at the end
    if (!(fraction > reported && fraction < 1.0)) return;
    report_progress(opt, fraction);
    reported = fraction;
  };
  if (opt.progress && !f.q_indptr)
    pieces.emplace(window, f.q_len, f.kv_len, f.group_size(), plan.geo.block_q, plan.geo.block_k, plan.chunks, plan.dq,
                   std::int64_t(f.batch) * f.heads_kv, space.concurrency());
  if (f.kv_len > 0) {
    BackwardKeyPass<ExecSpace, T> kern;
    kern.p = p;
    kern.window = window;
    kern.k_scale = score_scale;
    kern.g = g;
    kern.geo = plan.geo;
    kern.dq = plan.dq;
    kern.chunks = plan.chunks;
    kern.scratch_level = plan.key_scratch_level;
    kern.ws = ws;
    kern.bs = bs;
    kern.bias = opt.bias;
    kern.dbias = dbias.target();
    if (kern.pairs()) {  // the pairs' scratch is about the float tiles' (BackwardGeometry)
      info.cpu_products = CpuProducts::bf16_dot;
      kern.hardware = bf16_dot_on_hardware();
      const std::size_t bytes = kern.scratch_bytes();
      KATTN_REQUIRE(bytes <= scratch_limit(space, 1), "block_q/block_k: the backward's bf16 pair tiles need ", bytes,
                    " bytes of scratch, more than the execution space offers; shrink block_q or block_k");
      kern.scratch_level = bytes <= scratch_limit(space, 0) ? 0 : 1;
    }
    auto policy = team_policy<ExecSpace, T>(space, kern.league_size(), kern);
    policy.set_scratch_size(kern.scratch_level, Kokkos::PerTeam(kern.scratch_bytes()));
    if (!pieces) {
      Kokkos::parallel_for("kattn::backward::key_pass", policy, kern);
    } else {
      for (std::int64_t begin = 0; begin < pieces->key_tiles(); begin += pieces->key_step()) {
        kern.tile_begin = begin;
        kern.tile_end = std::min(pieces->key_tiles(), begin + pieces->key_step());
        Kokkos::parallel_for("kattn::backward::key_pass", policy, kern);
        space.fence();
        report_piece(pieces->after_key_tiles(kern.tile_end));
      }
    }
  }
  if (f.q_len > 0 && plan.dq == DqStrategy::query_pass) {
    BackwardQueryPass<ExecSpace, T> kern;
    kern.p = p;
    kern.window = window;
    kern.q_scale = score_scale;
    kern.g = g;
    kern.geo = plan.geo;
    kern.row_tiles = plan.row_tiles;
    kern.scratch_level = plan.query_scratch_level;
    kern.ws = ws;
    kern.bs = bs;
    kern.bias = opt.bias;
    auto policy = team_policy<ExecSpace, T>(space, kern.league_size(), kern);
    policy.set_scratch_size(kern.scratch_level, Kokkos::PerTeam(kern.scratch_bytes()));
    if (!pieces) {
      Kokkos::parallel_for("kattn::backward::query_pass", policy, kern);
    } else {
      for (std::int64_t begin = 0; begin < pieces->row_tiles(); begin += pieces->row_step()) {
        kern.tile_begin = static_cast<int>(begin);
        kern.tile_end = static_cast<int>(std::min(pieces->row_tiles(), begin + pieces->row_step()));
        Kokkos::parallel_for("kattn::backward::query_pass", policy, kern);
        space.fence();
        report_piece(pieces->after_row_tiles(kern.tile_end));
      }
    }
  }
  if (f.q_len > 0 && plan.dq != DqStrategy::query_pass) {
    BackwardSumDq<ExecSpace, T> sum{p, ws, plan.dq == DqStrategy::key_chunks ? plan.chunks : 0};
    Kokkos::parallel_for("kattn::backward::sum_dq", Policy(space, sum.league_size(), Kokkos::AUTO), sum);
  }
  dbias.finish();
  compat::fence(space, "kattn::backward: the workspace is freed on return");
  if (opt.progress) report_progress(opt, 1.0);  // the sum of dQ partials, or the one launch of each pass
  return info;
}

// backward_impl once p carries its ALiBi slopes.
template <class ExecSpace, class T>
BackwardInfo backward_of_mask(const ExecSpace& space, const BackwardParams<T>& p, const Options& opt,
                              const BackwardOptions& bopt) {
  if (!opt.block_mask) return backward_kernels(space, p, opt, bopt, BlockSparse{});
  // Under a block mask: tiles aligned to its blocks, as the forward's.
  const BlockMask& mask = *opt.block_mask;
  const AttentionParams<T>& f = p.fwd;
  check_block_mask(mask, f.heads_q, f.q_len, f.kv_len);
  const BackwardPlan dense = plan_backward<ExecSpace, T>(space, f.batch, f.heads_kv, f.group_size(), f.head_dim,
                                                         f.q_len, f.kv_len, f.q_total, opt, bopt);
  const Options topt = aligned_options(opt, mask.block(), f.group_size(), f.q_len, f.kv_len, dense.geo.block_q,
                                       dense.geo.block_k);
  const DeviceMask<ExecSpace> dm(mask, opt.workspace);
  return backward_kernels(space, p, topt, bopt, dm.bs);  // fenced: the mask copy outlives the kernels
}

}  // namespace

template <class ExecSpace, class T>
BackwardInfo backward_impl(const ExecSpace& space, const BackwardParams<T>& p, const Options& opt,
                           const BackwardOptions& bopt) {
  require_bias(opt, p.fwd);
  require_bias_gradient(opt, bopt.dbias);
  return with_alibi(space, p.fwd, opt, [&](const AttentionParams<T>& fwd) {
    BackwardParams<T> with_slopes = p;
    with_slopes.fwd = fwd;
    return backward_of_mask(space, with_slopes, opt, bopt);
  });
}

#define KATTN_INSTANTIATE_BACKWARD(Space, T)                                                            \
  template BackwardInfo backward_impl<Space, T>(const Space&, const BackwardParams<T>&, const Options&, \
                                                const BackwardOptions&);
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_BACKWARD)

}  // namespace detail
}  // namespace kattn
