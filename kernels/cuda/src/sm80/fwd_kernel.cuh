// sm80 forward kernel: mma.sync m16n8k16 (bf16/f16 in, f32 accumulate), cp.async
// double-buffered K/V, online softmax in base 2. The fallback for GPUs without wgmma and
// the correctness baseline of the sm90 kernel.
//
// One CTA = one (query tile of 64 rows, query head, batch). Warp w owns query rows
// [16w, 16w+16) of the tile. Key tiles are visited from the last visible one down to 0,
// so only the first visited tiles need the element-wise mask.
//
// Fragment facts used (PTX ISA 9.7.14.5.8, mma.m16n8k16 .bf16/.f16; g = lane/4, t = lane%4):
//   S accumulator for key block j (8 keys): s[j][0..1] = row g, keys 8j+2t, 8j+2t+1;
//   s[j][2..3] = row g+8. The A operand of P.V for keys [16kk, 16kk+16) is therefore
//   {s[2kk][0..1], s[2kk][2..3], s[2kk+1][0..1], s[2kk+1][2..3]} packed to 16 bits: the
//   S layout of two key blocks is exactly the A layout (FlashAttention-2's trick).
// Barrier contract: each key-tile iteration starts with cp.async.wait + __syncthreads
// (tile visible to all) and ends with __syncthreads (the stage may be overwritten).
#pragma once

#include <kattn/cuda/params.hpp>

#include <cstdint>

#include "../common/mask.cuh"
#include "../common/numeric.cuh"
#include "../common/ptx.cuh"
#include "../common/scheduler.cuh"
#include "fwd_traits.cuh"
#include "kattn/core/state.hpp"

