// The units of work an execution space runs at once: what the split planner fills, and what the
// row tiles unpack their KV heads for.
#pragma once

#include <Kokkos_Core.hpp>
#include <type_traits>

namespace kattn {

// Units of work the execution space runs at once, for the planner: streaming multiprocessors on
// CUDA, compute units on HIP, threads on the host backends.
template <class ExecSpace>
int processors(const ExecSpace& space) {
#ifdef KOKKOS_ENABLE_CUDA
  if constexpr (std::is_same<ExecSpace, Kokkos::Cuda>::value) {
    int n = 0;
    cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, space.cuda_device());
    return n > 0 ? n : 1;
  }
#endif
#if defined(KOKKOS_ENABLE_HIP) && KOKKOS_VERSION >= 40000
  if constexpr (std::is_same<ExecSpace, Kokkos::HIP>::value) {
    int n = 0;
    (void)hipDeviceGetAttribute(&n, hipDeviceAttributeMultiprocessorCount, space.hip_device());
    return n > 0 ? n : 1;
  }
#endif
  const int n = space.concurrency();
  return n > 0 ? n : 1;
}

}  // namespace kattn
