// sm90 forward kernels for head dim 256 (compiled for sm_90a only).
//   variant 0: FwdTraits<256, 64, 2, true> (bf16, fp16)
//   variant 1: not available
//   variant 2: FwdTraits<256, 64, 2, false> (bf16): no inter-warpgroup ping-pong
#include "launch.cuh"

namespace kattn::cuda::detail::sm90 {

cudaError_t launch_fwd_sm90_d256(const ForwardParams& p, const TensorMaps& tm, cudaStream_t stream) {
  const bool bf16 = p.dtype == DType::kBF16;
  switch (p.variant) {
    case 0:
      return bf16 ? launch_fwd_causal<true, FwdTraits<256, 64, 2, true>>(p, tm, stream)
                  : launch_fwd_causal<false, FwdTraits<256, 64, 2, true>>(p, tm, stream);
    case 1:
      return cudaErrorInvalidValue;
    case 2:
      if (!bf16) return cudaErrorInvalidValue;
      return launch_fwd_causal<true, FwdTraits<256, 64, 2, false>>(p, tm, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace kattn::cuda::detail::sm90
