// Split-KV paged decode kernel (Flash-Decoding).
//
// CTA = (split, KV head x query-head group, sequence). It streams the split's keys of one
// KV head once and folds them into the states of the GP query heads that share that KV
// head (GQA packing). Thread (kg, c) = (tid / kTpk, tid % kTpk) reads 16-byte chunk c of
// keys kg, kg + kKpp, ... and keeps its own state (m, l, o[8 dims]) per packed head;
// q is pre-scaled by scale*log2(e), so scores and m are in base 2. The kKpp key groups'
// states are merged through shared memory at the end (the state merge of DESIGN.md).
//
// Output: with one split, o (dtype) and lse (natural log) directly; otherwise the split's
// normalised o (float) and lse go to the workspace for merge_states_kernel.
#pragma once

#include <kattn/cuda/params.hpp>

#include <cstdint>

#include "../common/numeric.cuh"
#include "../common/ptx.cuh"
#include "decode_traits.cuh"
#include "kattn/core/state.hpp"

namespace kattn::cuda::detail {

struct DecodeSplitOut {
  float* partial_o;    // [S, B, Hq, D] or null when S == 1
  float* partial_lse;  // [S, B, Hq]
};

template <bool kBF16, int D, int GP>
__global__ void __launch_bounds__(256, DecodeTraits<D, GP>::kMinBlocks)
    decode_kernel(const DecodeParams p, const float scale_log2, const int n_groups, const DecodeSplitOut out) {
  using Tr = DecodeTraits<D, GP>;
  using T = typename Elem<kBF16>::type;
  constexpr int kThreads = Tr::kThreads, kTpk = Tr::kTpk, kKpp = Tr::kKpp, kU = Tr::kU, kStages = Tr::kStages;
  constexpr int kKPI = Tr::kKeysPerIter;

  extern __shared__ __align__(16) uint8_t smem_raw[];
  uint4* stage_buf = reinterpret_cast<uint4*>(smem_raw);  // [kStages][kU][2][kThreads]

  const int split = blockIdx.x, num_splits = gridDim.x;
  const int hk = blockIdx.y / n_groups, grp = blockIdx.y % n_groups;
  const int b = blockIdx.z;
  const int group_size = p.heads_q / p.heads_kv;
  const int tid = threadIdx.x, kg = tid / kTpk, c = tid % kTpk;

  // ---- this split's key range [k_begin, k_end) of sequence b
  const int page0 = p.kv_page_indptr[b];
  const int npages = p.kv_page_indptr[b + 1] - page0;
  const int len = npages > 0 ? (npages - 1) * p.page_size + p.kv_last_page_len[b] : 0;
  const int chunk = (len + num_splits - 1) / num_splits;
  const int k_begin = min(len, split * chunk);
  const int k_end = min(len, k_begin + chunk);
  const int n_iter = (k_end - k_begin + kKPI - 1) / kKPI;

  // ---- q of the packed heads, this thread's 8 dims, pre-scaled to base 2
  float qf[GP][8];
#pragma unroll
  for (int gp = 0; gp < GP; ++gp) {
    const int hg = grp * GP + gp;  // head index inside the group
    if (hg < group_size) {
      const int h = hk * group_size + hg;
      const uint4 raw = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.q) + int64_t(b) * p.q_batch_stride +
                                                        int64_t(h) * p.q_head_stride + c * 8);
      unpack8<kBF16>(raw, qf[gp]);
#pragma unroll
      for (int d = 0; d < 8; ++d) qf[gp][d] *= scale_log2;
    } else {
#pragma unroll
      for (int d = 0; d < 8; ++d) qf[gp][d] = 0.f;
    }
  }

  const T* kbase = static_cast<const T*>(p.k_cache) + int64_t(hk) * p.k_head_stride + c * 8;
  const T* vbase = static_cast<const T*>(p.v_cache) + int64_t(hk) * p.v_head_stride + c * 8;
  const int32_t* pages = p.kv_page_indices + page0;

  auto key_of = [&](int it, int u) { return k_begin + it * kKPI + u * kKpp + kg; };
  auto load_pids = [&](int it, int (&pid)[kU]) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int key = key_of(it, u);
      pid[u] = key < k_end ? __ldg(pages + key / p.page_size) : 0;
    }
  };
  auto issue = [&](int it, const int (&pid)[kU]) {
    uint4* st = stage_buf + (it % kStages) * (kU * 2 * kThreads);
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int key = key_of(it, u);
      const bool ok = key < k_end;
      const int tok = ok ? key % p.page_size : 0;
      const T* ks = ok ? kbase + int64_t(pid[u]) * p.k_page_stride + int64_t(tok) * p.k_token_stride : kbase;
      const T* vs = ok ? vbase + int64_t(pid[u]) * p.v_page_stride + int64_t(tok) * p.v_token_stride : vbase;
      cp_async_16(smem_u32(st + (u * 2 + 0) * kThreads + tid), ks, ok ? 16 : 0);
      cp_async_16(smem_u32(st + (u * 2 + 1) * kThreads + tid), vs, ok ? 16 : 0);
    }
  };

  RowState<float> state[GP];  // core/state.hpp: m in log2 units (q is pre-scaled), l
  float acc[GP][8];
