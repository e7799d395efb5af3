// Tile sizes of the tiled kernels and the scratch they need: logical sizes (what the user or
// the planner chose) and the padded sizes the micro-kernels work on (zero-filled).
#pragma once

#include <cstddef>

namespace kattn {
namespace detail {

constexpr int round_up(int x, int m) { return (x + m - 1) / m * m; }

struct TileGeometry {
  int block_q = 0;  // query rows per tile
  int block_k = 0;  // keys per tile
  int rows_p = 0;   // block_q rounded up to the micro-tile rows
  int keys_p = 0;   // block_k rounded up to the micro-tile columns
  int dim_p = 0;    // head dim rounded up to the micro-tile columns

  static TileGeometry make(int block_q, int block_k, int head_dim, int micro_rows, int micro_cols) {
    TileGeometry g;
    g.block_q = block_q;
    g.block_k = block_k;
    g.rows_p = round_up(block_q, micro_rows);
    g.keys_p = round_up(block_k, micro_cols);
    g.dim_p = round_up(head_dim, micro_cols);
    return g;
  }

  // Q and O tiles (rows x dim), K^T and V tiles (dim x keys, keys x dim), S (rows x keys),
  // and three row vectors (m, l, rescale factor).
  std::size_t scratch_elements() const {
    const std::size_t r = rows_p, k = keys_p, d = dim_p;
    return 2 * r * d + 2 * d * k + r * k + 3 * r;
  }
};

}  // namespace detail
}  // namespace kattn
