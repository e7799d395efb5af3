// Horizontal sums of W vectors at once (W = lanes per vector): out[i] = sum of the lanes of x[i].
// A tree of two-source shuffles, log2(W) levels, W - 1 adds in all: at each level the vectors are
// paired (x[i], x[i + n/2]) and each segment of the result holds half of each one's partial sums,
// which leaves the sums in natural order at the end. This is what makes dot products with the
// lanes over the head dim affordable: W of them cost W - 1 shuffle pairs, not W horizontal sums.
// The sum order is fixed, so results do not depend on anything but the inputs.
#pragma once

#include "kattn/detail/simd.hpp"

#if KATTN_HOST_SIMD
#include <array>
#include <cstddef>
#include <utility>

// __builtin_shufflevector: clang, and GCC 12 on its own; nvcc's host pass (cudafe) mangles its
// pack-expanded lane lists, so GCC under nvcc takes __builtin_shuffle with a mask vector.
#if defined(__clang__) || (__GNUC__ >= 12 && !defined(__NVCC__))
#define KATTN_SHUFFLEVECTOR 1
#else
#define KATTN_SHUFFLEVECTOR 0
#endif

namespace kattn {
namespace detail {
namespace simd {

// Lane l of one level's shuffle with segments of H lanes: `lo` takes the first halves of segment
// s of a and b, `hi` the second halves.
template <int W, int H, bool Hi>
constexpr int pair_lane(int l) {
  const int s = l / H, t = l % H, h = H / 2;
  if (!Hi) return t < h ? s * H + t : W + s * H + (t - h);
  return t < h ? s * H + h + t : W + s * H + t;
}

template <class T, int H, bool Hi, std::size_t... L>
inline vec<T> pair_shuffle(const vec<T>& a, const vec<T>& b, std::index_sequence<L...>) {
  constexpr int W = width<T>();
#if KATTN_SHUFFLEVECTOR
  return __builtin_shufflevector(a, b, pair_lane<W, H, Hi>(static_cast<int>(L))...);
#else
  return __builtin_shuffle(a, b, ivec<T>{pair_lane<W, H, Hi>(static_cast<int>(L))...});
#endif
}

// One level: N vectors in, N / 2 out. Arrays are indexed with constants only, so that the
// compiler keeps them in registers (a loop over a pointer sends them through the stack).
template <class T, int H, std::size_t N, std::size_t... I>
inline std::array<vec<T>, N / 2> sum_level(const std::array<vec<T>, N>& x, std::index_sequence<I...>) {
  constexpr int W = width<T>();
  return {{(pair_shuffle<T, H, false>(x[I], x[I + N / 2], std::make_index_sequence<W>()) +
            pair_shuffle<T, H, true>(x[I], x[I + N / 2], std::make_index_sequence<W>()))...}};
}

template <class T, int H, std::size_t N>
inline vec<T> sum_levels(const std::array<vec<T>, N>& x) {
  if constexpr (N == 1)
    return x[0];
  else
    return sum_levels<T, H / 2, N / 2>(sum_level<T, H, N>(x, std::make_index_sequence<N / 2>()));
}

// Lane i of the result is the sum of the lanes of x[i].
template <class T>
inline vec<T> sum_lanes(const std::array<vec<T>, width<T>()>& x) {
  return sum_levels<T, width<T>(), width<T>()>(x);
}

// v with lanes l and l ^ H swapped (a butterfly step).
template <class T, int H, std::size_t... L>
inline vec<T> swap_lanes(const vec<T>& v, std::index_sequence<L...>) {
#if KATTN_SHUFFLEVECTOR
  return __builtin_shufflevector(v, v, (static_cast<int>(L) ^ H)...);
#else
  return __builtin_shuffle(v, ivec<T>{(static_cast<int>(L) ^ H)...});
#endif
}

// Every lane of the result holds op over the lanes of v, by log2(W) butterfly steps. The order
// of the operations is fixed, so the result is the same every time.
template <class T, int H = width<T>() / 2, class Op>
inline vec<T> all_lanes(const vec<T>& v, Op op) {
  const vec<T> r = op(v, swap_lanes<T, H>(v, std::make_index_sequence<width<T>()>()));
  if constexpr (H > 1)
    return all_lanes<T, H / 2>(r, op);
  else
    return r;
}

template <class T>
inline T hsum(const vec<T>& v) {
  return all_lanes<T>(v, [](const vec<T>& a, const vec<T>& b) { return a + b; })[0];
}

// NaN-propagating horizontal max.
template <class T>
inline T hmax_nan(const vec<T>& v) {
  return all_lanes<T>(v, [](const vec<T>& a, const vec<T>& b) { return (a > b || a != a) ? a : b; })[0];
}

}  // namespace simd
}  // namespace detail
}  // namespace kattn
#endif
