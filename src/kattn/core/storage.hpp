// 16-bit storage types and the one rule for moving values between storage and the accumulation
// type. kattn stores q, k, v, o (and KV caches) in float, double, bf16 or fp16 and computes in
// accumulate_t<T>: float for the 16-bit types (FlashAttention's convention), the type itself
// otherwise. Scores, softmax states, lse and split workspaces are always in the accumulation type.
//
// kattn has its own two types rather than Kokkos' half_t / bhalf_t: in host-only builds Kokkos 3.4
// makes half_t a float (4 bytes) and has no bhalf_t, so neither can view a float16 array. Both are
// bit-compatible with IEEE binary16 / bfloat16 (and with CUDA's __half / __nv_bfloat16, so the
// hand-written kernels take the same memory). Conversions round to nearest even and keep NaN a NaN
// (a quiet one) and infinities infinite. No Kokkos here: includable from nvcc alike.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kattn/core/host_device.hpp"

// Host compilers with a native half type (GCC >= 12 and Clang on x86-64 and AArch64) convert
// fp16 with the CPU's instructions (F16C / AVX-512 vcvtph2ps); device passes use the bit rules.
#if defined(__FLT16_MAX__) && !defined(__CUDA_ARCH__) && !defined(__HIP_DEVICE_COMPILE__) && \
    !defined(__SYCL_DEVICE_ONLY__)
#define KATTN_NATIVE_FLOAT16 1
#else
#define KATTN_NATIVE_FLOAT16 0
#endif

namespace kattn {

// bfloat16: the upper half of a float (8 exponent bits, 7 mantissa bits).
struct bf16 {
  std::uint16_t bits;
};
// IEEE binary16 (5 exponent bits, 10 mantissa bits).
struct fp16 {
  std::uint16_t bits;
};

template <class T>
struct is_16bit : std::false_type {};
template <>
struct is_16bit<bf16> : std::true_type {};
template <>
struct is_16bit<fp16> : std::true_type {};
template <class T>
constexpr bool is_16bit_v = is_16bit<T>::value;

// The type a kernel computes in for storage type T.
template <class T>
struct accumulate {
  using type = T;
};
template <>
struct accumulate<bf16> {
  using type = float;
};
template <>
struct accumulate<fp16> {
  using type = float;
};
template <class T>
using accumulate_t = typename accumulate<T>::type;

// The name users write for a storage type (CLI --dtype, messages).
template <class T>
constexpr const char* storage_name() {
  if constexpr (std::is_same_v<T, float>) return "f32";
  if constexpr (std::is_same_v<T, double>) return "f64";
  if constexpr (std::is_same_v<T, bf16>) return "bf16";
  if constexpr (std::is_same_v<T, fp16>) return "f16";
  return "unknown";
}

namespace core {

// The bits of `from` as a To, in host and device code (HIP's device pass has no std::memcpy;
// clang's builtin is the same copy there).
template <class To, class From>
KATTN_CORE_INLINE To bit_copy(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "bit_copy: the types must have one size");
  To to;
#if defined(__HIP_DEVICE_COMPILE__)
  __builtin_memcpy(&to, &from, sizeof to);
#else
  std::memcpy(&to, &from, sizeof to);
#endif
  return to;
}

KATTN_CORE_INLINE float float_from_bits(std::uint32_t u) { return bit_copy<float>(u); }
KATTN_CORE_INLINE std::uint32_t bits_of(float f) { return bit_copy<std::uint32_t>(f); }

// binary16 bits to float, exactly (every binary16 value is a float).
KATTN_CORE_INLINE float fp16_bits_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t man = h & 0x3ffu;
  if (exp == 0x1f)  // Inf; NaN quiet with its payload, as the hardware conversions do
    return float_from_bits(sign | 0x7f800000u | (man ? 0x400000u | (man << 13) : 0u));
  if (exp != 0) return float_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
  if (man == 0) return float_from_bits(sign);  // +-0
  // Subnormal: man * 2^-24, normalised.
  int e = -1;
  do {
    man <<= 1;
    ++e;
  } while ((man & 0x400u) == 0);
  return float_from_bits(sign | (std::uint32_t(112 - e) << 23) | ((man & 0x3ffu) << 13));
}

// float to binary16 bits, round to nearest even; overflow to Inf, NaN stays a quiet NaN.
KATTN_CORE_INLINE std::uint16_t float_to_fp16_bits(float f) {
  const std::uint32_t u = bits_of(f);
  const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds past 65504: Inf
  if (a >= 0x38800000u) {                                                   // normal in binary16
    const std::uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
    return static_cast<std::uint16_t>(sign | (r >> 13));
  }
  if (a < 0x33000000u) return sign;  // below half the smallest subnormal: +-0
  // Subnormal: shift the mantissa (with its implicit bit) right, rounding to nearest even.
  const std::uint32_t e = a >> 23;
  const std::uint32_t m = (a & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - e;  // 14 .. 24
  const std::uint32_t half = 1u << (shift - 1);
  const std::uint32_t rest = m & ((1u << shift) - 1u);
  std::uint32_t r = m >> shift;
  if (rest > half || (rest == half && (r & 1u))) ++r;
  return static_cast<std::uint16_t>(sign | r);
}

// float to bfloat16 bits, round to nearest even; NaN stays a quiet NaN.
KATTN_CORE_INLINE std::uint16_t float_to_bf16_bits(float f) {
  const std::uint32_t u = bits_of(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  return static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

}  // namespace core

// Storage to the accumulation type: exact.
KATTN_CORE_INLINE float widen(float x) { return x; }
KATTN_CORE_INLINE double widen(double x) { return x; }
KATTN_CORE_INLINE float widen(bf16 x) { return core::float_from_bits(std::uint32_t(x.bits) << 16); }
KATTN_CORE_INLINE float widen(fp16 x) {
#if KATTN_NATIVE_FLOAT16
  _Float16 h;
  std::memcpy(&h, &x.bits, sizeof h);
  return static_cast<float>(h);
#else
  return core::fp16_bits_to_float(x.bits);
#endif
}

// The accumulation type (or any float or double) to storage type S, rounded to nearest even.
template <class S>
KATTN_CORE_INLINE S narrow(double x);
template <class S>
KATTN_CORE_INLINE S narrow(float x);
template <>
KATTN_CORE_INLINE float narrow<float>(float x) {
  return x;
}
template <>
KATTN_CORE_INLINE double narrow<double>(float x) {
  return x;
}
template <>
KATTN_CORE_INLINE double narrow<double>(double x) {
  return x;
}
template <>
KATTN_CORE_INLINE float narrow<float>(double x) {
  return static_cast<float>(x);
}
template <>
KATTN_CORE_INLINE bf16 narrow<bf16>(float x) {
  return bf16{core::float_to_bf16_bits(x)};
}
template <>
KATTN_CORE_INLINE fp16 narrow<fp16>(float x) {
#if KATTN_NATIVE_FLOAT16
  const _Float16 h = static_cast<_Float16>(x);
  fp16 r;
  std::memcpy(&r.bits, &h, sizeof h);
  return r;
#else
  return fp16{core::float_to_fp16_bits(x)};
#endif
}
// From double through float: a second rounding, only for inputs made in double (random test data,
// .npy files of float64 read as 16-bit); every value then compared is the stored 16-bit one.
template <>
KATTN_CORE_INLINE bf16 narrow<bf16>(double x) {
  return narrow<bf16>(static_cast<float>(x));
}
template <>
KATTN_CORE_INLINE fp16 narrow<fp16>(double x) {
  return narrow<fp16>(static_cast<float>(x));
}

}  // namespace kattn
