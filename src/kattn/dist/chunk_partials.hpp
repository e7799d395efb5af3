// Finished partial states of query rows over consecutive fixed-size key chunks: the tiled kernel
// with one split per chunk writing (o / l, lse) to a workspace, without merging. The building
// block of the deterministic mode: a chunk's partial for a query row depends only on that row,
// the chunk's keys, block_k and the mask (the kernel's per-row arithmetic does not depend on
// which rows share a tile, and tiles start at the chunk start), so it has the same bits on every
// rank count. Always the TiledAttention kernel, whatever run_attention would pick for the shape.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>

#include "kattn/detail/launch.hpp"
#include "kattn/detail/tiled_attention.hpp"
#include "kattn/detail/tuning.hpp"
#include "kattn/options.hpp"
#include "kattn/params.hpp"

namespace kattn {
namespace dist {
namespace detail {

// p: the queries against the keys of `chunks` consecutive chunks of `chunk` keys (the last may
// be short; p.kv_len covers them all), mask placed by opt.diagonal_shift. Writes partial s of
// row (b, i, h) at ws_o[((s * rows) + (b * q_len + i) * heads_q + h) * D], ws_lse[s * rows + ...],
// rows = batch * q_len * heads_q. opt.block_k must be set (the deterministic block size).
template <class ExecSpace, class T>
void chunk_partials(const ExecSpace& space, const AttentionParams<T>& p, const Options& opt, int chunks,
                    std::int64_t chunk, T* ws_o, T* ws_lse) {
  if (p.batch == 0 || p.q_len == 0 || chunks == 0) return;
  kattn::detail::TiledAttention<ExecSpace, T> kern = kattn::detail::make_tiled_kernel(space, p, opt);
  kern.splits = chunks;
  kern.chunk = chunk;
  kern.ws.rows = p.q_total * p.heads_q;
  kern.ws.o = ws_o;
  kern.ws.lse = ws_lse;
  Kokkos::TeamPolicy<ExecSpace> policy = kattn::detail::team_policy<ExecSpace, T>(space, kern.league_size(), kern);
  policy.set_scratch_size(kern.scratch_level, Kokkos::PerTeam(kern.scratch_bytes()));
  Kokkos::parallel_for("kattn::dist::chunk_partials", policy, kern);
}

// The key tile size of the deterministic mode: opt.block_k, or what the planner picks for the
// whole (global) problem, so every rank count uses the same.
template <class ExecSpace, class T>
int deterministic_block_k(const ExecSpace& space, int head_dim, std::int64_t global_query_rows, const Options& opt) {
  if (opt.block_k > 0) return opt.block_k;
  return plan_tiles<ExecSpace, T>(space, head_dim, global_query_rows, opt).geometry.block_k;
}

}  // namespace detail
}  // namespace dist
}  // namespace kattn