namespace kattn::cuda::detail {

// Loads rows [row0, row0 + kRows) of a [rows, D] slab with row stride `stride` (elements)
// into swizzled shared memory; rows >= limit are zero-filled. All kThreads threads call.
template <int kRows, int D, int kThreads, class T>
__device__ __forceinline__ void sm80_load_tile(T* smem, const T* gmem, int64_t stride, int row0, int limit,
                                               int tid) {
  constexpr int kChunks = D / 8;
  constexpr int kTotal = kRows * kChunks;
  static_assert(kTotal % kThreads == 0, "tile chunks must divide among the threads");
#pragma unroll
  for (int i = 0; i < kTotal / kThreads; ++i) {
    const int idx = tid + i * kThreads;
    const int r = idx / kChunks, c = idx % kChunks;
    const int grow = row0 + r;
    const bool ok = grow < limit;
    const T* src = ok ? gmem + int64_t(grow) * stride + c * 8 : gmem;
    cp_async_16(smem_u32(smem + swz_offset(r, c, D)), src, ok ? 16 : 0);
  }
}

template <bool kBF16, int D, bool kCausal>
__global__ void __launch_bounds__(Sm80FwdTraits<D>::kThreads)
    fwd_sm80_kernel(const ForwardParams p, const float scale_log2) {
  using Tr = Sm80FwdTraits<D>;
  using T = typename Elem<kBF16>::type;
  constexpr int kBlockM = Tr::kBlockM, kBlockN = Tr::kBlockN, kThreads = Tr::kThreads;
  constexpr int kNB = kBlockN / 8;  // key blocks of 8 in a tile
  constexpr int kDB = D / 8;        // output column blocks of 8

  extern __shared__ __align__(128) uint8_t smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + Tr::kSmemQ;                       // [stage][kBlockN][D]
  T* sV = sK + Tr::kStages * Tr::kSmemKV;        // [stage][kBlockN][D]

  const FwdTile tile = fwd_tile<kCausal>();
  const int m_block = tile.m_block, h = tile.h, b = tile.b;
  const int hk = h / (p.heads_q / p.heads_kv);
  const int nq = p.seqlen_q, nk = p.seqlen_k;
  const int m0 = m_block * kBlockM;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;

  const T* gq = static_cast<const T*>(p.q) + int64_t(b) * p.q_batch_stride + int64_t(h) * p.q_head_stride;
  const T* gk = static_cast<const T*>(p.k) + int64_t(b) * p.k_batch_stride + int64_t(hk) * p.k_head_stride;
  const T* gv = static_cast<const T*>(p.v) + int64_t(b) * p.v_batch_stride + int64_t(hk) * p.v_head_stride;
  T* go = static_cast<T*>(p.o) + int64_t(b) * p.o_batch_stride + int64_t(h) * p.o_head_stride;

  const int n_end = key_tile_end(m0, kBlockM, kBlockN, nq, nk, kCausal);

  float acc_o[kDB][4];
#pragma unroll
  for (int j = 0; j < kDB; ++j) acc_o[j][0] = acc_o[j][1] = acc_o[j][2] = acc_o[j][3] = 0.f;
  // The state of the thread's two rows (core/state.hpp): m in log2 units, l this thread's partial
  // row sum (the quad is summed when finishing).
  RowState<float> st[2] = {RowState<float>::empty(), RowState<float>::empty()};

  if (n_end > 0) {
    sm80_load_tile<kBlockM, D, kThreads>(sQ, gq, p.q_seq_stride, m0, nq, tid);
    sm80_load_tile<kBlockN, D, kThreads>(sK, gk, p.k_seq_stride, (n_end - 1) * kBlockN, nk, tid);
    sm80_load_tile<kBlockN, D, kThreads>(sV, gv, p.v_seq_stride, (n_end - 1) * kBlockN, nk, tid);
  }
  cp_async_commit();

  for (int it = 0; it < n_end; ++it) {
    const int n = n_end - 1 - it;
    const int stage = it & 1;
    if (n > 0) {  // prefetch the next (lower) key tile into the other stage
      sm80_load_tile<kBlockN, D, kThreads>(sK + (stage ^ 1) * Tr::kSmemKV, gk, p.k_seq_stride, (n - 1) * kBlockN,
                                           nk, tid);
      sm80_load_tile<kBlockN, D, kThreads>(sV + (stage ^ 1) * Tr::kSmemKV, gv, p.v_seq_stride, (n - 1) * kBlockN,
                                           nk, tid);
    }
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    const T* cK = sK + stage * Tr::kSmemKV;
    const T* cV = sV + stage * Tr::kSmemKV;

    // ---- S = Q K^T for this warp's 16 rows x kBlockN keys.
    float s[kNB][4];
#pragma unroll
    for (int j = 0; j < kNB; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      const int qr = warp * 16 + (lane % 8) + 8 * ((lane / 8) % 2);
      ldmatrix_x4(a, smem_u32(sQ + swz_offset(qr, 2 * kk + lane / 16, D)));
#pragma unroll
      for (int nb2 = 0; nb2 < kNB / 2; ++nb2) {
        uint32_t bf[4];
        const int kr = nb2 * 16 + (lane % 8) + 8 * (lane / 16);
        ldmatrix_x4(bf, smem_u32(cK + swz_offset(kr, 2 * kk + (lane / 8) % 2, D)));
        mma_16816<kBF16>(s[2 * nb2], a, bf[0], bf[1]);
        mma_16816<kBF16>(s[2 * nb2 + 1], a, bf[2], bf[3]);
      }
    }

    // ---- mask (only tiles on the diagonal or at the ragged end of the keys)
    if (tile_needs_mask(n, m0, kBlockN, nq, nk, kCausal)) {
#pragma unroll
      for (int j = 0; j < kNB; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = m0 + warp * 16 + g + 8 * (e / 2);
          const int col = n * kBlockN + 8 * j + 2 * t + (e % 2);
          if (!visible(row, col, nq, nk, kCausal)) s[j][e] = -INFINITY;
        }
    }

    // ---- online softmax: row max, rescale, exponentiate, partial row sum
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < kNB; ++j) mx = max_nan(mx, max_nan(s[j][2 * r], s[j][2 * r + 1]));
      mx = max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float corr = fold_max(st[r], mx * scale_log2);  // scale_log2 > 0: the max of the scaled scores
      const float offset = exponent_offset(st[r]);
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < kNB; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const float pe = fast_exp2(fmaf(s[j][2 * r + e], scale_log2, -offset));
          s[j][2 * r + e] = pe;
          sum += pe;
        }
      st[r].l += sum;
#pragma unroll
      for (int j = 0; j < kDB; ++j) {
        acc_o[j][2 * r] = rescaled_o(acc_o[j][2 * r], corr);
        acc_o[j][2 * r + 1] = rescaled_o(acc_o[j][2 * r + 1], corr);
      }
    }

    // ---- O += P V
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      uint32_t a[4];
      a[0] = pack2<kBF16>(s[2 * kk][0], s[2 * kk][1]);
      a[1] = pack2<kBF16>(s[2 * kk][2], s[2 * kk][3]);
      a[2] = pack2<kBF16>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = pack2<kBF16>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int db2 = 0; db2 < kDB / 2; ++db2) {
        uint32_t bf[4];
        const int vr = 16 * kk + (lane % 8) + 8 * ((lane / 8) % 2);
        ldmatrix_x4_trans(bf, smem_u32(cV + swz_offset(vr, 2 * db2 + lane / 16, D)));
        mma_16816<kBF16>(acc_o[2 * db2], a, bf[0], bf[1]);
        mma_16816<kBF16>(acc_o[2 * db2 + 1], a, bf[2], bf[3]);
      }
    }
    __syncthreads();
  }

  // ---- epilogue: finish (core/state.hpp: o / l, lse), empty rows -> 0 and -inf
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float l = st[r].l;
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    const Finish<float> fin = finish(RowState<float>{st[r].m, l});
    const int row = m0 + warp * 16 + g + 8 * r;
    if (row < nq) {
      T* orow = go + int64_t(row) * p.o_seq_stride;
#pragma unroll
      for (int j = 0; j < kDB; ++j)
        *reinterpret_cast<uint32_t*>(orow + 8 * j + 2 * t) =
            pack2<kBF16>(finished_o(acc_o[j][2 * r], fin), finished_o(acc_o[j][2 * r + 1], fin));
      if (p.lse != nullptr && t == 0)
        p.lse[(int64_t(b) * p.heads_q + h) * nq + row] = fin.lse;
    }
  }
}

}  // namespace kattn::cuda::detail
