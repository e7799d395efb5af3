// kattn::cuda — plain parameter structs for the hand-written CUDA launchers.
//
// Callers without Kokkos fill one of these structs with raw device pointers and
// element strides and call the launcher in forward.hpp / decode.hpp. Nothing here
// needs a CUDA compiler: only cudaError_t / cudaStream_t from the runtime API.
//
// Layout conventions (C order, element strides, last dimension contiguous):
//   q   [B, Nq, Hq, D]     k, v [B, Nk, Hkv, D]     o [B, Nq, Hq, D]
//   lse [B, Hq, Nq]  float32, natural log of the softmax denominator (contiguous)
//   Hq is a multiple of Hkv; query head h uses KV head h / (Hq / Hkv).
// Mask: scores s = scale * q.k; causal is bottom-right aligned: query i sees key j
// iff j <= i + Nk - Nq. A query row that sees no key gets o = 0 and lse = -inf.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kattn::cuda {

// Element type of q, k, v and o. Accumulation is always float32.
enum class DType : int { kBF16 = 0, kFP16 = 1 };

// Which forward kernel family to run. kAuto picks sm90 (wgmma + TMA) on compute
// capability 9.0 when the shape allows it, else the sm80 mma.sync kernel.
enum class ForwardBackend : int { kAuto = 0, kSm80 = 1, kSm90 = 2 };

// Tiled forward attention (FlashAttention-style), one launch.
struct ForwardParams {
  DType dtype = DType::kBF16;
  const void* q = nullptr;  // [B, Nq, Hq, D]
  const void* k = nullptr;  // [B, Nk, Hkv, D]
  const void* v = nullptr;  // [B, Nk, Hkv, D]
  void* o = nullptr;        // [B, Nq, Hq, D], same dtype as q
  float* lse = nullptr;     // [B, Hq, Nq] contiguous, may be null

  int batch = 0, seqlen_q = 0, seqlen_k = 0, heads_q = 0, heads_kv = 0, head_dim = 0;

  // Element strides (the head-dim stride is 1).
  int64_t q_batch_stride = 0, q_seq_stride = 0, q_head_stride = 0;
  int64_t k_batch_stride = 0, k_seq_stride = 0, k_head_stride = 0;
  int64_t v_batch_stride = 0, v_seq_stride = 0, v_head_stride = 0;
  int64_t o_batch_stride = 0, o_seq_stride = 0, o_head_stride = 0;

  float scale = 0.f;  // 0 means 1/sqrt(head_dim); must be > 0 and finite otherwise
  bool causal = false;
  ForwardBackend backend = ForwardBackend::kAuto;
  // Kernel variant for tuning (0 = default). sm90: 1 = kBlockN 176 (D=128, bf16),
  // 2 = no inter-warpgroup ping-pong. Unknown values are refused.
  int variant = 0;

  // Fills the strides for densely packed [B, N, H, D] tensors.
  void set_contiguous_strides() {
    q_head_stride = head_dim;
    q_seq_stride = int64_t(heads_q) * head_dim;
    q_batch_stride = q_seq_stride * seqlen_q;
    k_head_stride = v_head_stride = head_dim;
    k_seq_stride = v_seq_stride = int64_t(heads_kv) * head_dim;
    k_batch_stride = v_batch_stride = k_seq_stride * seqlen_k;
    o_head_stride = q_head_stride;
    o_seq_stride = q_seq_stride;
    o_batch_stride = q_batch_stride;
  }
};

// Split-KV decode over a paged KV cache: one query token per sequence.
//   q [B, Hq, D] -> o [B, Hq, D], lse [B, Hq] (float32, natural log, contiguous).
//   k/v cache [num_pages, page_size, Hkv, D]; sequence b owns the pages
//   kv_page_indices[kv_page_indptr[b] .. kv_page_indptr[b+1]) and has
//   (npages_b - 1) * page_size + kv_last_page_len[b] keys (0 pages = empty).
struct DecodeParams {
  DType dtype = DType::kBF16;
  const void* q = nullptr;
  int64_t q_batch_stride = 0, q_head_stride = 0;
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  int64_t k_page_stride = 0, k_token_stride = 0, k_head_stride = 0;
  int64_t v_page_stride = 0, v_token_stride = 0, v_head_stride = 0;
  const int32_t* kv_page_indptr = nullptr;    // [B + 1], device
  const int32_t* kv_page_indices = nullptr;   // [nnz], device
  const int32_t* kv_last_page_len = nullptr;  // [B], device
  void* o = nullptr;
  int64_t o_batch_stride = 0, o_head_stride = 0;
  float* lse = nullptr;  // [B, Hq] contiguous, may be null

  int batch = 0, heads_q = 0, heads_kv = 0, head_dim = 0, page_size = 0;
  float scale = 0.f;  // 0 means 1/sqrt(head_dim); must be finite and non-zero otherwise

  // Number of KV splits. 0: plan with plan_num_splits() from max_seqlen_hint.
  int num_splits = 0;
  int max_seqlen_hint = 0;
  // Device workspace for the per-split partial states (decode_workspace_bytes()).
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  // Number of multiprocessors for the planner (0: read it from the current device).
  int num_sms = 0;

  // Strides for a dense q/o [B, Hq, D] and a dense cache [pages, page_size, Hkv, D].
  void set_contiguous_strides() {
    q_head_stride = o_head_stride = head_dim;
    q_batch_stride = o_batch_stride = int64_t(heads_q) * head_dim;
    k_head_stride = v_head_stride = head_dim;
    k_token_stride = v_token_stride = int64_t(heads_kv) * head_dim;
    k_page_stride = v_page_stride = k_token_stride * page_size;
  }
};

// Merge of per-split partial states (the split-KV reduction), one launch.
//   partial_o   [num_splits, B, H, D] float32, each normalised (o / l of its split)
//   partial_lse [num_splits, B, H]    float32, natural log; -inf marks an empty split
//   -> o [B, H, D] (dtype, strides below), lse [B, H] float32 (may be null).
struct MergeParams {
  DType dtype = DType::kBF16;
  const float* partial_o = nullptr;
  const float* partial_lse = nullptr;
  int num_splits = 0, batch = 0, heads = 0, head_dim = 0;
  void* o = nullptr;
  int64_t o_batch_stride = 0, o_head_stride = 0;
  float* lse = nullptr;
};

}  // namespace kattn::cuda
