// kattn::cuda — tiled forward attention launchers (FlashAttention-style).
//
// forward(): validates, picks the kernel family (sm90 wgmma+TMA on compute capability
// 9.0 when possible, else the sm80 mma.sync kernel) and launches on `stream`.
// Returns cudaSuccess, cudaErrorInvalidValue for parameters the kernels do not support
// (forward_check() says why), cudaErrorNoKernelImageForDevice when no kernel family fits
// the current device, or the launch error. Asynchronous like any kernel launch.
//
// Supported: bf16 / fp16 inputs, head_dim 64, 128, 256, any Nq, Nk >= 0, GQA/MQA
// (Hq % Hkv == 0), causal or not, any element strides (sm90 also needs 16-byte aligned
// base pointers and strides; otherwise the sm80 kernel runs).
#pragma once

#include <kattn/cuda/params.hpp>

namespace kattn::cuda {

// Returns nullptr when `p` is supported by the family `p.backend` selects (kAuto: by
// either family), else a human-readable reason naming the argument, e.g.
// "head_dim: expected 64, 128 or 256, got 96".
const char* forward_check(const ForwardParams& p);

// Auto-dispatching forward (see above).
cudaError_t forward(const ForwardParams& p, cudaStream_t stream);

// The two families, callable directly (tests compare them).
cudaError_t forward_sm80(const ForwardParams& p, cudaStream_t stream);
cudaError_t forward_sm90(const ForwardParams& p, cudaStream_t stream);

// True when the sm90 kernel can run p on a device of compute capability 9.0
// (head dim, alignment and TMA stride rules). Writes a reason when not and reason != null.
bool forward_sm90_supported(const ForwardParams& p, const char** reason);

}  // namespace kattn::cuda
