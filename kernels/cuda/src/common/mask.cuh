// The mask rule shared by the forward kernels, at the granularity of tiles.
//   causal, bottom-right aligned: query i sees key j iff j <= i + Nk - Nq.
// Tiles run from the highest key tile down to 0, so only the first few visited tiles
// can need an element-wise mask (the diagonal and the ragged end of the keys).
#pragma once

namespace kattn::cuda::detail {

struct TileRange {
  int n_end;  // key tiles [0, n_end) are visited; 0 = the whole query tile sees no key
};

// Number of key tiles visited by the query tile [m0, m0 + block_m).
__host__ __device__ __forceinline__ int key_tile_end(int m0, int block_m, int block_n, int nq, int nk,
                                                     bool causal) {
  const int n_tiles = (nk + block_n - 1) / block_n;
  if (!causal) return n_tiles;
  const int last_row = min(m0 + block_m, nq) - 1;
  const int last_key = last_row + nk - nq;  // last visible key of the last row
  if (last_key < 0) return 0;
  return min(n_tiles, last_key / block_n + 1);
}

// True when tile n needs the element-wise mask for query rows [m0, m0 + block_m).
__host__ __device__ __forceinline__ bool tile_needs_mask(int n, int m0, int block_n, int nq, int nk,
                                                         bool causal) {
  const int last_col = (n + 1) * block_n - 1;
  if (last_col >= nk) return true;
  return causal && last_col > m0 + nk - nq;
}

// Whether key col is visible from query row (both absolute indices).
__device__ __forceinline__ bool visible(int row, int col, int nq, int nk, bool causal) {
  return col < nk && (!causal || col <= row + nk - nq);
}

}  // namespace kattn::cuda::detail
