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

  Operand<const T> dout;  // dO, like q: (b, i, h, d)
  Operand<T> dq;          // like q
  Operand<T> dk, dv;      // like k: (b, j, h_kv, d)
  // q, k, v and dO hold finite bf16 values (a bf16 call's float copies) and the call's CPU products
  // are bf16 dot products: the key pass may multiply them as bf16 pairs, rounding P and dS to bf16
  // (detail/backward_key_pass.hpp). Host spaces in float only.
  bool pair_products = false;

  KOKKOS_INLINE_FUNCTION const T* do_ptr(int b, std::int64_t i, int h) const { return fwd.q_row_ptr(dout, b, i, h); }
  KOKKOS_INLINE_FUNCTION T* dq_ptr(int b, std::int64_t i, int h) const { return fwd.q_row_ptr(dq, b, i, h); }
  KOKKOS_INLINE_FUNCTION T* dk_ptr(int b, std::int64_t j, int h) const { return fwd.kv_row_ptr(dk, b, j, h); }
  KOKKOS_INLINE_FUNCTION T* dv_ptr(int b, std::int64_t j, int h) const { return fwd.kv_row_ptr(dv, b, j, h); }
};

}  // namespace kattn
