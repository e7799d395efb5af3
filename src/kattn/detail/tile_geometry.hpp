// Tile sizes of the tiled kernels and the scratch they need. The kernels work on transposed
// tiles, query rows last: S^T (keys x rows) = K Q^T and O^T (dims x rows) += V^T P^T, so the
// query rows are the vector lanes of both products and of the softmax. Logical sizes are what
// the user or the planner chose; padded sizes are what the micro-kernels see (zero-filled).
#pragma once

#include <Kokkos_Macros.hpp>

#include <cstddef>

namespace kattn {
namespace detail {

constexpr int round_up(int x, int m) { return (x + m - 1) / m * m; }
constexpr int round_down(int x, int m) { return x / m * m; }

struct TileGeometry {
  int block_q = 0;   // query rows per tile
  int block_k = 0;   // keys per tile
  int head_dim = 0;  // D
  int rows_p = 0;    // block_q rounded up to the micro-tile columns (vector lanes)
  int keys_p = 0;    // block_k rounded up to the micro-tile rows
  int dims_p = 0;    // head dim rounded up to the micro-tile rows

  static TileGeometry make(int block_q, int block_k, int head_dim, int micro_rows, int micro_cols) {
    TileGeometry g;
    g.block_q = block_q;
    g.block_k = block_k;
    g.head_dim = head_dim;
    g.rows_p = round_up(block_q, micro_cols);
    g.keys_p = round_up(block_k, micro_rows);
    g.dims_p = round_up(head_dim, micro_rows);
    return g;
  }

  // Elements of each scratch array, in the order the kernel carves them.
  KOKKOS_INLINE_FUNCTION std::size_t q_elements() const { return std::size_t(head_dim) * rows_p; }  // Q^T
  KOKKOS_INLINE_FUNCTION std::size_t o_elements() const { return std::size_t(dims_p) * rows_p; }    // O^T
  KOKKOS_INLINE_FUNCTION std::size_t k_elements() const { return std::size_t(keys_p) * head_dim; }  // K tile
  KOKKOS_INLINE_FUNCTION std::size_t v_elements() const { return std::size_t(keys_p) * dims_p; }    // V tile
  KOKKOS_INLINE_FUNCTION std::size_t s_elements() const { return std::size_t(keys_p) * rows_p; }    // S^T, then P^T
  // ... and four row vectors: m, l, the tile's rescale factor, the tile's max.
  KOKKOS_INLINE_FUNCTION std::size_t scratch_elements() const {
    return q_elements() + o_elements() + k_elements() + v_elements() + s_elements() + 4 * std::size_t(rows_p);
  }
};

}  // namespace detail
}  // namespace kattn
