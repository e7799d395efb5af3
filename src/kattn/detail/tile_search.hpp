// Automatic tile sizes: the one rule by which the forward and backward planners turn a scratch
// budget into (query rows, keys) per tile when the options leave them at 0.
//
// Hosts halve the larger side from a cache-sized start until the tiles fit (the shapes the CPU
// benchmarks chose). Devices search every multiple of the micro-tile up to the caps for the tile
// of largest area (query rows x keys) that fits the budget: the area is the work a team does
// between two barriers, and each K/V and Q tile read from memory is reused over the other side.
// The planners give devices level 1's limit as the budget (tuning.hpp: on the H200 the tiles
// that fit level 0 were several times slower), so the caps bound the tiles unless a fixed side
// or a long head dim makes them too big.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>

#include "kattn/detail/tile_geometry.hpp"

namespace kattn {
namespace detail {

struct TileSearch {
  int fixed_q = 0, fixed_k = 0;  // sizes the options fix (0 = automatic)
  int start_q = 1, start_k = 1;  // the largest automatic sizes, already cut to the problem
  int step_q = 1, step_k = 1;    // automatic sizes are multiples of these (the micro-tile)
  bool largest_area = false;     // devices: search; hosts: halve
};

struct TileSize {
  int block_q = 0, block_k = 0;
};

// bytes(block_q, block_k): the scratch the tiles need. Returns the chosen sizes; when nothing fits
// the budget, the smallest (the planner's level-1 check then speaks).
template <class Bytes>
TileSize fit_tiles(const Bytes& bytes, std::size_t budget, const TileSearch& s) {
  if (!s.largest_area) {
    int q = s.fixed_q ? s.fixed_q : s.start_q, k = s.fixed_k ? s.fixed_k : s.start_k;
    while (bytes(q, k) > budget) {
      const bool shrink_q = s.fixed_q == 0 && (q >= k || s.fixed_k != 0) && q > s.step_q;
      const bool shrink_k = s.fixed_k == 0 && k > s.step_k;
      if (shrink_q)
        q = std::max(s.step_q, round_up(q / 2, s.step_q));
      else if (shrink_k)
        k = std::max(s.step_k, round_up(k / 2, s.step_k));
      else
        break;
    }
    return {q, k};
  }
  const int q0 = s.fixed_q ? s.fixed_q : s.step_q, q1 = s.fixed_q ? s.fixed_q : std::max(s.start_q, s.step_q);
  const int k0 = s.fixed_k ? s.fixed_k : s.step_k, k1 = s.fixed_k ? s.fixed_k : std::max(s.start_k, s.step_k);
  const int dq = s.fixed_q ? 1 : s.step_q, dk = s.fixed_k ? 1 : s.step_k;
  TileSize best{q0, k0};
  long best_area = -1;
  for (int q = q0; q <= q1; q += dq)
    for (int k = k0; k <= k1; k += dk) {
      if (bytes(q, k) > budget) break;  // bytes grow with k
      const long area = long(q) * k;
      const bool better = area > best_area ||
                          (area == best_area && (std::abs(q - k) < std::abs(best.block_q - best.block_k) ||
                                                 (std::abs(q - k) == std::abs(best.block_q - best.block_k) && q > best.block_q)));
      if (better) {
        best = {q, k};
        best_area = area;
      }
    }
  return best;
}

}  // namespace detail
}  // namespace kattn
