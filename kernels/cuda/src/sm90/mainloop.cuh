// Main loop pieces of the sm90 forward kernel: the TMA producer, the consumers' wgmma
// issue helpers and the pipeline's stage bookkeeping.
//
// Pipeline contract (per stage s of K and of V, separately):
//   full[s]  count 1: the producer's arrive.expect_tx(bytes); TMA completes the bytes.
//   empty[s] count 8: lane 0 of each of the 8 consumer warps arrives once the wgmma that
//            read the stage has completed (after its wgmma.wait_group).
//   Visit `it` uses stage it % kStages with phase parity (it / kStages) & 1; the producer
//   waits empty with the opposite parity (fresh barriers read as "already empty").
#pragma once

#include <kattn/cuda/params.hpp>

#include <cstdint>

#include "ptx_sm90.cuh"
#include "traits.cuh"
#include "wgmma_ops.cuh"

namespace kattn::cuda::detail::sm90 {

struct Stage {
  int index;
  uint32_t phase;
  __device__ __forceinline__ static Stage of(int it, int stages) {
    return Stage{it % stages, uint32_t((it / stages) & 1)};
  }
};

template <class Tr>
struct SmemPlan {
  uint32_t base;  // 1024-B aligned shared address
  __device__ __forceinline__ uint32_t q() const { return base; }
  __device__ __forceinline__ uint32_t k(int s) const { return base + Tr::kOffK + s * Tr::kKVStageBytes; }
  __device__ __forceinline__ uint32_t v(int s) const { return base + Tr::kOffV + s * Tr::kKVStageBytes; }
  __device__ __forceinline__ uint32_t bar_q() const { return base + Tr::kOffBar; }
  __device__ __forceinline__ uint32_t full_k(int s) const { return base + Tr::kOffBar + 8 * (1 + s); }
  __device__ __forceinline__ uint32_t full_v(int s) const { return base + Tr::kOffBar + 8 * (1 + Tr::kStages + s); }
  __device__ __forceinline__ uint32_t empty_k(int s) const {
    return base + Tr::kOffBar + 8 * (1 + 2 * Tr::kStages + s);
  }
  __device__ __forceinline__ uint32_t empty_v(int s) const {
    return base + Tr::kOffBar + 8 * (1 + 3 * Tr::kStages + s);
  }
};

// The producer: one thread. Q once, then K and V of every visited key tile, highest first.
template <class Tr>
__device__ __forceinline__ void produce(const SmemPlan<Tr>& sm, const void* tm_q, const void* tm_k, const void* tm_v,
                                        int h, int hk, int b, int m0, int n_end) {
  constexpr int kR = Tr::kRegions;
  mbar_arrive_expect_tx(sm.bar_q(), Tr::kQBytes);
#pragma unroll
  for (int r = 0; r < kR; ++r) tma_load_4d(sm.q() + r * Tr::kQRegionBytes, tm_q, sm.bar_q(), 64 * r, h, m0, b);
  for (int it = 0; it < n_end; ++it) {
    const int n = n_end - 1 - it;
    const Stage st = Stage::of(it, Tr::kStages);
    mbar_wait(sm.empty_k(st.index), st.phase ^ 1);
    mbar_arrive_expect_tx(sm.full_k(st.index), Tr::kKVStageBytes);
#pragma unroll
    for (int r = 0; r < kR; ++r)
      tma_load_4d(sm.k(st.index) + r * Tr::kKVRegionBytes, tm_k, sm.full_k(st.index), 64 * r, hk, n * Tr::kBlockN, b);
    mbar_wait(sm.empty_v(st.index), st.phase ^ 1);
    mbar_arrive_expect_tx(sm.full_v(st.index), Tr::kKVStageBytes);
#pragma unroll
    for (int r = 0; r < kR; ++r)
      tma_load_4d(sm.v(st.index) + r * Tr::kKVRegionBytes, tm_v, sm.full_v(st.index), 64 * r, hk, n * Tr::kBlockN, b);
  }
}

// S = Q K^T for this warpgroup's 64 rows (Q rows [64*wg, 64*wg + 64) of the tile).
// Descriptors: both operands K-major, 128-B swizzle; k-slice kk (16 head-dim elements)
// is region kk/4, +32 B per slice inside the 128-byte row.
template <class Tr, bool kBF16>
__device__ __forceinline__ void issue_qk(float (&s)[Tr::kBlockN / 2], const SmemPlan<Tr>& sm, int wg, int stage) {
#pragma unroll
  for (int kk = 0; kk < Tr::kHeadDim / 16; ++kk) {
    const uint32_t qa = sm.q() + (kk / 4) * Tr::kQRegionBytes + wg * 64 * 128 + (kk % 4) * 32;
    const uint32_t ka = sm.k(stage) + (kk / 4) * Tr::kKVRegionBytes + (kk % 4) * 32;
    Wgmma<Tr::kBlockN, kBF16>::ss(s, make_desc_sw128(qa, 16, 1024), make_desc_sw128(ka, 16, 1024), kk > 0 ? 1 : 0);
  }
}

// O += P V. V is the MN-major B operand (N = head dim contiguous): key slice kk (16 keys)
// starts 16 rows * 128 B = 2048 B further; LBO = one 64-column region of the stage.
template <class Tr, bool kBF16>
__device__ __forceinline__ void issue_pv(float (&o)[Tr::kHeadDim / 2], const uint32_t (&p)[Tr::kBlockN / 16][4],
                                         const SmemPlan<Tr>& sm, int stage) {
#pragma unroll
  for (int kk = 0; kk < Tr::kBlockN / 16; ++kk) {
    const uint32_t va = sm.v(stage) + kk * 16 * 128;
    Wgmma<Tr::kHeadDim, kBF16>::rs_tb(o, p[kk], make_desc_sw128(va, Tr::kKVRegionBytes, 1024), 1);
  }
}

// Consumer releases a stage: every consumer warp arrives once (count 8).
__device__ __forceinline__ void release(uint32_t bar, int lane) {
  __syncwarp();
  if (lane == 0) mbar_arrive(bar);
}

template <int R>
__device__ __forceinline__ void fence_all(float (&x)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) fence_operand(x[i]);
}
template <int K>
__device__ __forceinline__ void fence_all(uint32_t (&x)[K][4]) {
#pragma unroll
  for (int i = 0; i < K; ++i)
#pragma unroll
    for (int q = 0; q < 4; ++q) fence_operand(x[i][q]);
}

}  // namespace kattn::cuda::detail::sm90
