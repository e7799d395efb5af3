// Merge of per-split partial states: one warp per (sequence, head).
//   m = max_s lse_s, w_s = exp(lse_s - m), o = sum_s w_s o_s / sum_s w_s,
//   lse = m + ln(sum_s w_s). Empty splits (lse = -inf) get weight 0; when every split is
//   empty the row finishes as o = 0, lse = -inf (the -inf - -inf case is guarded).
#pragma once

#include <kattn/cuda/params.hpp>

#include <cstdint>

#include "../common/numeric.cuh"
#include "../common/ptx.cuh"

namespace kattn::cuda::detail {

constexpr int kMergeWarps = 4;

template <bool kBF16, int D>
__global__ void __launch_bounds__(kMergeWarps * 32) merge_states_kernel(const MergeParams p) {
  using T = typename Elem<kBF16>::type;
  constexpr int kPerLane = D / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = int64_t(blockIdx.x) * kMergeWarps + warp;  // b * H + h
  const int64_t rows = int64_t(p.batch) * p.heads;
  if (row >= rows) return;
  const int b = int(row / p.heads), h = int(row % p.heads);

  float mx = -INFINITY;
  for (int s = lane; s < p.num_splits; s += 32) mx = fmaxf(mx, p.partial_lse[s * rows + row]);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  const float m_use = mx == -INFINITY ? 0.f : mx * kLog2e;

  float lsum = 0.f, o[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) o[i] = 0.f;
  for (int s = 0; s < p.num_splits; ++s) {
    const float w = fast_exp2(p.partial_lse[s * rows + row] * kLog2e - m_use);  // exp(-inf) = 0
    lsum += w;
    const float* po = p.partial_o + (s * rows + row) * D;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) o[i] = fmaf(w, po[lane + 32 * i], o[i]);
  }
  const float inv = lsum > 0.f ? 1.f / lsum : 0.f;
  T* op = static_cast<T*>(p.o) + int64_t(b) * p.o_batch_stride + int64_t(h) * p.o_head_stride;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) op[lane + 32 * i] = T(o[i] * inv);
  if (lane == 0 && p.lse != nullptr) p.lse[row] = lsum > 0.f ? (m_use + __log2f(lsum)) * kLn2 : -INFINITY;
}

}  // namespace kattn::cuda::detail
