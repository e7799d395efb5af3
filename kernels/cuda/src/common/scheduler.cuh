// Tile scheduler of the forward kernels: which (query tile, head, batch) a CTA computes.
// Grid = (query tiles, Hq, B); blockIdx.x runs fastest, so CTAs of one head run together
// and share its K/V in L2. Causal grids visit the longest query tiles (the last rows see
// the most keys) first, so the tail of the grid is made of short tiles.
#pragma once

namespace kattn::cuda::detail {

struct FwdTile {
  int m_block, h, b;
};

template <bool kCausal>
__device__ __forceinline__ FwdTile fwd_tile() {
  const int m = kCausal ? int(gridDim.x) - 1 - int(blockIdx.x) : int(blockIdx.x);
  return FwdTile{m, int(blockIdx.y), int(blockIdx.z)};
}

}  // namespace kattn::cuda::detail
