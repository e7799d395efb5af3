// The sm90 (H100/H200) forward kernel, FlashAttention-3 style:
//   warpgroup 0: producer, one thread issues TMA copies of Q and of every K/V tile into a
//                kStages-deep ring of shared-memory stages tracked by mbarriers;
//   warpgroups 1, 2: consumers, 64 query rows each, wgmma for S = Q K^T (both operands in
//                shared memory) and O += P V (P from registers), online softmax in between.
// Overlap: (a) intra-warpgroup: S of tile j+1 is issued before P_j V_j, and the softmax of
// tile j+1 runs while that P V is still on the tensor cores; (b) inter-warpgroup ping-pong
// (kPingPong): the two consumers take turns issuing their wgmmas through two named
// barriers, so one's softmax runs under the other's matrix products.
// Scheduler: ../common/scheduler.cuh (grid (query tiles, Hq, B), causal: longest first).
#pragma once

#include <cuda.h>

#include <kattn/cuda/params.hpp>

#include "../common/mask.cuh"
#include "../common/numeric.cuh"
#include "../common/ptx.cuh"
#include "../common/scheduler.cuh"
#include "epilogue.cuh"
#include "mainloop.cuh"
#include "ptx_sm90.cuh"
#include "softmax.cuh"
#include "traits.cuh"

