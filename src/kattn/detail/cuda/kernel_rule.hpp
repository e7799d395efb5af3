// How kattn::attention on a CUDA execution space reaches the hand-written kernels: a problem the
// library has validated (AttentionParams, Options) runs on them when they take it, else the
// caller runs the portable Kokkos kernel. The rule, in one place:
//   - q, k, v, o in one 16-bit type (kattn::bf16 or kattn::fp16);
//   - the forward: dense keys and values, lse float [B, Hq, Nq] or none, the full or the causal
//     mask (no window, softcap, ALiBi, bias, block mask or shifted diagonal), scale 0 (1/sqrt(D)) or positive,
//     head dim 64, 128 or 256, strides the kernels accept (forward_check says which), and no split
//     asked for (Options::splits > 1 or split_chunk: the portable split-KV kernel). Then forward()
//     picks the sm90a kernel on compute capability 9.0 and the sm80 one elsewhere;
//   - the split-KV paged decode: a paged cache (kv::paged) with one query per sequence, lse float
//     [B, Hq] or none, no softcap, ALiBi or bias, left window or shifted diagonal (causal is the full mask for a
//     sequence's last query), head dim 64, 128 or 256, a page table and sequences whose indices
//     fit in int32, strides decode_check accepts; Options::splits is its split count (0: its
//     planner), split_chunk stays portable;
//   - ragged batches, cascades, float queries over a 16-bit cache and progress reports stay
//     portable; Options::block_q / block_k tune the portable kernel only.
// Host code, no Kokkos: compiled wherever nvcc is, tested without a GPU.
#pragma once

#include <kattn/cuda/decode.hpp>
#include <kattn/cuda/forward.hpp>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kattn/core/storage.hpp"
#include "kattn/detail/cuda/kernel_params.hpp"

namespace kattn::cuda {

template <class S>
constexpr DType dtype_of() {
  static_assert(std::is_same_v<S, kattn::bf16> || std::is_same_v<S, kattn::fp16>,
                "the CUDA kernels store q, k, v and o in kattn::bf16 or kattn::fp16");
  return std::is_same_v<S, kattn::bf16> ? DType::kBF16 : DType::kFP16;
}

// The kernels' params for p, or why they do not take it (then `out` is not to be used).
template <class S>
const char* dispatch_params(const AttentionParams<S, float>& p, const Options& opt, ForwardParams& out) {
  if (opt.splits > 1 || opt.split_chunk > 0) return "splits: split-KV runs on the portable kernel";
  if (opt.progress) return "progress: reported by the portable kernel";
  if (const char* why = forward_params(p, opt, dtype_of<S>(), out)) return why;
  return forward_check(out);
}

// The decode's params and page table for a paged problem p whose sequences have q_len queries and
// kv_len keys, or why the decode does not take it (then `out` and `table` are not to be used). The
// caller sets the page table's device copies and the workspace (decode_workspace_bytes) in `out`.
template <class S>
const char* dispatch_decode_params(const AttentionParams<S, float>& p, const Options& opt,
                                   const std::vector<std::int64_t>& q_len, const std::vector<std::int64_t>& kv_len,
                                   DecodeParams& out, DecodePageTable& table) {
  if (opt.progress) return "progress: reported by the portable kernel";
  if (const char* why = decode_params(p, opt, q_len, kv_len, dtype_of<S>(), out, table)) return why;
  // Checked with stand-in table pointers: the caller makes the device copies only for a problem
  // the decode takes.
  static const std::int32_t stand_in = 0;
  DecodeParams checked = out;
  checked.kv_page_indptr = checked.kv_page_indices = checked.kv_last_page_len = &stand_in;
  return decode_check(checked);
}

// Runs p on the hand-written kernels on `stream` and returns null, or returns why not having
// launched nothing (a launch that fails after the checks passed is reported too, by its name).
template <class S>
const char* try_forward(const AttentionParams<S, float>& p, const Options& opt, cudaStream_t stream) {
  ForwardParams f;
  if (const char* why = dispatch_params(p, opt, f)) return why;
  const cudaError_t err = forward(f, stream);
  return err == cudaSuccess ? nullptr : cudaGetErrorName(err);
}

}  // namespace kattn::cuda
