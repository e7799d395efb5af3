// The one macro that lets the core (state algebra, key window, score scaling) be called from a
// Kokkos functor, from the MPI reduction operator and from a .cu file compiled by nvcc without
// Kokkos, plus the few math functions it needs. No Kokkos here.
#pragma once

#include <cmath>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define KATTN_HOST_DEVICE __host__ __device__
#else
#define KATTN_HOST_DEVICE
#endif
#define KATTN_CORE_INLINE KATTN_HOST_DEVICE inline

namespace kattn {
namespace core {

template <class T>
KATTN_CORE_INLINE constexpr T infinity();
template <>
KATTN_CORE_INLINE constexpr float infinity<float>() {
  return __builtin_huge_valf();
}
template <>
KATTN_CORE_INLINE constexpr double infinity<double>() {
  return __builtin_huge_val();
}

// The C functions, which nvcc and hipcc provide on both sides (std:: overloads are host-only
// there without relaxed constexpr).
KATTN_CORE_INLINE float exp2(float x) { return ::exp2f(x); }
KATTN_CORE_INLINE double exp2(double x) { return ::exp2(x); }
KATTN_CORE_INLINE float log2(float x) { return ::log2f(x); }
KATTN_CORE_INLINE double log2(double x) { return ::log2(x); }
KATTN_CORE_INLINE float tanh(float x) { return ::tanhf(x); }
KATTN_CORE_INLINE double tanh(double x) { return ::tanh(x); }

}  // namespace core
}  // namespace kattn
