// Shared host-side validation of the forward parameters (messages name the argument).
#pragma once

#include <kattn/cuda/params.hpp>

#include <cmath>
#include <cstdint>

#include "kattn/core/score_scaling.hpp"

namespace kattn::cuda::detail {

inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// Checks common to both forward families. Returns nullptr or a static message.
inline const char* forward_common_check(const ForwardParams& p) {
  if (p.dtype != DType::kBF16 && p.dtype != DType::kFP16) return "dtype: expected kBF16 or kFP16";
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256)
    return "head_dim: expected 64, 128 or 256";
  if (p.batch < 0 || p.seqlen_q < 0 || p.seqlen_k < 0 || p.heads_q < 0 || p.heads_kv < 0)
    return "shape: batch, seqlen_q, seqlen_k, heads_q and heads_kv must be >= 0";
  if (p.batch > 65535) return "batch: at most 65535 (grid z extent)";
  if (p.heads_q > 65535) return "heads_q: at most 65535 (grid y extent)";
  if (p.heads_q > 0 && (p.heads_kv <= 0 || p.heads_q % p.heads_kv != 0))
    return "heads_kv: heads_q must be a positive multiple of heads_kv";
  if (!(p.scale >= 0.f) || !std::isfinite(p.scale)) return "scale: expected a finite value > 0 (or 0 for 1/sqrt(D))";
  const bool empty = p.batch == 0 || p.seqlen_q == 0 || p.heads_q == 0;
  if (empty) return nullptr;
  if (!p.q || !p.o) return "q/o: null pointer";
  if (p.seqlen_k > 0 && (!p.k || !p.v)) return "k/v: null pointer";
  if (!aligned16(p.q) || !aligned16(p.k) || !aligned16(p.v) || !aligned16(p.o))
    return "q/k/v/o: base pointers must be 16-byte aligned";
  const int64_t s[] = {p.q_batch_stride, p.q_seq_stride, p.q_head_stride, p.k_batch_stride,
                       p.k_seq_stride,   p.k_head_stride, p.v_batch_stride, p.v_seq_stride,
                       p.v_head_stride,  p.o_batch_stride, p.o_seq_stride, p.o_head_stride};
  for (int64_t x : s)
    if (x < 0 || x % 8 != 0) return "strides: element strides must be >= 0 and multiples of 8 (16-byte rows)";
  return nullptr;
}

// What q is multiplied by, in log2 units: the library's one score scaling (core/score_scaling.hpp;
// scale 0 means 1/sqrt(head_dim)).
inline float score_scale_log2(float scale, int head_dim) {
  return static_cast<float>(ScoreScaling::make(head_dim, scale, 0.0).q_scale);
}

}  // namespace kattn::cuda::detail
