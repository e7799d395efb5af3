// sm90 forward kernels for head dim 128 (compiled for sm_90a only).
//   variant 0: FwdTraits<128, 128, 2, true> (bf16, fp16)
//   variant 1: kBlockN 176 (bf16)
//   variant 2: FwdTraits<128, 128, 2, false> (bf16): no inter-warpgroup ping-pong
#include "launch.cuh"

namespace kattn::cuda::detail::sm90 {

cudaError_t launch_fwd_sm90_d128(const ForwardParams& p, const TensorMaps& tm, cudaStream_t stream) {
  const bool bf16 = p.dtype == DType::kBF16;
  switch (p.variant) {
    case 0:
      return bf16 ? launch_fwd_causal<true, FwdTraits<128, 128, 2, true>>(p, tm, stream)
                  : launch_fwd_causal<false, FwdTraits<128, 128, 2, true>>(p, tm, stream);
    case 1:
      if (!bf16) return cudaErrorInvalidValue;
      return launch_fwd_causal<true, FwdTraits<128, 176, 2, true>>(p, tm, stream);
    case 2:
      if (!bf16) return cudaErrorInvalidValue;
      return launch_fwd_causal<true, FwdTraits<128, 128, 2, false>>(p, tm, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace kattn::cuda::detail::sm90
