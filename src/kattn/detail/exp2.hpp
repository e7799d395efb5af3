// exp2 for the softmax: one per score, so it must vectorise. On the host a polynomial on
// 64-byte vectors (FlashAttention-3 and ThunderKittens work in base 2 for the same reason);
// on devices the platform's exp2. Exact at the ends the state algebra needs: 2^-inf = 0 and
// NaN stays NaN.
#pragma once

#include "kattn/compat.hpp"
#include "kattn/detail/simd.hpp"

namespace kattn {
namespace detail {

#if KATTN_HOST_SIMD
// 2^x = 2^n * 2^f with n = round(x), |f| <= 1/2, 2^f by its Taylor series in f ln 2, truncated
// where the remainder drops below the type's rounding: degree 7 for float (relative error
// < 6e-9 before rounding), degree 13 for double (< 5e-18). Results below the smallest normal
// flush to 0, which only ever drops terms < 1e-38 (float) next to a row maximum of weight 1.
template <class T>
struct Exp2Traits;
template <>
struct Exp2Traits<float> {
  static constexpr int degree = 7;
  static constexpr int mantissa_bits = 23;
  static constexpr int bias = 127;
  static constexpr float lowest = -126.0f;
  static constexpr float highest = 128.0f;
  static constexpr float round_magic = 12582912.0f;  // 1.5 * 2^23: x + magic rounds x to an integer
};
template <>
struct Exp2Traits<double> {
  static constexpr int degree = 13;
  static constexpr int mantissa_bits = 52;
  static constexpr int bias = 1023;
  static constexpr double lowest = -1022.0;
  static constexpr double highest = 1024.0;
  static constexpr double round_magic = 6755399441055744.0;  // 1.5 * 2^52
};

// Taylor coefficients (ln 2)^k / k!, k = 0..13.
constexpr double kExp2Taylor[14] = {1.0,
                                    0.69314718055994530942,
                                    0.24022650695910071233,
                                    0.055504108664821579953,
                                    0.0096181291076284771620,
                                    0.0013333558146428443423,
                                    0.00015403530393381609955,
                                    1.5252733804059840280e-05,
                                    1.3215486790144309489e-06,
                                    1.0178086009239699728e-07,
                                    7.0549116208011233298e-09,
                                    4.4455382718708114976e-10,
                                    2.5678435993488205165e-11,
                                    1.3691488853904124947e-12};

template <class T>
inline simd::vec<T> exp2(simd::vec<T> x) {
  using V = simd::vec<T>;
  using I = simd::ivec<T>;
  using E = Exp2Traits<T>;
  const V x_hi = x > E::highest ? simd::splat<T>(E::highest) : x;  // NaN compares false: kept
  const V x_cl = x_hi < E::lowest ? simd::splat<T>(E::lowest) : x_hi;
  const V shifted = x_cl + E::round_magic;
  const V n = shifted - E::round_magic;
  const V f = x_cl - n;
  V p = simd::splat<T>(static_cast<T>(kExp2Taylor[E::degree]));
  for (int k = E::degree - 1; k >= 0; --k) p = p * f + static_cast<T>(kExp2Taylor[k]);
  // The low mantissa bits of `shifted` hold n; move them into the exponent field.
  // (A cast between vector types of one size reinterprets the bits.)
  const I n_bits = (I)shifted;
  const I scale_bits = (n_bits + E::bias) << E::mantissa_bits;
  const V r = p * (V)scale_bits;
  return x < E::lowest ? simd::splat<T>(T(0)) : r;
}

// The scalar companion, the same arithmetic so that vector and tail lanes agree.
template <class T>
inline T exp2_scalar(T x) {
  simd::vec<T> v = simd::splat<T>(x);
  return exp2<T>(v)[0];
}
#endif

// exp2 of one value on host or device.
template <class T>
KOKKOS_INLINE_FUNCTION T exp2(T x) {
#if KATTN_HOST_SIMD
  return exp2_scalar(x);
#else
  return compat::exp2(x);
#endif
}

}  // namespace detail
}  // namespace kattn
