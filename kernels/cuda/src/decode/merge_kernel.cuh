// Merge of per-split partial states: one warp per (sequence, head), on the library's state
// algebra (core/state.hpp): empty splits (lse = -inf) contribute nothing; when every split is
// empty the row finishes as o = 0, lse = -inf.
#pragma once

#include <kattn/cuda/params.hpp>

#include <cstdint>

#include "../common/numeric.cuh"
#include "../common/ptx.cuh"
#include "kattn/core/state.hpp"

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

  // The splits' finished states merged in split order with the state algebra (its NaN rule: a
  // split whose weight underflows still carries a NaN in its o). Every lane merges the same
  // states, over its own dims. The loads of kBatch splits are issued together before they are
  // merged: one split at a time, each merge waited on its own loads, and a step's time grew with
  // its splits (H200, one sequence of 32K keys: 90 us at 16 splits, 333 us at 128).
  constexpr int kBatch = 8;
  RowState<float> st = RowState<float>::empty();
  float o[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) o[i] = 0.f;
  for (int s0 = 0; s0 < p.num_splits; s0 += kBatch) {
    float lse[kBatch], po[kBatch][kPerLane];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int s = s0 + j < p.num_splits ? s0 + j : s0;  // past the end: a valid address, unused
      lse[j] = p.partial_lse[s * rows + row];
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) po[j][i] = p.partial_o[(s * rows + row) * D + lane + 32 * i];
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (s0 + j >= p.num_splits) break;
      const Merge<float> mg = merge(st, from_lse(lse[j]));
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) o[i] = merged_o(mg, o[i], po[j][i]);
      st = mg.state;
    }
  }
  const Finish<float> fin = finish(st);
  const bool seen = !st.is_empty();
  T* op = static_cast<T*>(p.o) + int64_t(b) * p.o_batch_stride + int64_t(h) * p.o_head_stride;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) op[lane + 32 * i] = T(seen ? finished_o(o[i], fin) : 0.f);
  if (lane == 0 && p.lse != nullptr) p.lse[row] = fin.lse;
}

}  // namespace kattn::cuda::detail
