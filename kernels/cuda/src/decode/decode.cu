// Launchers of the split-KV paged decode and of the partial-state merge
// (compiled for sm_80 and sm_90).
#include <kattn/cuda/decode.hpp>
#include <kattn/cuda/split_planner.hpp>

#include <algorithm>
#include <cmath>

#include "../common/dispatch.hpp"
#include "../common/launch.hpp"
#include "../common/validate.hpp"
#include "decode_kernel.cuh"
#include "merge_kernel.cuh"

namespace kattn::cuda {

namespace {

// Query heads packed per CTA: the GQA group rounded up to a power of two, at most 8.
int packed_heads(int group) {
  if (group >= 8) return 8;
  int gp = 1;
  while (gp < group) gp *= 2;
  return gp;
}

int head_groups(const DecodeParams& p) {
  const int g = p.heads_q / p.heads_kv;
  const int gp = packed_heads(g);
  return (g + gp - 1) / gp;
}

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

#define KATTN_DISPATCH_GP(gp, NAME, ...)   \
  [&]() -> cudaError_t {                   \
    switch (gp) {                          \
      case 1: {                            \
        constexpr int NAME = 1;            \
        return __VA_ARGS__();              \
      }                                    \
      case 2: {                            \
        constexpr int NAME = 2;            \
        return __VA_ARGS__();              \
      }                                    \
      case 4: {                            \
        constexpr int NAME = 4;            \
        return __VA_ARGS__();              \
      }                                    \
      case 8: {                            \
        constexpr int NAME = 8;            \
        return __VA_ARGS__();              \
      }                                    \
      default:                             \
        return cudaErrorInvalidValue;      \
    }                                      \
  }()

template <class F>
cudaError_t with_decode_kernel(const DecodeParams& p, F&& f) {
  return KATTN_DISPATCH_BOOL(p.dtype == DType::kBF16, kBF16, [&] {
    return KATTN_DISPATCH_HEAD_DIM(p.head_dim, D, [&] {
      return KATTN_DISPATCH_GP(packed_heads(p.heads_q / p.heads_kv), GP, [&] {
        using Tr = detail::DecodeTraits<D, GP>;
        return f(reinterpret_cast<const void*>(detail::decode_kernel<kBF16, D, GP>), Tr::kSmemBytes,
                 detail::decode_kernel<kBF16, D, GP>);
      });
    });
  });
}

}  // namespace

const char* decode_check(const DecodeParams& p) {
  using detail::aligned16;
  if (p.dtype != DType::kBF16 && p.dtype != DType::kFP16) return "dtype: expected kBF16 or kFP16";
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) return "head_dim: expected 64, 128 or 256";
  if (p.batch < 0 || p.batch > 65535) return "batch: expected 0..65535";
  if (p.heads_kv <= 0 || p.heads_q <= 0 || p.heads_q % p.heads_kv != 0)
    return "heads_kv: heads_q must be a positive multiple of heads_kv";
  if (int64_t(p.heads_kv) * head_groups(p) > 65535) return "heads_kv: too many KV heads (grid y extent)";
  if (p.page_size <= 0) return "page_size: expected >= 1";
  if (!std::isfinite(p.scale)) return "scale: expected a finite value (0 for 1/sqrt(D))";
  if (p.num_splits < 0 || p.num_splits > 65535) return "num_splits: expected 0 (plan) .. 65535";
  if (p.batch == 0) return nullptr;
  if (!p.q || !p.k_cache || !p.v_cache || !p.o) return "q/k_cache/v_cache/o: null pointer";
  if (!p.kv_page_indptr || !p.kv_page_indices || !p.kv_last_page_len)
    return "kv_page_indptr/kv_page_indices/kv_last_page_len: null pointer";
  if (!aligned16(p.q) || !aligned16(p.k_cache) || !aligned16(p.v_cache))
    return "q/k_cache/v_cache: base pointers must be 16-byte aligned";
  const int64_t s[] = {p.q_batch_stride, p.q_head_stride, p.k_page_stride, p.k_token_stride,
                       p.k_head_stride,  p.v_page_stride, p.v_token_stride, p.v_head_stride};
  for (int64_t x : s)
    if (x < 0 || x % 8 != 0) return "strides: q and cache element strides must be >= 0 and multiples of 8";
  if (p.o_batch_stride < 0 || p.o_head_stride < 0) return "strides: o strides must be >= 0";
  return nullptr;
}

