// The plain description of one backward problem: the forward's AttentionParams (q, k, v, o,
// lse and the dense or ragged addressing) plus the upstream gradient dO and the three gradients.
// dO and dQ are addressed like q and o; dK and dV like k and v. Kernels trust it; the public
// entry points (backward.hpp) fill and validate it.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "kattn/core/attention_params.hpp"

namespace kattn {

template <class T>
struct BackwardParams {
  AttentionParams<T> fwd;  // o and lse are inputs here (lse required, natural log)

  const T* dout = nullptr;  // dO, like q: (b, i, h, d)
  std::int64_t do_stride_batch = 0, do_stride_seq = 0, do_stride_head = 0;
  T* dq = nullptr;  // like q
  std::int64_t dq_stride_batch = 0, dq_stride_seq = 0, dq_stride_head = 0;
  T* dk = nullptr;  // like k: (b, j, h_kv, d)
  std::int64_t dk_stride_batch = 0, dk_stride_seq = 0, dk_stride_head = 0;
  T* dv = nullptr;  // like v
  std::int64_t dv_stride_batch = 0, dv_stride_seq = 0, dv_stride_head = 0;

  // Offset of query row i of sequence b (dense or ragged) for a q-like array's strides.
  KOKKOS_INLINE_FUNCTION std::int64_t q_offset(int b, std::int64_t i, std::int64_t stride_batch,
                                               std::int64_t stride_seq) const {
    return fwd.q_indptr ? (fwd.q_indptr[b] + i) * stride_seq : b * stride_batch + i * stride_seq;
  }
  KOKKOS_INLINE_FUNCTION const T* do_ptr(int b, std::int64_t i, int h) const {
    return dout + q_offset(b, i, do_stride_batch, do_stride_seq) + h * do_stride_head;
  }
  KOKKOS_INLINE_FUNCTION T* dq_ptr(int b, std::int64_t i, int h) const {
    return dq + q_offset(b, i, dq_stride_batch, dq_stride_seq) + h * dq_stride_head;
  }
  KOKKOS_INLINE_FUNCTION T* dk_ptr(int b, std::int64_t j, int h) const {
    return dk + fwd.kv_offset(b, j, dk_stride_batch, dk_stride_seq) + h * dk_stride_head;
  }
  KOKKOS_INLINE_FUNCTION T* dv_ptr(int b, std::int64_t j, int h) const {
    return dv + fwd.kv_offset(b, j, dv_stride_batch, dv_stride_seq) + h * dv_stride_head;
  }
};

}  // namespace kattn
