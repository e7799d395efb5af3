// Templated launcher of the sm90 kernel (included by the per-head-dim translation units).
#pragma once

#include "../common/launch.hpp"
#include "../common/validate.hpp"
#include "kernel.cuh"
#include "tma_host.hpp"

namespace kattn::cuda::detail::sm90 {

template <bool kBF16, class Tr, bool kCausal>
cudaError_t launch_fwd(const ForwardParams& p, const TensorMaps& tm, cudaStream_t stream) {
  auto kernel = fwd_sm90_kernel<kBF16, Tr, kCausal>;
  cudaError_t err = set_smem_once(reinterpret_cast<const void*>(kernel), Tr::kSmemBytes);
  if (err != cudaSuccess) return err;
  dim3 grid((p.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM, p.heads_q, p.batch);
  kernel<<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p, tm.q, tm.k, tm.v, score_scale_log2(p.scale, Tr::kHeadDim));
  return cudaGetLastError();
}

template <bool kBF16, class Tr>
cudaError_t launch_fwd_causal(const ForwardParams& p, const TensorMaps& tm, cudaStream_t stream) {
  return p.causal ? launch_fwd<kBF16, Tr, true>(p, tm, stream) : launch_fwd<kBF16, Tr, false>(p, tm, stream);
}

}  // namespace kattn::cuda::detail::sm90
