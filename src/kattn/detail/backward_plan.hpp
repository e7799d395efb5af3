// Tiles and dQ strategy of the backward pass. Two tile layouts share one (block_q, block_k):
//
//   key pass (one team per key tile, streaming query tiles): S = Q K^T and dP = dO V^T are
//     rows x keys with the keys as vector lanes (the wide micro-tile: R x wide J); dV += P^T dO,
//     dK += dS^T Q (and dQ += dS K) have the head dim as lanes (the tall one: tall R x J). So keys
//     are padded to wide J and tall R, dims to J, rows to R and tall R.
//   query pass (one team per query tile, streaming key tiles; the forward's layout): S^T = K Q^T,
//     dP^T = V dO^T and dQ^T += K^T dS^T have the query rows as lanes.
//
// Every product is one outer-product micro-kernel call with contiguous B and C rows
// (tile_gemm.hpp); transposes are strides of A or a transposed copy made once per team tile.
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>

#include "kattn/backward_options.hpp"
#include "kattn/detail/tile_geometry.hpp"
#include "kattn/detail/tile_search.hpp"
#include "kattn/detail/tile_sizes.hpp"
#include "kattn/detail/tuning.hpp"
#include "kattn/errors.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace detail {

// The micro-tile shapes the backward's products use (tuning.hpp): R x J (the query pass), the
// key pass's R x wide_j (keys on the lanes) and tall_r x J (head dim on the lanes).
struct BackwardMicroTiles {
  int r = 4, j = 4, tall_r = 4, wide_j = 4;
  constexpr int key_pass_rows() const { return std::lcm(r, tall_r); }
  constexpr int key_pass_keys() const { return std::lcm(wide_j, tall_r); }
};

struct BackwardGeometry {
  int block_q = 0, block_k = 0, head_dim = 0;
  // Key pass: rows padded to R and tall R (M of S, dP and dQ); keys to wide J and tall R (the lanes
  // of S and dP, M of dK and dV); dims to J (the lanes of dK, dV and dQ).
  int kp_rows = 0, kp_keys = 0, kp_dims = 0;
  // Query pass: rows padded to micro columns (lanes); keys and dims to micro rows.
  int qp_rows = 0, qp_keys = 0, qp_dims = 0;
  bool bias_tile = false;  // the query pass stages a tile of Options::bias (keys x rows)

  static BackwardGeometry make(int block_q, int block_k, int head_dim, const BackwardMicroTiles& m) {
    BackwardGeometry g;
    g.block_q = block_q;
    g.block_k = block_k;
    g.head_dim = head_dim;
    g.kp_rows = round_up(block_q, m.key_pass_rows());
    g.kp_keys = round_up(block_k, m.key_pass_keys());
    g.kp_dims = round_up(head_dim, m.j);
    g.qp_rows = round_up(block_q, m.j);
    g.qp_keys = round_up(block_k, m.r);
    g.qp_dims = round_up(head_dim, m.r);
    return g;
  }

