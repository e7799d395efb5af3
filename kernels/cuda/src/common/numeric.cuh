// Element-type helpers: packing float pairs into bf16x2 / f16x2 and unpacking 16-byte
// vectors of 8 elements into floats.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace kattn::cuda::detail {

template <bool kBF16>
struct Elem;
template <>
struct Elem<true> {
  using type = __nv_bfloat16;
};
template <>
struct Elem<false> {
  using type = __half;
};

// Round-to-nearest-even pack: low 16 bits = lo, high 16 bits = hi (PTX cvt.rn.bf16x2.f32
// / cvt.rn.f16x2.f32 put the FIRST source operand in the upper half).
template <bool kBF16>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (kBF16) {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

template <bool kBF16>
__device__ __forceinline__ float2 unpack2(uint32_t v) {
  if constexpr (kBF16) {
    __nv_bfloat162 h = *reinterpret_cast<__nv_bfloat162*>(&v);
    return __bfloat1622float2(h);
  } else {
    __half2 h = *reinterpret_cast<__half2*>(&v);
    return __half22float2(h);
  }
}

template <bool kBF16>
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
  float2 a = unpack2<kBF16>(v.x), b = unpack2<kBF16>(v.y), c = unpack2<kBF16>(v.z), d = unpack2<kBF16>(v.w);
  f[0] = a.x; f[1] = a.y; f[2] = b.x; f[3] = b.y;
  f[4] = c.x; f[5] = c.y; f[6] = d.x; f[7] = d.y;
}

template <bool kBF16>
__device__ __forceinline__ uint4 pack8(const float (&f)[8]) {
  return make_uint4(pack2<kBF16>(f[0], f[1]), pack2<kBF16>(f[2], f[3]), pack2<kBF16>(f[4], f[5]),
                    pack2<kBF16>(f[6], f[7]));
}

}  // namespace kattn::cuda::detail
