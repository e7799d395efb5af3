// The mask rule of the forward kernels, at the granularity of tiles, on the library's one key
// window (kattn/core/key_window.hpp). The kernels take causal (bottom-right aligned: query i sees
// key j iff j <= i + Nk - Nq) or no mask. Tiles run from the highest key tile down to 0, so only
// the first few visited tiles can need an element-wise mask (the diagonal and the ragged end of
// the keys).
#pragma once

#include "kattn/core/key_window.hpp"

namespace kattn::cuda::detail {

__host__ __device__ __forceinline__ KeyWindow key_window(bool causal) { return causal ? KeyWindow::causal() : KeyWindow{}; }

// Number of key tiles visited by the query tile [m0, m0 + block_m): tiles [0, n_end).
__host__ __device__ __forceinline__ int key_tile_end(int m0, int block_m, int block_n, int nq, int nk,
                                                     bool causal) {
  const int n_tiles = (nk + block_n - 1) / block_n;
  const int last_row = min(m0 + block_m, nq) - 1;
  const int64_t last_key = key_window(causal).last(last_row, nq, nk);  // of the last row
  if (last_key < 0) return 0;
  return min(n_tiles, int(last_key / block_n) + 1);
}

// True when tile n needs the element-wise mask for query rows [m0, m0 + block_m).
__host__ __device__ __forceinline__ bool tile_needs_mask(int n, int m0, int block_n, int nq, int nk,
                                                         bool causal) {
  const int kb = n * block_n;
  if (kb + block_n > nk) return true;  // the ragged end of the keys
  // Without a left bound the tile's first row decides.
  return !key_window(causal).rows_see_whole_tile(m0, m0, kb, block_n, nq, nk);
}

// Whether key col is visible from query row (both absolute indices).
__device__ __forceinline__ bool visible(int row, int col, int nq, int nk, bool causal) {
  return col < nk && key_window(causal).visible(row, col, nq, nk);
}

}  // namespace kattn::cuda::detail