  // Key pass scratch, in carve order: K^T and V^T (D x keys), K (keys x dims, when the team
  // adds dQ), dK and dV (keys x dims), Q and dO (rows x dims), S/P and dP/dS (rows x keys), a
  // dQ tile (rows x dims, when the team adds dQ), lse2 and D per row.
  KOKKOS_INLINE_FUNCTION std::size_t key_pass_elements(bool raw_k, bool dq_tile) const {
    const std::size_t kd = std::size_t(kp_keys) * kp_dims, rd = std::size_t(kp_rows) * kp_dims;
    const std::size_t rk = std::size_t(kp_rows) * kp_keys;
    return 2 * std::size_t(head_dim) * kp_keys + (raw_k ? kd : 0) + 2 * kd + 2 * rd + 2 * rk + (dq_tile ? rd : 0) +
           2 * std::size_t(kp_rows);
  }
  // The same with bf16 pairs (backward_key_pass.hpp's carve_pairs), in 4-byte elements: K^T and
  // V^T as pairs of dims (dims / 2 x keys), K as pairs of keys (when the team adds dQ), dK and dV,
  // Q and dO as pairs of dims and as pairs of rows, S/P and dP/dS, P and dS as pairs of rows,
  // dS as pairs of keys and the dQ tile (when the team adds dQ), lse2 and D per row.
  KOKKOS_INLINE_FUNCTION std::size_t key_pass_pair_elements(bool raw_k, bool dq_tile) const {
    const std::size_t kd = std::size_t(kp_keys) * kp_dims, rd = std::size_t(kp_rows) * kp_dims;
    const std::size_t rk = std::size_t(kp_rows) * kp_keys;
    return kd + (raw_k ? kd / 2 : 0) + 2 * kd + 2 * rd + 2 * rk + rk + (dq_tile ? rk / 2 + rd : 0) +
           2 * std::size_t(kp_rows);
  }
  // Query pass scratch: Q^T and dO^T (D x rows), dQ^T (dims x rows), K and V copies (keys x dims,
  // when not read in place), S^T/P^T and dP^T/dS^T (keys x rows), lse2, D and ALiBi's slope and
  // diagonal per row, then the bias tile (keys x rows) when bias_tile.
  KOKKOS_INLINE_FUNCTION std::size_t query_pass_elements() const {
    return 2 * std::size_t(head_dim) * qp_rows + std::size_t(qp_dims) * qp_rows + 2 * std::size_t(qp_keys) * qp_dims +
           (bias_tile ? 3 : 2) * std::size_t(qp_keys) * qp_rows + 4 * std::size_t(qp_rows);
  }
};

template <class ExecSpace, class T>
constexpr BackwardMicroTiles backward_micro_tiles() {
  using Tn = Tuning<ExecSpace, T>;
  return {Tn::micro_rows, Tn::micro_cols, Tn::tall_micro_rows, Tn::wide_micro_cols};
}

struct BackwardPlan {
  BackwardGeometry geo;
  DqStrategy dq = DqStrategy::key_chunks;
  bool deterministic = true;  // of the chosen strategy
  int chunks = 1;             // key-pass teams per (sequence, KV head)
  int key_tiles = 0;          // of the longest sequence
  int row_tiles = 0;          // query tiles of the longest sequence (rows = positions x group)
  std::int64_t ws_rows = 0;   // rows per KV head of the row-indexed workspaces
  int key_scratch_level = 0, query_scratch_level = 0;
  std::size_t key_scratch_bytes = 0, query_scratch_bytes = 0;
  std::size_t workspace_bytes = 0;  // D and lse2 arrays, dQ partials of chunks 1 .. chunks - 1
};

