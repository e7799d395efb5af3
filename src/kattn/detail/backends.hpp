// Explicit instantiation over every enabled Kokkos backend: the library compiles each kernel
// once per backend and scalar type, so users' code and the CLI compile fast.
#pragma once

#include <Kokkos_Core.hpp>

#include "kattn/compat.hpp"

#ifdef KOKKOS_ENABLE_SERIAL
#define KATTN_IF_SERIAL(M, T) M(Kokkos::Serial, T)
#else
#define KATTN_IF_SERIAL(M, T)
#endif
#ifdef KOKKOS_ENABLE_OPENMP
#define KATTN_IF_OPENMP(M, T) M(Kokkos::OpenMP, T)
#else
#define KATTN_IF_OPENMP(M, T)
#endif
#ifdef KOKKOS_ENABLE_THREADS
#define KATTN_IF_THREADS(M, T) M(Kokkos::Threads, T)
#else
#define KATTN_IF_THREADS(M, T)
#endif
#ifdef KOKKOS_ENABLE_CUDA
#define KATTN_IF_CUDA(M, T) M(Kokkos::Cuda, T)
#else
#define KATTN_IF_CUDA(M, T)
#endif
#ifdef KOKKOS_ENABLE_HIP
#define KATTN_IF_HIP(M, T) M(kattn::compat::HIP, T)
#else
#define KATTN_IF_HIP(M, T)
#endif

// M(ExecSpace, Scalar) for every enabled backend and Scalar in {float, double}.
#define KATTN_INSTANTIATE_FOR_BACKENDS_T(M, T) \
  KATTN_IF_SERIAL(M, T)                        \
  KATTN_IF_OPENMP(M, T)                        \
  KATTN_IF_THREADS(M, T)                       \
  KATTN_IF_CUDA(M, T)                          \
  KATTN_IF_HIP(M, T)
#define KATTN_INSTANTIATE_FOR_BACKENDS(M)     \
  KATTN_INSTANTIATE_FOR_BACKENDS_T(M, float) \
  KATTN_INSTANTIATE_FOR_BACKENDS_T(M, double)
