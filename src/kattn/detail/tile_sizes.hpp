// Tile sizes: chosen from the execution space's scratch limit (GPUs) or a cache budget (CPUs)
// and the head dim when the options leave them at 0; checked against the limit when given.
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kattn/detail/tile_geometry.hpp"
#include "kattn/detail/tile_search.hpp"
#include "kattn/detail/tuning.hpp"
#include "kattn/errors.hpp"
#include "kattn/processors.hpp"
#include "kattn/options.hpp"

namespace kattn {

struct TilePlan {
  detail::TileGeometry geometry;
  int scratch_level = 0;  // 0 when the tiles fit the fast level, else 1
  std::size_t scratch_bytes = 0;
};

// Tiles for head_dim, for a problem whose longest sequence has `query_rows` rows (positions
// times the GQA group): small problems get one small tile rather than padding.
// key_factor: how many times the float tiles' keys a kernel's automatic tiles start from, with
// the budget grown alike (the bf16 pair kernels hold K, V and P in half the bytes: Tuning's
// pair_key_factor).
template <class ExecSpace, class T>
TilePlan plan_tiles(const ExecSpace& space, int head_dim, std::int64_t query_rows, const Options& opt,
                    int key_factor = 1) {
  using Tn = detail::Tuning<ExecSpace, T>;
  const std::size_t level0 = detail::scratch_limit(space, 0);
  const std::size_t level1 = detail::scratch_limit(space, 1);
  using ScratchBuffer = Kokkos::View<T*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  const auto bytes = [&](int bq, int bk) {
    return ScratchBuffer::shmem_size(
        detail::TileGeometry::make(bq, bk, head_dim, Tn::micro_rows, Tn::wide_micro_cols).scratch_elements());
  };
  int bq = opt.block_q, bk = opt.block_k;
  KATTN_REQUIRE(bq >= 0, "block_q: expected a positive tile size or 0 (automatic), got ", bq);
  KATTN_REQUIRE(bk >= 0, "block_k: expected a positive tile size or 0 (automatic), got ", bk);
  if (bq == 0 || bk == 0) {
    // Devices: the tuning's caps wherever they fit level 1 (the level-0 budget gave tiles several
    // times slower on the H200, tuning.hpp); level 0 when they fit it.
    const std::size_t budget = Tn::host ? Tn::host_scratch_budget * key_factor : level1;
    const int rows_cap = static_cast<int>(std::min<std::int64_t>(std::max<std::int64_t>(query_rows, 1), 1 << 20));
    detail::TileSearch search;
    search.fixed_q = bq;
    search.fixed_k = bk;
    search.start_q = std::min(Tn::forward_block_q, detail::round_up(rows_cap, Tn::wide_micro_cols));
    search.start_k = Tn::forward_block_k * key_factor;
    search.step_q = Tn::wide_micro_cols;  // query rows are the products' lanes, keys their micro rows
    search.step_k = Tn::micro_rows;
    search.largest_area = !Tn::host;
    const detail::TileSize t = detail::fit_tiles(bytes, budget, search);
    bq = t.block_q;
    bk = t.block_k;
  }
  TilePlan plan;
  plan.geometry = detail::TileGeometry::make(bq, bk, head_dim, Tn::micro_rows, Tn::wide_micro_cols);
  plan.scratch_bytes = bytes(bq, bk);
  KATTN_REQUIRE(plan.scratch_bytes <= level1, "block_q/block_k: tiles of ", bq, " query rows x ", bk,
                " keys at head dim ", head_dim, " need ", plan.scratch_bytes, " bytes of scratch, more than the ",
                level1, " bytes the execution space offers; shrink block_q or block_k");
  plan.scratch_level = plan.scratch_bytes <= level0 ? 0 : 1;
  return plan;
}

// Query rows per tile of the row tiles (lanes over the head dim, for decode-shaped problems) when
// the execution space has them and the tile is small enough; 0 when the transposed tiles are used.
template <class ExecSpace, class T>
int row_tile_rows(std::int64_t query_rows, const Options& opt) {
  const std::int64_t bq = opt.block_q > 0 ? opt.block_q : query_rows;
  return bq <= detail::Tuning<ExecSpace, T>::row_tile_max_rows ? static_cast<int>(bq) : 0;
}

// KV heads per team of the row tiles: the largest divisor of heads_kv whose Q and O tiles fit the
// tuning's budget (1 where the execution space does not pack heads).
template <class ExecSpace, class T>
int row_tile_heads(int heads_kv, int block_q, int head_dim) {
  using Tn = detail::Tuning<ExecSpace, T>;
  if (!Tn::row_tile_pack_heads) return 1;
  const std::size_t per_head = 2 * std::size_t(block_q) * std::size_t(head_dim) * sizeof(T);
  for (int h = heads_kv; h > 1; --h)
    if (heads_kv % h == 0 && h * per_head <= Tn::row_tile_head_budget) return h;
  return 1;
}
// Work units per KV head group of a row-tile problem whose split the options fix (splits or
// split_chunk), for row_tile_team_heads; 0 when the planner splits the keys, which fills the
// processors itself and balances ragged batches better than unpacking heads would.
inline std::int64_t fixed_split_units(std::int64_t batch, std::int64_t row_tiles, std::int64_t max_kv,
                                      const Options& opt) {
  if (opt.split_chunk > 0)
    return batch * row_tiles * std::max<std::int64_t>(1, (max_kv + opt.split_chunk - 1) / opt.split_chunk);
  if (opt.splits > 0) return batch * row_tiles * opt.splits;
  return 0;
}

// KV heads per team the row-tile kernel runs: the packing above, cut to smaller divisors of it
// while the teams (`units` per head group, from fixed_split_units) leave some of the `procs`
// processors idle: one sequence of 8 KV heads with one split gets a team per host thread. The key
// tiles stay those of the full packing (row_tile_keys of row_tile_heads), so each row's
// arithmetic, and the result, do not depend on the number of processors.
template <class ExecSpace, class T>
int row_tile_team_heads(int heads_kv, int block_q, int head_dim, std::int64_t units, int procs) {
  const int packed = row_tile_heads<ExecSpace, T>(heads_kv, block_q, head_dim);
  int h = packed;
  while (h > 1 && units > 0 && units * (heads_kv / h) < procs) {
    --h;
    while (packed % h != 0) --h;
  }
  return h;
}


// Keys per row tile: the options' block_k, else what keeps the tile's K and V rows (all heads of
// the team) within the tuning's budget, a multiple of `lanes`.
template <class ExecSpace, class T>
int row_tile_keys(int heads, int head_dim, int lanes, const Options& opt) {
  using Tn = detail::Tuning<ExecSpace, T>;
  if (opt.block_k > 0) return opt.block_k;
  const std::size_t row = 2 * std::size_t(heads) * std::size_t(head_dim) * sizeof(T);
  const int keys = static_cast<int>(std::min<std::size_t>(Tn::row_tile_kv_bytes() / row, Tn::row_tile_max_keys));
  return std::max(lanes, keys / lanes * lanes);
}

// Query rows per tile the kernels use, whichever tiles they are.
template <class ExecSpace, class T>
int query_tile_rows(const ExecSpace& space, int head_dim, std::int64_t query_rows, const Options& opt) {
  if (const int bq = row_tile_rows<ExecSpace, T>(query_rows, opt)) return bq;
  return plan_tiles<ExecSpace, T>(space, head_dim, query_rows, opt).geometry.block_q;
}

}  // namespace kattn
