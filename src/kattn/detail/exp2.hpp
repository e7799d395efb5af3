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
// 2^x = 2^n * 2^f with n = round(x), |f| <= 1/2, and 2^f = 1 + f q(f), q the polynomial that
// interpolates (2^f - 1) / f at Chebyshev nodes of [-1/2, 1/2] (near the best approximation of
// its degree), of the lowest degree whose error stays under the type's rounding: 2^f to a
// relative 5.1e-9 with degree 6 in float, 8.4e-18 with degree 11 in double (a truncated Taylor
// series needs degrees 7 and 13 for as much: one and two more FMAs per vector of scores). The
// constant term is exactly 1, so 2^0 = 1. Results below the smallest normal flush to 0, which
// only ever drops terms < 1e-38 (float) next to a row maximum of weight 1.
// (Coefficients: mpmath at 50 digits, interpolation at degree + 1 nodes, error over 4001 points.)
template <class T>
struct Exp2Traits;
template <>
struct Exp2Traits<float> {
  static constexpr int degree = 6;  // of 2^f; q has degree - 1
  static constexpr float q[degree] = {0.693147188026228781058f,   0.240226507605681269446f,
                                      0.0555035711421907781861f,  0.00961808255727785149127f,
                                      0.00133908633646712343812f, 0.00015453162945120690177f};
  static constexpr int mantissa_bits = 23;
  static constexpr int bias = 127;
  static constexpr float lowest = -126.0f;
  static constexpr float highest = 128.0f;
  static constexpr float round_magic = 12582912.0f;  // 1.5 * 2^23: x + magic rounds x to an integer
};
template <>
struct Exp2Traits<double> {
  static constexpr int degree = 11;
  static constexpr double q[degree] = {
      0.693147180559945309417,    0.2402265069591009822,      0.0555041086648215943387,   0.00961812910760688852728,
      0.00133335581464169353104,  0.000154035304417360501549, 1.52527338298361183944e-05, 1.3215442587921689653e-06,
      1.01780624458457735207e-07, 7.07258594926922369986e-09, 4.45496059818651839378e-10};
  static constexpr int mantissa_bits = 52;
  static constexpr int bias = 1023;
  static constexpr double lowest = -1022.0;
  static constexpr double highest = 1024.0;
  static constexpr double round_magic = 6755399441055744.0;  // 1.5 * 2^52
};

// 2^x for x already clamped to [lowest, highest] (x_cl), and 0 where the unclamped x is below
// the lowest exponent.
template <class T>
inline simd::vec<T> exp2_clamped(simd::vec<T> x_cl, simd::vec<T> x) {
  using V = simd::vec<T>;
  using I = simd::ivec<T>;
  using E = Exp2Traits<T>;
  const V shifted = x_cl + E::round_magic;
  const V n = shifted - E::round_magic;
  const V f = x_cl - n;
  V q = simd::splat<T>(E::q[E::degree - 1]);
  for (int k = E::degree - 2; k >= 0; --k) q = q * f + E::q[k];
  const V p = q * f + T(1);
  // The low mantissa bits of `shifted` hold n; move them into the exponent field.
  // (A cast between vector types of one size reinterprets the bits.)
  const I n_bits = (I)shifted;
  const I scale_bits = (n_bits + E::bias) << E::mantissa_bits;
  const V r = p * (V)scale_bits;
  return x < E::lowest ? simd::splat<T>(T(0)) : r;
}

template <class T>
inline simd::vec<T> exp2(simd::vec<T> x) {
  using E = Exp2Traits<T>;
  const simd::vec<T> x_hi = x > E::highest ? simd::splat<T>(E::highest) : x;  // NaN compares false: kept
  return exp2_clamped<T>(x_hi < E::lowest ? simd::splat<T>(E::lowest) : x_hi, x);
}

// exp2 of the softmax's s - m, never above 0 (or NaN): the same bits as exp2 without its clamps,
// as the final select alone gives 0 below the lowest exponent (whatever the lanes there computed).
template <class T>
inline simd::vec<T> exp2_nonpositive(simd::vec<T> x) {
  return exp2_clamped<T>(x, x);
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