namespace kattn::cuda::detail::sm90 {

template <bool kBF16, class Tr, bool kCausal>
__device__ __forceinline__ void consume(const SmemPlan<Tr>& sm, uint8_t* smem, const ForwardParams& p, int cw, int wt,
                                        int h, int b, int m0, int n_end, float scale_log2) {
  using T = typename Elem<kBF16>::type;
  constexpr int kN = Tr::kBlockN, kD = Tr::kHeadDim, kS = Tr::kStages;
  const int lane = wt % 32, warp = wt / 32;
  const int nq = p.seqlen_q, nk = p.seqlen_k;
  T* go = static_cast<T*>(p.o) + int64_t(b) * p.o_batch_stride + int64_t(h) * p.o_head_stride;
  if (n_end == 0) {
    store_empty<Tr>(p, go, h, b, m0, cw, wt);
    return;
  }
  // Ping-pong: consumer 0 issues first; consumer 1 opens consumer 0's barrier once here.
  auto sched_sync = [&] {
    if constexpr (Tr::kPingPong) named_bar_sync(Tr::kBarSched0 + cw, 256);
  };
  auto sched_arrive = [&] {
    if constexpr (Tr::kPingPong) named_bar_arrive(Tr::kBarSched0 + (1 - cw), 256);
  };
  if (Tr::kPingPong && cw == 1) named_bar_arrive(Tr::kBarSched0, 256);

  const int row0 = m0 + cw * 64 + warp * 16 + lane / 4;  // absolute query row of fragment half 0
  const int colq = 2 * (lane % 4);
  float s[kN / 2];
  float o[kD / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) o[i] = 0.f;
  uint32_t pa[kN / 16][4];
  RowSoftmax<kN> soft;
  float corr[2];

  mbar_wait(sm.bar_q(), 0);

  // ---- first visited tile: S only
  {
    const int n = n_end - 1;
    const Stage st = Stage::of(0, kS);
    mbar_wait(sm.full_k(st.index), st.phase);
    sched_sync();
    wgmma_fence();
    issue_qk<Tr, kBF16>(s, sm, cw, st.index);
    wgmma_commit();
    sched_arrive();
    wgmma_wait<0>();
    fence_all(s);
    release(sm.empty_k(st.index), lane);
    if (tile_needs_mask(n, m0, kN, nq, nk, kCausal)) RowSoftmax<kN>::mask(s, row0, n * kN + colq, nq, nk, kCausal);
    soft.step(s, scale_log2, corr);  // O is still zero: no rescale
    convert_p<kBF16, kN>(s, pa);
  }
  // ---- steady state: S_{j+1} and P_j V_j in flight together
  for (int it = 1; it < n_end; ++it) {
    const int n = n_end - 1 - it;
    const Stage st = Stage::of(it, kS), sp = Stage::of(it - 1, kS);
    mbar_wait(sm.full_k(st.index), st.phase);
    mbar_wait(sm.full_v(sp.index), sp.phase);  // before the fence: no branch between the two issues
    sched_sync();
    wgmma_fence();
    issue_qk<Tr, kBF16>(s, sm, cw, st.index);
    wgmma_commit();
    issue_pv<Tr, kBF16>(o, pa, sm, sp.index);
    wgmma_commit();
    sched_arrive();
    wgmma_wait<1>();  // S done, P V may still run
    fence_all(s);
    release(sm.empty_k(st.index), lane);
    if (tile_needs_mask(n, m0, kN, nq, nk, kCausal)) RowSoftmax<kN>::mask(s, row0, n * kN + colq, nq, nk, kCausal);
    soft.step(s, scale_log2, corr);
    wgmma_wait<0>();  // P V done: O and the old P registers are free
    fence_all(o);
    fence_all(pa);
    release(sm.empty_v(sp.index), lane);
    scale_rows(o, corr);
    convert_p<kBF16, kN>(s, pa);
  }
  // ---- last P V
  {
    const Stage sp = Stage::of(n_end - 1, kS);
    mbar_wait(sm.full_v(sp.index), sp.phase);
    sched_sync();
    wgmma_fence();
    issue_pv<Tr, kBF16>(o, pa, sm, sp.index);
    wgmma_commit();
    // Consumer 1's last arrive would have no matching sync: leave the barrier balanced.
    if (!(Tr::kPingPong && cw == 1)) sched_arrive();
    wgmma_wait<0>();
    fence_all(o);
    fence_all(pa);
    release(sm.empty_v(sp.index), lane);
  }
  Finish<float> fin[2];
  soft.finish_rows(fin);
  store_tile<Tr, kBF16>(o, fin, smem, p, go, h, b, m0, cw, wt);
}

template <bool kBF16, class Tr, bool kCausal>
__global__ void __launch_bounds__(384, 1)
    fwd_sm90_kernel(const ForwardParams p, const __grid_constant__ CUtensorMap tm_q,
                    const __grid_constant__ CUtensorMap tm_k, const __grid_constant__ CUtensorMap tm_v,
                    const float scale_log2) {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ uint8_t smem_raw[];
  const uint32_t raw = smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // swizzle atoms need 1024-B alignment
  uint8_t* smem = smem_raw + (base - raw);
  const SmemPlan<Tr> sm{base};

  const FwdTile tile = fwd_tile<kCausal>();
  const int m_block = tile.m_block, h = tile.h, b = tile.b;
  const int hk = h / (p.heads_q / p.heads_kv);
  const int m0 = m_block * Tr::kBlockM;
  const int n_end = key_tile_end(m0, Tr::kBlockM, Tr::kBlockN, p.seqlen_q, p.seqlen_k, kCausal);
  const int wg = threadIdx.x / 128, wt = threadIdx.x % 128;

  if (threadIdx.x == 0) {
    mbar_init(sm.bar_q(), 1);
#pragma unroll
    for (int s = 0; s < Tr::kStages; ++s) {
      mbar_init(sm.full_k(s), 1);
      mbar_init(sm.full_v(s), 1);
      mbar_init(sm.empty_k(s), 8);
      mbar_init(sm.empty_v(s), 8);
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<Tr::kProducerRegs>();
    if (wt == 0 && n_end > 0) {
      prefetch_tmap(&tm_q);
      prefetch_tmap(&tm_k);
      prefetch_tmap(&tm_v);
      produce<Tr>(sm, &tm_q, &tm_k, &tm_v, h, hk, b, m0, n_end);
    }
  } else {
    setmaxnreg_inc<Tr::kConsumerRegs>();
    consume<kBF16, Tr, kCausal>(sm, smem, p, wg - 1, wt, h, b, m0, n_end, scale_log2);
  }
#else
  (void)p, (void)tm_q, (void)tm_k, (void)tm_v, (void)scale_log2;
  __trap();  // this kernel is only built for sm_90a
#endif
}

}  // namespace kattn::cuda::detail::sm90
