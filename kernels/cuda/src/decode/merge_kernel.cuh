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
  // states, over its own dims.
  RowState<float> st = RowState<float>::empty();
  float o[kPerLane];
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) o[i] = 0.f;
  for (int s = 0; s < p.num_splits; ++s) {
    const Merge<float> mg = merge(st, from_lse(p.partial_lse[s * rows + row]));
    const float* po = p.partial_o + (s * rows + row) * D;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) o[i] = merged_o(mg, o[i], po[lane + 32 * i]);
    st = mg.state;
  }
  const Finish<float> fin = finish(st);
  const bool seen = !st.is_empty();
  T* op = static_cast<T*>(p.o) + int64_t(b) * p.o_batch_stride + int64_t(h) * p.o_head_stride;
#pragma unroll
  for (int i = 0; i < kPerLane; ++i) op[lane + 32 * i] = T(seen ? finished_o(o[i], fin) : 0.f);
  if (lane == 0 && p.lse != nullptr) p.lse[row] = fin.lse;
}

}  // namespace kattn::cuda::detail
