// Host side of the sm90 kernel: TMA tensor maps for q, k, v, encoded through the driver
// entry point cuTensorMapEncodeTiled (got with cudaGetDriverEntryPointByVersion, so the
// library does not link libcuda).
#pragma once

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <kattn/cuda/params.hpp>

namespace kattn::cuda::detail::sm90 {

struct TensorMaps {
  CUtensorMap q, k, v;
};

// Encodes 4-d maps (D, H, N, B) with boxes (64, 1, rows, 1) and 128-byte swizzle.
// Returns cudaErrorInvalidValue when the driver refuses a map.
cudaError_t make_tensor_maps(const ForwardParams& p, int block_m, int block_n, TensorMaps* out);

// Per head-dim launchers (one translation unit each, compiled for sm_90a).
cudaError_t launch_fwd_sm90_d64(const ForwardParams& p, const TensorMaps& tm, cudaStream_t stream);
cudaError_t launch_fwd_sm90_d128(const ForwardParams& p, const TensorMaps& tm, cudaStream_t stream);
cudaError_t launch_fwd_sm90_d256(const ForwardParams& p, const TensorMaps& tm, cudaStream_t stream);

// Key-tile rows (the K/V box height) of the configuration p selects.
int sm90_block_n(const ForwardParams& p);

}  // namespace kattn::cuda::detail::sm90
