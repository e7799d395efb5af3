// Host SIMD through the compiler's vector extensions (GCC/Clang): one vector is one register of
// the widest ISA the compiler targets (AVX-512: 64 bytes, AVX/AVX2: 32, else 16), so that the
// micro-kernels' accumulator arrays stay in registers and no vector crosses an ABI it lacks.
// Device code, compilers without the extension and device-shaped host builds use the scalar
// paths next to each use. nvcc and hipcc define __CUDACC__ / __HIPCC__ in the host pass too: the
// test is on the device pass (KATTN_DEVICE_COMPILE), so that a GPU build's host spaces keep SIMD.
// -DKATTN_HOST_SIMD=0 forces the scalar paths on a host whose tuning stays the host's.
#pragma once

#include "kattn/compat.hpp"
#include "kattn/config.hpp"

#ifndef KATTN_HOST_SIMD
#if defined(__GNUC__) && !KATTN_DEVICE_COMPILE && !KATTN_DEVICE_SHAPED_HOST && !defined(__NVCOMPILER)
#define KATTN_HOST_SIMD 1
#else
#define KATTN_HOST_SIMD 0
#endif
#endif

#if KATTN_HOST_SIMD
#include <cstdint>
#include <cstring>

namespace kattn {
namespace detail {
namespace simd {

#if defined(__AVX512F__)
constexpr int kBytes = 64;
constexpr int kRegisters = 32;
#elif defined(__AVX__)
constexpr int kBytes = 32;
constexpr int kRegisters = 16;
#else
constexpr int kBytes = 16;
constexpr int kRegisters = 16;
#endif

template <class T>
struct Vec {
  typedef T type __attribute__((vector_size(kBytes)));
};
template <class T>
struct IntOf;
template <>
struct IntOf<float> {
  typedef std::int32_t type __attribute__((vector_size(kBytes)));
};
template <>
struct IntOf<double> {
  typedef std::int64_t type __attribute__((vector_size(kBytes)));
};

template <class T>
using vec = typename Vec<T>::type;
template <class T>
using ivec = typename IntOf<T>::type;

template <class T>
constexpr int width() {
  return kBytes / static_cast<int>(sizeof(T));
}

template <class T>
inline vec<T> load(const T* p) {
  vec<T> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <class T>
inline void store(T* p, const vec<T>& v) {
  std::memcpy(p, &v, sizeof(v));
}
template <class T>
inline vec<T> splat(T x) {
  return vec<T>{} + x;
}

}  // namespace simd
}  // namespace detail
}  // namespace kattn
#endif
