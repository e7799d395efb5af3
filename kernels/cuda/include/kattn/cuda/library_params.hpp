// The hand-written kernels' params built from the library's (kattn/core/attention_params.hpp and
// kattn/options.hpp): how kattn::attention on a CUDA space hands a problem to them. Each builder
// returns null and fills `out`, or says why the kernels do not take the problem (then the portable
// Kokkos kernel runs it). Host code, no Kokkos, no CUDA compiler needed.
#pragma once

#include <kattn/cuda/params.hpp>

#include <climits>
#include <cstdint>

#include "kattn/core/attention_params.hpp"
#include "kattn/core/key_window.hpp"
#include "kattn/options.hpp"

namespace kattn::cuda {

// The forward kernels take dense [B, N, H, D] q, k, v, o of one 16-bit type (S, named by dtype),
// lse [B, Hq, Nq] float contiguous or none, the full or the causal mask, no softcap, block mask or
// shifted diagonal. Shapes the kernels refuse for other reasons (head dims, alignment) are told by
// forward_check on the result.
template <class S>
const char* forward_params(const AttentionParams<S, float>& p, const Options& opt, DType dtype, ForwardParams& out) {
  static_assert(sizeof(S) == 2, "the CUDA kernels store q, k, v and o in 16 bits (bf16 or fp16)");
  if (p.q_indptr || p.kv_indptr) return "kv: ragged batches run on the portable kernel";
  if (p.kv_page_indptr) return "kv: paged caches run on the portable kernel (the CUDA decode takes them)";
  if (opt.block_mask) return "block_mask: runs on the portable kernel";
  if (opt.softcap != 0.0) return "softcap: runs on the portable kernel";
  const KeyWindow w = KeyWindow::from(opt);
  if (w.shift != 0) return "diagonal_shift: runs on the portable kernel";
  if (w.left >= 0 || w.right > 0) return "window: only the full and the causal mask run on CUDA";
  if (p.q_len > INT_MAX || p.kv_len > INT_MAX) return "seq_len: more than 2^31 - 1 positions";
  if (p.lse && (p.lse_stride_seq != 1 || p.lse_stride_head != p.q_len ||
                p.lse_stride_batch != std::int64_t(p.heads_q) * p.q_len))
    return "lse: the CUDA kernels write [B, Hq, Nq] contiguous";
  ForwardParams f;
  f.dtype = dtype;
  f.q = p.q;
  f.k = p.k;
  f.v = p.v;
  f.o = p.o;
  f.lse = p.lse;
  f.batch = p.batch;
  f.seqlen_q = static_cast<int>(p.q_len);
  f.seqlen_k = static_cast<int>(p.kv_len);
  f.heads_q = p.heads_q;
  f.heads_kv = p.heads_kv;
  f.head_dim = p.head_dim;
  f.q_batch_stride = p.q_stride_batch, f.q_seq_stride = p.q_stride_seq, f.q_head_stride = p.q_stride_head;
  f.k_batch_stride = p.k_stride_batch, f.k_seq_stride = p.k_stride_seq, f.k_head_stride = p.k_stride_head;
  f.v_batch_stride = p.v_stride_batch, f.v_seq_stride = p.v_stride_seq, f.v_head_stride = p.v_stride_head;
  f.o_batch_stride = p.o_stride_batch, f.o_seq_stride = p.o_stride_seq, f.o_head_stride = p.o_stride_head;
  f.scale = static_cast<float>(opt.scale);
  f.causal = w.right == 0;
  out = f;
  return nullptr;
}

}  // namespace kattn::cuda
