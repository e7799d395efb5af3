// Host helpers shared by the launchers.
#pragma once

#include <cuda_runtime_api.h>

#include <mutex>
#include <set>
#include <utility>

namespace kattn::cuda::detail {

// Raises a kernel's dynamic shared-memory limit once per (device, kernel): later launches,
// for example during CUDA graph capture, make no attribute call.
inline cudaError_t set_smem_once(const void* kernel, int bytes) {
  static std::mutex mu;
  static std::set<std::pair<int, const void*>> done;
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  std::lock_guard<std::mutex> lock(mu);
  if (done.count({dev, kernel})) return cudaSuccess;
  err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (err == cudaSuccess) done.insert({dev, kernel});
  return err;
}

inline cudaError_t device_cc(int* major, int* minor) {
  int dev = 0;
  cudaError_t err = cudaGetDevice(&dev);
  if (err != cudaSuccess) return err;
  err = cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, dev);
  if (err != cudaSuccess) return err;
  return cudaDeviceGetAttribute(minor, cudaDevAttrComputeCapabilityMinor, dev);
}

inline int device_sm_count() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 0;
  return n;
}

// Shared memory of one SM for its resident blocks, in bytes (0 without a device).
inline int device_smem_per_sm() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev) != cudaSuccess) return 0;
  return n;
}

}  // namespace kattn::cuda::detail
