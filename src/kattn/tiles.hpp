// Tile sizes: chosen from the execution space's scratch limit (GPUs) or a cache budget (CPUs)
// and the head dim when the options leave them at 0; checked against the limit when given.
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kattn/detail/tile_geometry.hpp"
#include "kattn/detail/tuning.hpp"
#include "kattn/errors.hpp"
#include "kattn/options.hpp"

namespace kattn {

struct TilePlan {
  detail::TileGeometry geometry;
  int scratch_level = 0;  // 0 when the tiles fit the fast level, else 1
  std::size_t scratch_bytes = 0;
};

namespace detail {

template <class ExecSpace>
std::size_t scratch_limit(const ExecSpace& space, int level) {
  Kokkos::TeamPolicy<ExecSpace> policy(space, 1, Kokkos::AUTO);
  return static_cast<std::size_t>(policy.scratch_size_max(level));
}

}  // namespace detail

// Tiles for head_dim, for a problem whose longest sequence has `query_rows` rows (positions
// times the GQA group): small problems get one small tile rather than padding.
template <class ExecSpace, class T>
TilePlan plan_tiles(const ExecSpace& space, int head_dim, std::int64_t query_rows, const Options& opt) {
  using Tn = detail::Tuning<ExecSpace, T>;
  const std::size_t level0 = detail::scratch_limit(space, 0);
  const std::size_t level1 = detail::scratch_limit(space, 1);
  using ScratchBuffer = Kokkos::View<T*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  const auto bytes = [&](int bq, int bk) {
    return ScratchBuffer::shmem_size(
        detail::TileGeometry::make(bq, bk, head_dim, Tn::micro_rows, Tn::micro_cols).scratch_elements());
  };
  int bq = opt.block_q, bk = opt.block_k;
  KATTN_REQUIRE(bq >= 0, "block_q: expected a positive tile size or 0 (automatic), got ", bq);
  KATTN_REQUIRE(bk >= 0, "block_k: expected a positive tile size or 0 (automatic), got ", bk);
  if (bq == 0 || bk == 0) {
    const std::size_t budget = Tn::host ? Tn::host_scratch_budget : level0;
    const int rows_cap = static_cast<int>(std::min<std::int64_t>(std::max<std::int64_t>(query_rows, 1), 1 << 20));
    int auto_q = bq ? bq : std::min(16 * Tn::micro_rows, detail::round_up(rows_cap, Tn::micro_rows));
    int auto_k = bk ? bk : 4 * Tn::micro_cols;
    // Halve the larger automatic tile until the tiles fit the budget.
    while (bytes(auto_q, auto_k) > budget) {
      const bool shrink_q = bq == 0 && (auto_q >= auto_k || bk != 0) && auto_q > Tn::micro_rows;
      const bool shrink_k = bk == 0 && auto_k > Tn::micro_cols;
      if (shrink_q)
        auto_q = std::max(Tn::micro_rows, detail::round_up(auto_q / 2, Tn::micro_rows));
      else if (shrink_k)
        auto_k = std::max(Tn::micro_cols, detail::round_up(auto_k / 2, Tn::micro_cols));
      else
        break;
    }
    bq = auto_q;
    bk = auto_k;
  }
  TilePlan plan;
  plan.geometry = detail::TileGeometry::make(bq, bk, head_dim, Tn::micro_rows, Tn::micro_cols);
  plan.scratch_bytes = bytes(bq, bk);
  KATTN_REQUIRE(plan.scratch_bytes <= level1, "block_q/block_k: tiles of ", bq, " query rows x ", bk,
                " keys at head dim ", head_dim, " need ", plan.scratch_bytes, " bytes of scratch, more than the ",
                level1, " bytes the execution space offers; shrink block_q or block_k");
  plan.scratch_level = plan.scratch_bytes <= level0 ? 0 : 1;
  return plan;
}

}  // namespace kattn
