// How kattn::attention on a CUDA execution space reaches the hand-written kernels: a problem the
// library has validated (AttentionParams, Options) runs on them when they take it, else the
// caller runs the portable Kokkos kernel. The rule, in one place:
//   - q, k, v, o in one 16-bit type (kattn::bf16 or kattn::fp16), lse float [B, Hq, Nq] or none;
//   - dense keys and values (ragged batches, paged caches and cascades stay portable);
//   - the full or the causal mask, no window, softcap, block mask or shifted diagonal;
//   - scale 0 (1/sqrt(D)) or positive; head dim 64, 128 or 256; strides the kernels accept
//     (forward_check says which);
//   - no split asked for (Options::splits > 1 or split_chunk: the portable split-KV kernel);
//     Options::block_q / block_k tune the portable kernel only.
// Then forward() picks the sm90a kernel on compute capability 9.0 and the sm80 one elsewhere.
// Host code, no Kokkos: compiled wherever nvcc is, tested without a GPU.
#pragma once

#include <kattn/cuda/forward.hpp>
#include <kattn/cuda/library_params.hpp>
#include <type_traits>

#include "kattn/core/storage.hpp"

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