#pragma unroll
  for (int gp = 0; gp < GP; ++gp) {
    state[gp] = RowState<float>::empty();
#pragma unroll
    for (int d = 0; d < 8; ++d) acc[gp][d] = 0.f;
  }

  // ---- pipeline prologue: kStages - 1 stages in flight, page ids one stage ahead
  int pid[kU];
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < n_iter) {
      load_pids(s, pid);
      issue(s, pid);
    }
    cp_async_commit();
  }
  if (kStages - 1 < n_iter) load_pids(kStages - 1, pid);

  for (int it = 0; it < n_iter; ++it) {
    if (it + kStages - 1 < n_iter) issue(it + kStages - 1, pid);
    cp_async_commit();
    if (it + kStages < n_iter) load_pids(it + kStages, pid);  // consumed next iteration
    cp_async_wait<kStages - 1>();                              // stage `it` has landed

    const uint4* st = stage_buf + (it % kStages) * (kU * 2 * kThreads);
    // -- scores of kU keys for each packed head (reduced over the kTpk threads of a key)
    float s[GP][kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      float kf[8];
      unpack8<kBF16>(st[(u * 2 + 0) * kThreads + tid], kf);
      const bool ok = key_of(it, u) < k_end;
#pragma unroll
      for (int gp = 0; gp < GP; ++gp) {
        float x = 0.f;
#pragma unroll
        for (int d = 0; d < 8; ++d) x = fmaf(qf[gp][d], kf[d], x);
#pragma unroll
        for (int off = kTpk / 2; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
        s[gp][u] = ok ? x : -INFINITY;
      }
    }
    // -- fold into the states: max, rescale, exponentiate, sum
#pragma unroll
    for (int gp = 0; gp < GP; ++gp) {
      float mx = -INFINITY;
#pragma unroll
      for (int u = 0; u < kU; ++u) mx = max_nan(mx, s[gp][u]);
      const float corr = fold_max(state[gp], mx);
      const float offset = exponent_offset(state[gp]);
      float sum = 0.f;
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        s[gp][u] = fast_exp2(s[gp][u] - offset);
        sum += s[gp][u];
      }
      state[gp].l += sum;
#pragma unroll
      for (int d = 0; d < 8; ++d) acc[gp][d] = rescaled_o(acc[gp][d], corr);
    }
    // -- o += p v
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      float vf[8];
      unpack8<kBF16>(st[(u * 2 + 1) * kThreads + tid], vf);
#pragma unroll
      for (int gp = 0; gp < GP; ++gp)
#pragma unroll
        for (int d = 0; d < 8; ++d) acc[gp][d] = fmaf(s[gp][u], vf[d], acc[gp][d]);
    }
  }

  // ---- merge the kKpp key-group states through shared memory
  cp_async_wait<0>();
  __syncthreads();  // the staging buffer is reused below
  float* sm = reinterpret_cast<float*>(smem_raw);  // [kKpp][GP][D + 2]: m, l, o[D]
#pragma unroll
  for (int gp = 0; gp < GP; ++gp) {
    float* e = sm + (kg * GP + gp) * (D + 2);
    if (c == 0) {
      e[0] = state[gp].m;
      e[1] = state[gp].l;
    }
#pragma unroll
    for (int d = 0; d < 8; ++d) e[2 + c * 8 + d] = acc[gp][d];
  }
  __syncthreads();

  for (int idx = tid; idx < GP * D; idx += kThreads) {
    const int gp = idx / D, d = idx % D;
    const int hg = grp * GP + gp;
    if (hg >= group_size) continue;
    const int h = hk * group_size + hg;
    // The kKpp key groups' states merged in order with the state algebra (its NaN rule included).
    RowState<float> merged = RowState<float>::empty();
    float o = 0.f;
    for (int j = 0; j < kKpp; ++j) {
      const float* e = sm + (j * GP + gp) * (D + 2);
      const Merge<float> mg = merge(merged, RowState<float>{e[0], e[1]});
      o = merged_o(mg, o, e[2 + d]);
      merged = mg.state;
    }
    const Finish<float> fin = finish(merged);
    const float lse = fin.lse;
    o = merged.is_empty() ? 0.f : finished_o(o, fin);
    if (out.partial_o == nullptr) {
      T* op = static_cast<T*>(p.o) + int64_t(b) * p.o_batch_stride + int64_t(h) * p.o_head_stride;
      op[d] = T(o);
      if (d == 0 && p.lse != nullptr) p.lse[int64_t(b) * p.heads_q + h] = lse;
    } else {
      const int64_t row = (int64_t(split) * p.batch + b) * p.heads_q + h;
      out.partial_o[row * D + d] = o;
      if (d == 0) out.partial_lse[row] = lse;
    }
  }
}

}  // namespace kattn::cuda::detail
