// Launcher and instantiations of the sm80 forward kernel (compiled for sm_80 and sm_90).
#include <kattn/cuda/forward.hpp>

#include "../common/dispatch.hpp"
#include "../common/launch.hpp"
#include "../common/validate.hpp"
#include "fwd_kernel.cuh"

namespace kattn::cuda {

namespace {

template <bool kBF16, int D, bool kCausal>
cudaError_t launch_sm80(const ForwardParams& p, cudaStream_t stream) {
  using Tr = detail::Sm80FwdTraits<D>;
  auto kernel = detail::fwd_sm80_kernel<kBF16, D, kCausal>;
  cudaError_t err = detail::set_smem_once(reinterpret_cast<const void*>(kernel), Tr::kSmemBytes);
  if (err != cudaSuccess) return err;
  dim3 grid((p.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM, p.heads_q, p.batch);
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p, detail::score_scale_log2(p.scale, D));
  return cudaGetLastError();
}

}  // namespace

cudaError_t forward_sm80(const ForwardParams& p, cudaStream_t stream) {
  if (detail::forward_common_check(p) != nullptr) return cudaErrorInvalidValue;
  if (p.variant != 0) return cudaErrorInvalidValue;
  if (p.batch == 0 || p.seqlen_q == 0 || p.heads_q == 0) return cudaSuccess;
  return KATTN_DISPATCH_BOOL(p.dtype == DType::kBF16, kBF16, [&] {
    return KATTN_DISPATCH_HEAD_DIM(p.head_dim, D, [&] {
      return KATTN_DISPATCH_BOOL(p.causal, kCausal, [&] { return launch_sm80<kBF16, D, kCausal>(p, stream); });
    });
  });
}

}  // namespace kattn::cuda
