// Online softmax on a wgmma accumulator tile (64 rows x N keys per consumer warpgroup),
// in base 2. Layout fact (wgmma m64nNk16 accumulator, PTX ISA 9.7.15.5.x): thread (warp w,
// lane l) holds s[i] at row 16w + l/4 + 8*((i/2)%2), column 8*(i/4) + 2*(l%4) + (i%2); so a
// thread holds two rows (half 0 and 1), and the 4 lanes of a quad hold a whole row.
// Steps, as in the algorithm: mask, row max, rescale factor, exponentiate, row sum, all on the
// library's state algebra and key window.
#pragma once

#include "../common/mask.cuh"
#include "../common/ptx.cuh"
#include "kattn/core/state.hpp"

namespace kattn::cuda::detail::sm90 {

template <int N>
struct RowSoftmax {
  static constexpr int kRegs = N / 2;
  // The state of the thread's two rows (core/state.hpp): m in log2 units, l this thread's partial
  // row sum (quad-summed when finishing).
  RowState<float> st[2] = {RowState<float>::empty(), RowState<float>::empty()};

  // -inf outside the mask. row: absolute query row of half 0; col0: absolute key index of
  // this thread's first column (tile start + 2*(lane%4)).
  __device__ __forceinline__ static void mask(float (&s)[kRegs], int row, int col0, int nq, int nk, bool causal) {
#pragma unroll
    for (int i = 0; i < kRegs; ++i) {
      const int r = row + 8 * ((i / 2) % 2);
      const int c = col0 + 8 * (i / 4) + (i % 2);
      if (!visible(r, c, nq, nk, causal)) s[i] = -INFINITY;
    }
  }

  // Folds the tile into the state: s becomes P = exp2(s*scale_log2 - m_new); corr[h] is the factor
  // the output rows must be multiplied by. The row max propagates NaN, as everywhere in kattn.
  __device__ __forceinline__ void step(float (&s)[kRegs], float scale_log2, float (&corr)[2]) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < N / 8; ++j) mx = max_nan(mx, max_nan(s[4 * j + 2 * h], s[4 * j + 2 * h + 1]));
      mx = max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = max_nan(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      corr[h] = fold_max(st[h], mx * scale_log2);  // scale_log2 > 0: the max of the scaled scores
      const float offset = exponent_offset(st[h]);
      float sum = 0.f;
#pragma unroll
      for (int j = 0; j < N / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[4 * j + 2 * h + e];
          x = fast_exp2(fmaf(x, scale_log2, -offset));
          sum += x;
        }
      st[h].l += sum;
    }
  }

  // The finish of the two rows, from the quad-summed denominators.
  __device__ __forceinline__ void finish_rows(Finish<float> (&fin)[2]) const {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float x = st[h].l;
      x += __shfl_xor_sync(0xffffffffu, x, 1);
      x += __shfl_xor_sync(0xffffffffu, x, 2);
      fin[h] = finish(RowState<float>{st[h].m, x});
    }
  }
};

// Multiplies accumulator rows (same fragment layout, any N) by per-half factors.
template <int R>
__device__ __forceinline__ void scale_rows(float (&o)[R], const float (&f)[2]) {
#pragma unroll
  for (int i = 0; i < R; ++i) o[i] = rescaled_o(o[i], f[(i / 2) % 2]);
}

// P (f32 accumulator layout over N keys) -> A operand fragments of the P.V wgmma, one per
// 16 keys. Layout fact (PTX ISA, wgmma m64nNk16 A-fragment in registers, same as
// mma.m16n8k16's A): a[0] = (row l/4, k 2(l%4)..+1), a[1] = (row +8, same k),
// a[2] = (row l/4, k +8), a[3] = (row +8, k +8). Keys 16kk..16kk+15 of the accumulator are
// s[8kk .. 8kk+7] in exactly that order, so a[kk][q] = pack(s[8kk+2q], s[8kk+2q+1]).
template <bool kBF16, int N>
__device__ __forceinline__ void convert_p(const float (&s)[N / 2], uint32_t (&a)[N / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk)
#pragma unroll
    for (int q = 0; q < 4; ++q) a[kk][q] = pack2<kBF16>(s[8 * kk + 2 * q], s[8 * kk + 2 * q + 1]);
}

}  // namespace kattn::cuda::detail::sm90
