// Epilogue of the sm90 forward kernel: the finished state (core/state.hpp: o / l, lse; empty
// rows -> 0 and -inf), stage the warpgroup's 64 x D bf16/f16 tile in its own half of the Q
// buffer (no longer read once the last S = Q K^T has completed), then 16-byte coalesced
// stores. Staging uses the same 128-B swizzle as TMA (chunk c of row r at c ^ (r % 8)): the
// 4-byte fragment writes of a warp (8 rows x 4 lanes) then hit 32 distinct banks.
#pragma once

#include <kattn/cuda/params.hpp>

#include <cstdint>

#include "../common/numeric.cuh"
#include "../common/ptx.cuh"
#include "kattn/core/state.hpp"
#include "ptx_sm90.cuh"

namespace kattn::cuda::detail::sm90 {

template <class Tr, bool kBF16, class T>
__device__ __forceinline__ void store_tile(float (&o)[Tr::kHeadDim / 2], const Finish<float> (&fin)[2],
                                          uint8_t* smem_q, const ForwardParams& p, T* go, int h, int b, int m0,
                                          int wg, int wt) {
  constexpr int D = Tr::kHeadDim;
  const int warp = wt / 32, lane = wt % 32;

  // LSE of this thread's two rows (one lane per quad writes).
  if (p.lse != nullptr && lane % 4 == 0) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int row = m0 + wg * 64 + warp * 16 + lane / 4 + 8 * hf;
      if (row < p.seqlen_q)
        p.lse[(int64_t(b) * p.heads_q + h) * p.seqlen_q + row] = fin[hf].lse;
    }
  }

  fence_proxy_async_smem();  // the buffer was last touched by the async proxy (TMA, wgmma)
#pragma unroll
  for (int i = 0; i < D / 2; i += 2) {
    const int hf = (i / 2) % 2;
    const int r = wg * 64 + warp * 16 + lane / 4 + 8 * hf;  // row inside the 128-row tile
    const int col = 8 * (i / 4) + 2 * (lane % 4);
    const int region = col / 64, chunk = (col % 64) / 8;
    uint8_t* dst = smem_q + region * Tr::kQRegionBytes + r * 128 + ((chunk ^ (r % 8)) * 16) + (col % 8) * 2;
    *reinterpret_cast<uint32_t*>(dst) = pack2<kBF16>(finished_o(o[i], fin[hf]), finished_o(o[i + 1], fin[hf]));
  }
  named_bar_sync(Tr::kBarEpilogue0 + wg, 128);

  constexpr int kChunks = D / 8;
#pragma unroll 4
  for (int idx = wt; idx < 64 * kChunks; idx += 128) {
    const int rl = idx / kChunks, c = idx % kChunks;
    const int r = wg * 64 + rl;
    const int row = m0 + r;
    if (row >= p.seqlen_q) continue;
    const uint8_t* src = smem_q + (c / 8) * Tr::kQRegionBytes + r * 128 + (((c % 8) ^ (r % 8)) * 16);
    *reinterpret_cast<uint4*>(go + int64_t(row) * p.o_seq_stride + c * 8) = *reinterpret_cast<const uint4*>(src);
  }
}

// A query tile that sees no key: o = 0, lse = -inf (no shared memory involved).
template <class Tr, class T>
__device__ __forceinline__ void store_empty(const ForwardParams& p, T* go, int h, int b, int m0, int wg, int wt) {
  constexpr int kChunks = Tr::kHeadDim / 8;
  for (int idx = wt; idx < 64 * kChunks; idx += 128) {
    const int row = m0 + wg * 64 + idx / kChunks, c = idx % kChunks;
    if (row < p.seqlen_q) *reinterpret_cast<uint4*>(go + int64_t(row) * p.o_seq_stride + c * 8) = make_uint4(0, 0, 0, 0);
  }
  if (p.lse != nullptr)
    for (int rl = wt; rl < 64; rl += 128) {
      const int row = m0 + wg * 64 + rl;
      if (row < p.seqlen_q) p.lse[(int64_t(b) * p.heads_q + h) * p.seqlen_q + row] = -INFINITY;
    }
}

}  // namespace kattn::cuda::detail::sm90
