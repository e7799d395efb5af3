// Launch of the tiled attention kernel (and, for splits > 1, the merge) for one validated
// problem. Included by the .cpp files that instantiate it, not by users.
#pragma once

#include <Kokkos_Core.hpp>

#include <cmath>
#include <string>

#include "kattn/compat.hpp"
#include "kattn/detail/merge_partials.hpp"
#include "kattn/detail/tiled_attention.hpp"
#include "kattn/mask.hpp"
#include "kattn/options.hpp"
#include "kattn/params.hpp"
#include "kattn/state.hpp"
#include "kattn/tiles.hpp"

namespace kattn {
namespace detail {

template <class ExecSpace, class T>
TiledAttention<ExecSpace, T> make_tiled_kernel(const ExecSpace& space, const AttentionParams<T>& p,
                                               const Options& opt) {
  TiledAttention<ExecSpace, T> kern;
  kern.p = p;
  kern.window = KeyWindow::from(opt);
  const double scale = opt.scale != 0.0 ? opt.scale : 1.0 / std::sqrt(static_cast<double>(p.head_dim));
  if (opt.softcap > 0.0) {
    kern.q_scale = static_cast<T>(scale);
    kern.cap_log2 = static_cast<T>(opt.softcap * kLog2e);
    kern.inv_cap = static_cast<T>(1.0 / opt.softcap);
  } else {
    kern.q_scale = static_cast<T>(scale * kLog2e);
  }
  const TilePlan plan = plan_tiles<ExecSpace, T>(space, p.head_dim, p.q_len * p.group_size(), opt);
  kern.geo = plan.geometry;
  kern.scratch_level = plan.scratch_level;
  const std::int64_t rows = p.q_len * p.group_size();
  kern.row_tiles = static_cast<int>((rows + kern.geo.block_q - 1) / kern.geo.block_q);
  if (kern.row_tiles == 0) kern.row_tiles = 1;
  return kern;
}

// Attention over the keys of each sequence in `splits` chunks (1: the plain tiled forward).
// `name` labels the kernels for Kokkos Tools ("kattn::forward").
template <class ExecSpace, class T>
void run_attention(const ExecSpace& space, const AttentionParams<T>& p, const Options& opt, int splits,
                   const std::string& name) {
  compat::ScopedRegion region(name);
  if (p.batch == 0 || p.q_len == 0 || p.heads_q == 0) return;
  TiledAttention<ExecSpace, T> kern = make_tiled_kernel(space, p, opt);
  kern.splits = splits;
  Kokkos::View<T*, typename ExecSpace::memory_space> part_o, part_lse;
  if (splits > 1) {
    // Rows of the workspace: every (query row, head) of the batch.
    kern.ws.rows = p.q_total * p.heads_q;
    part_o = Kokkos::View<T*, typename ExecSpace::memory_space>(
        Kokkos::view_alloc(space, Kokkos::WithoutInitializing, name + "::partial_o"),
        static_cast<std::size_t>(splits * kern.ws.rows * p.head_dim));
    part_lse = Kokkos::View<T*, typename ExecSpace::memory_space>(
        Kokkos::view_alloc(space, Kokkos::WithoutInitializing, name + "::partial_lse"),
        static_cast<std::size_t>(splits * kern.ws.rows));
    kern.ws.o = part_o.data();
    kern.ws.lse = part_lse.data();
  }
  using Tn = Tuning<ExecSpace, T>;
  Kokkos::TeamPolicy<ExecSpace> policy(space, kern.league_size(), Tn::team_size);
  policy.set_scratch_size(kern.scratch_level, Kokkos::PerTeam(kern.scratch_bytes()));
  Kokkos::parallel_for(name + "::tile", policy, kern);
  if (splits > 1) {
    MergePartials<ExecSpace, T> merge_kern{p, kern.ws, splits};
    Kokkos::parallel_for(name + "::merge", Kokkos::TeamPolicy<ExecSpace>(space, merge_kern.league_size(), Kokkos::AUTO),
                         merge_kern);
  }
}

}  // namespace detail
}  // namespace kattn