template <class ExecSpace, class T>
BackwardPlan plan_backward(const ExecSpace& space, int batch, int heads_kv, int group, int head_dim,
                           std::int64_t q_len, std::int64_t kv_len, std::int64_t q_total, const Options& opt,
                           const BackwardOptions& bopt) {
  using Tn = Tuning<ExecSpace, T>;
  using ScratchBuffer = Kokkos::View<T*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  BackwardPlan plan;

  // Strategy first: it decides what the key pass keeps in scratch.
  KATTN_REQUIRE(!(bopt.deterministic && bopt.dq == DqStrategy::atomic),
                "dq: the atomic strategy is not deterministic; choose key_chunks or query_pass, or drop deterministic");
  KATTN_REQUIRE(bopt.dq_chunks >= 0, "dq_chunks: expected a chunk count >= 1 or 0 (planned), got ", bopt.dq_chunks);
  plan.dq = bopt.dq;
  if (plan.dq == DqStrategy::automatic) {
    if (Tn::host)
      plan.dq = DqStrategy::key_chunks;
    else
      plan.dq = bopt.deterministic ? DqStrategy::query_pass : DqStrategy::atomic;
  }
  plan.deterministic = plan.dq != DqStrategy::atomic;
  const bool raw_k = plan.dq != DqStrategy::query_pass;
  const bool dq_tile = raw_k;  // dQ = dS K of the tile, then added to memory

  const auto geometry = [&](int bq, int bk) {
    BackwardGeometry g = BackwardGeometry::make(bq, bk, head_dim, backward_micro_tiles<ExecSpace, T>());
    g.bias_tile = opt.bias.active() && plan.dq == DqStrategy::query_pass;
    return g;
  };
  const auto bytes = [&](int bq, int bk) {
    const BackwardGeometry g = geometry(bq, bk);
    const std::size_t key = ScratchBuffer::shmem_size(g.key_pass_elements(raw_k, dq_tile));
    const std::size_t query = plan.dq == DqStrategy::query_pass ? ScratchBuffer::shmem_size(g.query_pass_elements()) : 0;
    return std::max(key, query);
  };
  const std::size_t level0 = scratch_limit(space, 0);
  const std::size_t level1 = scratch_limit(space, 1);
  int bq = opt.block_q, bk = opt.block_k;
  if (bq == 0 || bk == 0) {
    const std::size_t budget = Tn::host ? Tn::backward_host_scratch_budget : level1;  // as plan_tiles()
    const std::int64_t rows = std::max<std::int64_t>(q_len * group, 1);
    const int rows_cap = static_cast<int>(std::min<std::int64_t>(rows, 1 << 20));
    const int keys_cap = static_cast<int>(std::min<std::int64_t>(std::max<std::int64_t>(kv_len, 1), 1 << 20));
    TileSearch search;
    search.fixed_q = bq;
    search.fixed_k = bk;
    const BackwardMicroTiles m = backward_micro_tiles<ExecSpace, T>();
    search.step_q = m.key_pass_rows();
    search.step_k = m.key_pass_keys();
    search.start_q = std::min(Tn::backward_block_q, round_up(rows_cap, search.step_q));
    search.start_k = std::min(Tn::backward_block_k, round_up(keys_cap, search.step_k));
    search.largest_area = !Tn::host;
    const TileSize t = fit_tiles(bytes, budget, search);
    bq = t.block_q;
    bk = t.block_k;
  }
  plan.geo = geometry(bq, bk);
  const std::size_t need = bytes(bq, bk);
  KATTN_REQUIRE(need <= level1, "block_q/block_k: backward tiles of ", bq, " query rows x ", bk, " keys at head dim ",
                head_dim, " need ", need, " bytes of scratch, more than the ", level1,
                " bytes the execution space offers; shrink block_q or block_k");
  plan.key_scratch_bytes = ScratchBuffer::shmem_size(plan.geo.key_pass_elements(raw_k, dq_tile));
  plan.query_scratch_bytes = ScratchBuffer::shmem_size(plan.geo.query_pass_elements());
  plan.key_scratch_level = plan.key_scratch_bytes <= level0 ? 0 : 1;
  plan.query_scratch_level = plan.query_scratch_bytes <= level0 ? 0 : 1;

  plan.key_tiles = static_cast<int>((kv_len + bk - 1) / bk);
  plan.row_tiles = static_cast<int>((q_len * group + bq - 1) / bq);
  if (plan.dq == DqStrategy::key_chunks) {
    // Enough teams to fill a node when the batch has few heads, never more than the key tiles,
    // and at most backward_max_dq_chunks chunks. Depends on the problem only, so the
    // result is the same for every thread count.
    const int teams = static_cast<int>(
        std::min<std::int64_t>(INT32_MAX, std::max<std::int64_t>(1, std::int64_t(batch) * heads_kv)));
    int c = bopt.dq_chunks ? bopt.dq_chunks
                           : std::min(Tn::backward_max_dq_chunks, (Tn::backward_target_teams + teams - 1) / teams);
    plan.chunks = std::max(1, std::min(c, std::max(plan.key_tiles, 1)));
  } else {
    plan.chunks = std::max(plan.key_tiles, 1);
  }
  // Row-indexed workspaces: per KV head, the rows (positions x group) of every sequence.
  plan.ws_rows = q_total * group;
  const std::size_t rows = std::size_t(heads_kv) * plan.ws_rows;
  plan.workspace_bytes = 2 * rows * sizeof(T);
  // Chunk 0 adds straight into dQ: one chunk needs no partials.
  if (plan.dq == DqStrategy::key_chunks)
    plan.workspace_bytes += std::size_t(plan.chunks - 1) * rows * plan.geo.kp_dims * sizeof(T);
  return plan;
}

}  // namespace detail
}  // namespace kattn