int decode_num_splits(const DecodeParams& p) {
  if (p.num_splits > 0) return p.num_splits;
  if (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0) return 1;
  const int sms = p.num_sms > 0 ? p.num_sms : detail::device_sm_count();
  // The registers allow decode_ctas_per_sm CTAs; the shared memory of the device at hand may hold
  // fewer (two 96 KB CTAs fit Hopper's 228 KB, one an A100's 164 KB). Without a device: Hopper.
  int ctas = decode_ctas_per_sm(packed_heads(p.heads_q / p.heads_kv));
  const int smem_per_sm = detail::device_smem_per_sm();
  if (smem_per_sm > 0) {
    int cta_smem = 0;
    with_decode_kernel(p, [&](const void*, int smem, auto) {
      cta_smem = smem + 1024;  // the 1 KB the runtime reserves per block
      return cudaSuccess;
    });
    if (cta_smem > 0) ctas = std::max(1, std::min(ctas, smem_per_sm / cta_smem));
  }
  return plan_num_splits(p.batch, p.heads_kv * head_groups(p), p.max_seqlen_hint, sms, ctas);
}

size_t decode_workspace_bytes(const DecodeParams& p, int num_splits) {
  if (num_splits <= 1) return 0;
  const size_t rows = size_t(num_splits) * size_t(p.batch) * size_t(p.heads_q);
  return align_up(rows * size_t(p.head_dim) * sizeof(float), 256) + align_up(rows * sizeof(float), 256);
}

cudaError_t decode_prepare(const DecodeParams& p) {
  if (decode_check(p) != nullptr) return cudaErrorInvalidValue;
  return with_decode_kernel(p, [&](const void* k, int smem, auto) { return detail::set_smem_once(k, smem); });
}

cudaError_t decode(const DecodeParams& p, cudaStream_t stream) {
  if (decode_check(p) != nullptr) return cudaErrorInvalidValue;
  if (p.batch == 0) return cudaSuccess;
  const int splits = decode_num_splits(p);
  detail::DecodeSplitOut out{nullptr, nullptr};
  if (splits > 1) {
    const size_t need = decode_workspace_bytes(p, splits);
    if (p.workspace == nullptr || p.workspace_bytes < need) return cudaErrorInvalidValue;
    const size_t rows = size_t(splits) * size_t(p.batch) * size_t(p.heads_q);
    out.partial_o = static_cast<float*>(p.workspace);
    out.partial_lse = reinterpret_cast<float*>(static_cast<char*>(p.workspace) +
                                               align_up(rows * size_t(p.head_dim) * sizeof(float), 256));
  }
  const float scale_log2 = detail::score_scale_log2(p.scale, p.head_dim);
  const int groups = head_groups(p);
  cudaError_t err = with_decode_kernel(p, [&](const void* k, int smem, auto kernel) {
    cudaError_t e = detail::set_smem_once(k, smem);
    if (e != cudaSuccess) return e;
    dim3 grid(splits, p.heads_kv * groups, p.batch);
    kernel<<<grid, 256, smem, stream>>>(p, scale_log2, groups, out);
    return cudaGetLastError();
  });
  if (err != cudaSuccess || splits == 1) return err;
  MergeParams mp;
  mp.dtype = p.dtype;
  mp.partial_o = out.partial_o;
  mp.partial_lse = out.partial_lse;
  mp.num_splits = splits;
  mp.batch = p.batch;
  mp.heads = p.heads_q;
  mp.head_dim = p.head_dim;
  mp.o = p.o;
  mp.o_batch_stride = p.o_batch_stride;
  mp.o_head_stride = p.o_head_stride;
  mp.lse = p.lse;
  return merge_states(mp, stream);
}

const char* merge_check(const MergeParams& p) {
  if (p.dtype != DType::kBF16 && p.dtype != DType::kFP16) return "dtype: expected kBF16 or kFP16";
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) return "head_dim: expected 64, 128 or 256";
  if (p.num_splits <= 0) return "num_splits: expected >= 1";
  if (p.batch < 0 || p.heads < 0) return "batch/heads: expected >= 0";
  if (int64_t(p.batch) * p.heads > 0 && (!p.partial_o || !p.partial_lse || !p.o))
    return "partial_o/partial_lse/o: null pointer";
  if (p.o_batch_stride < 0 || p.o_head_stride < 0) return "strides: o strides must be >= 0";
  return nullptr;
}

cudaError_t merge_states(const MergeParams& p, cudaStream_t stream) {
  if (merge_check(p) != nullptr) return cudaErrorInvalidValue;
  const int64_t rows = int64_t(p.batch) * p.heads;
  if (rows == 0) return cudaSuccess;
  const int64_t blocks = (rows + detail::kMergeWarps - 1) / detail::kMergeWarps;
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  return KATTN_DISPATCH_BOOL(p.dtype == DType::kBF16, kBF16, [&] {
    return KATTN_DISPATCH_HEAD_DIM(p.head_dim, D, [&] {
      detail::merge_states_kernel<kBF16, D><<<unsigned(blocks), detail::kMergeWarps * 32, 0, stream>>>(p);
      return cudaGetLastError();
    });
  });
}

}  // namespace kattn::cuda
