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
#include <type_traits>
#include <utility>

#include "kattn/core/storage.hpp"
#if defined(__F16C__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

// Complete unrolling of a loop over a micro-tile's registers (rows, vectors), requested rather than
// left to GCC's heuristics: inside a large inlined kernel it may keep the loop, and then the
// accumulator array lives on the stack, loaded and stored around every FMA. nvcc's front end does
// not know the pragma (its warning 1675) but hands it to the host compiler, which does: the
// warning is silenced around each use only.
#if defined(__NVCC__) && (__CUDACC_VER_MAJOR__ > 11 || (__CUDACC_VER_MAJOR__ == 11 && __CUDACC_VER_MINOR__ >= 5))
#define KATTN_UNROLL _Pragma("nv_diag_suppress 1675") _Pragma("GCC unroll 32") _Pragma("nv_diag_default 1675")
#else
#define KATTN_UNROLL _Pragma("GCC unroll 32")
#endif

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
// A vector of T from width<T>() values of storage type S: S == T a plain load; bf16 a 16-bit
// shift of each lane; fp16 the hardware conversion (vcvtph2ps) where the CPU has it.
template <class T, class S>
inline vec<T> load_as(const S* p) {
  if constexpr (std::is_same_v<S, T>) {
    return load(p);
  } else if constexpr (std::is_same_v<S, bf16>) {
    static_assert(std::is_same_v<T, float>, "kattn: bf16 widens to float");
#if defined(__AVX512BW__)
    if constexpr (kBytes == 64) {
      // A plain 256-bit load, then one word permutation puts bf16 i in the high half of lane i and
      // zeroes the low halves (the upper half of x is never read). Not a masked or expand load:
      // on Zen 4 those made a bf16 decode read 0.52 of the stream against 0.76-0.80 this way
      // (perf/RESULTS.md).
      alignas(64) static constexpr std::uint16_t kHigh[32] = {0, 0, 0, 1, 0, 2,  0, 3,  0, 4,  0, 5,  0, 6,  0, 7,
                                                              0, 8, 0, 9, 0, 10, 0, 11, 0, 12, 0, 13, 0, 14, 0, 15};
      const __m512i x = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
      const __m512i w = _mm512_maskz_permutexvar_epi16(__mmask32(0xAAAAAAAAu), _mm512_load_si512(kHigh), x);
      vec<T> v;
      std::memcpy(&v, &w, sizeof(v));
      return v;
    }
#endif
    typedef std::uint16_t half_vec __attribute__((vector_size(kBytes / 2)));
    typedef std::uint32_t word_vec __attribute__((vector_size(kBytes)));
    half_vec h;
    std::memcpy(&h, p, sizeof(h));
    const word_vec w = __builtin_convertvector(h, word_vec) << 16;
    vec<T> v;
    std::memcpy(&v, &w, sizeof(v));
    return v;
  } else {
    static_assert(std::is_same_v<S, fp16> && std::is_same_v<T, float>, "kattn: fp16 widens to float");
    vec<T> v;
#if defined(__AVX512F__)
    // The zero-masked form: GCC 12's plain _mm512_cvtph_ps trips its own -Wmaybe-uninitialized.
    const __m512 x = _mm512_maskz_cvtph_ps(__mmask16(0xffff), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    std::memcpy(&v, &x, sizeof(v));
#elif defined(__F16C__) && defined(__AVX__)
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    std::memcpy(&v, &x, sizeof(v));
#else
    for (int i = 0; i < width<T>(); ++i) v[i] = widen(p[i]);
#endif
    return v;
  }
}

template <class T>
inline void store(T* p, const vec<T>& v) {
  std::memcpy(p, &v, sizeof(v));
}
// v rounded to S and stored: S = T a plain store; bf16 from float as core::float_to_bf16_bits
// rounds each lane (nearest even, NaN kept a quiet NaN).
template <class S, class T>
inline void store_as(S* p, const vec<T>& v) {
  if constexpr (std::is_same_v<S, T>) {
    store(p, v);
  } else {
    static_assert(std::is_same_v<S, bf16> && std::is_same_v<T, float>, "kattn: store_as narrows float to bf16");
    typedef std::uint32_t word_vec __attribute__((vector_size(kBytes)));
    typedef std::int32_t mask_vec __attribute__((vector_size(kBytes)));
    typedef std::uint16_t half_vec __attribute__((vector_size(kBytes / 2)));
    word_vec u;
    std::memcpy(&u, &v, sizeof(u));
    const word_vec nan = (word_vec)((mask_vec)((u & 0x7fffffffu) > 0x7f800000u));
    const word_vec rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    const word_vec r = (nan & ((u >> 16) | 0x40u)) | (~nan & rounded);
    const half_vec h = __builtin_convertvector(r, half_vec);
    std::memcpy(p, &h, sizeof(h));
  }
}

template <class T>
inline vec<T> splat(T x) {
  return vec<T>{} + x;
}

// v, kept in a register: pinned(load(p)). GCC would otherwise fold the load into every
// instruction that uses it, loading it again each time. (Pinning an array element in place
// instead kept the array on the stack: a dead store per element and step.)
template <class T>
inline vec<T> pinned(vec<T> v) {
  asm("" : "+v"(v));
  return v;
}

namespace transpose_detail {
// One round of the block swap for rows a (bit B of its index clear) and b = a + B: lane k of a
// with bit B set and lane k - B of b trade places. The lane maps are vectors built from a pack
// (__builtin_shuffle: GCC, nvcc's host pass; __builtin_shufflevector: Clang).
template <int B, class T, int... K>
inline void swap_blocks(vec<T>& a, vec<T>& b, std::integer_sequence<int, K...>) {
  constexpr int W = sizeof...(K);
#if defined(__clang__)
  const vec<T> lo = __builtin_shufflevector(a, b, ((K & B) == 0 ? K : W + K - B)...);
  const vec<T> hi = __builtin_shufflevector(a, b, ((K & B) == 0 ? K + B : W + K)...);
#else
  using Lane = std::remove_reference_t<decltype(ivec<T>{}[0])>;
  const ivec<T> lo_lanes = {Lane((K & B) == 0 ? K : W + K - B)...};
  const ivec<T> hi_lanes = {Lane((K & B) == 0 ? K + B : W + K)...};
  const vec<T> lo = __builtin_shuffle(a, b, lo_lanes);
  const vec<T> hi = __builtin_shuffle(a, b, hi_lanes);
#endif
  a = lo;
  b = hi;
}
template <int B, int I, class T>
inline void swap_pair(vec<T> (&v)[width<T>()]) {
  if constexpr ((I & B) == 0) swap_blocks<B, T>(v[I], v[I + B], std::make_integer_sequence<int, width<T>()>());
}
template <int B, class T, int... I>
inline void swap_round(vec<T> (&v)[width<T>()], std::integer_sequence<int, I...> rows) {
  (swap_pair<B, I, T>(v), ...);
  if constexpr (B > 1) swap_round<B / 2, T>(v, rows);
}
}  // namespace transpose_detail

// v[i][k] <- v[k][i]: a W x W block (W = width<T>() rows of one vector) transposed in registers by
// swapping its off-diagonal blocks at every size, log2(W) rounds of two-vector shuffles. Moves
// rows of q, k, v and o into the transposed tiles and back without a strided scalar access.
template <class T>
inline void transpose(vec<T> (&v)[width<T>()]) {
  transpose_detail::swap_round<width<T>() / 2, T>(v, std::make_integer_sequence<int, width<T>()>());
}

// dst[d * ld + i] = scale * rows[i][d] for the W = width<T>() rows and d < D (a multiple of W):
// W rows (storage S, widened; a null row gives zeros) stored as D columns of W lanes, a W x W
// block at a time through transpose().
template <class T, class S>
inline void store_columns(const S* const (&rows)[width<T>()], int D, T scale, T* dst, int ld) {
  constexpr int W = width<T>();
  for (int d0 = 0; d0 < D; d0 += W) {
    vec<T> v[W];
    KATTN_UNROLL
    for (int i = 0; i < W; ++i) v[i] = rows[i] ? load_as<T>(rows[i] + d0) * scale : vec<T>{};
    transpose<T>(v);
    KATTN_UNROLL
    for (int k = 0; k < W; ++k) store(dst + (d0 + k) * ld, v[k]);
  }
}

}  // namespace simd
}  // namespace detail
}  // namespace kattn
#endif
