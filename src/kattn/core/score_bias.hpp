// An additive bias of the scores (Options::bias): PyTorch SDPA's attn_mask, relative position
// biases, AlphaFold-style pair biases. bias[b, h, i, j] (natural-log units) is added to the score
// of query i and key j of query head h in sequence b (positions within the sequence: a ragged batch
// or paged cache pads the array to its longest sequence) after softcap and ALiBi, before the mask; a
// boolean bias means 0 where true (attend) and -inf where false, as SDPA's boolean attn_mask. Its
// batch and head dims may be 1 (broadcast). kattn reads it in place, tile by tile, never copied
// whole: the caller keeps it alive for the call, in memory the execution space can read. No
// Kokkos here.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kattn/core/host_device.hpp"
#include "kattn/core/storage.hpp"

namespace kattn {

// The element types a bias may have.
enum class BiasType : int { f32, f64, bf16, f16, boolean };

template <class B>
constexpr bool bias_element_v = std::is_same_v<B, float> || std::is_same_v<B, double> || std::is_same_v<B, bf16> ||
                                std::is_same_v<B, fp16> || std::is_same_v<B, bool>;

template <class B>
constexpr BiasType bias_type_of() {
  static_assert(bias_element_v<B>, "kattn: a score bias holds float, double, kattn::bf16, kattn::fp16 or bool");
  if constexpr (std::is_same_v<B, float>) return BiasType::f32;
  if constexpr (std::is_same_v<B, double>) return BiasType::f64;
  if constexpr (std::is_same_v<B, bf16>) return BiasType::bf16;
  if constexpr (std::is_same_v<B, fp16>) return BiasType::f16;
  return BiasType::boolean;
}

// A bias element in the accumulation type T (natural-log units): a boolean is 0 where true
// (attend) and -inf where false.
template <class T, class B>
KATTN_CORE_INLINE T bias_value(B x) {
  if constexpr (std::is_same_v<B, bool>)
    return x ? T(0) : -core::infinity<T>();
  else
    return static_cast<T>(widen(x));
}

struct ScoreBias {
  const void* data = nullptr;  // null: no bias
  BiasType type = BiasType::f32;
  std::int64_t batch = 0, heads = 0, q_len = 0, kv_len = 0;  // batch 1 or B, heads 1 or Hq
  std::int64_t stride_batch = 0, stride_head = 0, stride_q = 0;  // in elements; keys are contiguous

  KATTN_CORE_INLINE bool active() const { return data != nullptr; }
  // The element offset of row (b, h, i); a dim of extent 1 is broadcast.
  KATTN_CORE_INLINE std::int64_t row_offset(int b, int h, std::int64_t i) const {
    return (batch == 1 ? 0 : b * stride_batch) + (heads == 1 ? 0 : h * stride_head) + i * stride_q;
  }
  // The row (b, h, i) as elements of type B (the bias's own: see dispatch).
  template <class B>
  KATTN_CORE_INLINE const B* row(int b, int h, std::int64_t i) const {
    return static_cast<const B*>(data) + row_offset(b, h, i);
  }
  // f(B{}) with B the bias's element type: the one switch, outside the loops over elements.
  template <class F>
  KATTN_CORE_INLINE void dispatch(const F& f) const {
    switch (type) {
      case BiasType::f32: f(float{}); break;
      case BiasType::f64: f(double{}); break;
      case BiasType::bf16: f(bf16{}); break;
      case BiasType::f16: f(fp16{}); break;
      case BiasType::boolean: f(bool{}); break;
    }
  }
  // Sequence b's corner of the bias (its first q_len queries and kv_len keys, as a batch of one):
  // what a call over that sequence alone reads.
  ScoreBias of_sequence(int b, std::int64_t seq_q_len, std::int64_t seq_kv_len) const {
    ScoreBias s = *this;
    if (!data) return s;
    dispatch([&](auto tag) {
      using B = decltype(tag);
      s.data = static_cast<const B*>(data) + (batch == 1 ? 0 : b * stride_batch);
    });
    s.batch = 1;
    s.q_len = seq_q_len;
    s.kv_len = seq_kv_len;
    return s;
  }
  // The block of rows [row, row + rows) and keys [key, key + keys): what a call over that block of
  // the queries and keys reads (the MPI layer's blocks of a sharded sequence).
  ScoreBias block(std::int64_t row, std::int64_t key, std::int64_t rows, std::int64_t keys) const {
    ScoreBias s = *this;
    if (!data) return s;
    dispatch([&](auto tag) {
      using B = decltype(tag);
      s.data = static_cast<const B*>(data) + row * stride_q + key;
    });
    s.q_len = rows;
    s.kv_len = keys;
    return s;
  }
  // The same bias from query row `first` on (a piece of the queries).
  ScoreBias from_row(std::int64_t first) const {
    ScoreBias s = *this;
    if (!data) return s;
    dispatch([&](auto tag) {
      using B = decltype(tag);
      s.data = static_cast<const B*>(data) + first * stride_q;
    });
    s.q_len = q_len - first;
    return s;
  }
  // The same bias over keys [first, first + count) alone (a part of the keys: a cascade's prefix
  // or its suffixes), each row's keys still read in place.
  ScoreBias of_keys(std::int64_t first, std::int64_t count) const {
    ScoreBias s = *this;
    if (!data) return s;
    dispatch([&](auto tag) {
      using B = decltype(tag);
      s.data = static_cast<const B*>(data) + first;
    });
    s.kv_len = count;
    return s;
  }
};

// Where the backward writes d(sum(o * dout)) / d(bias) (BackwardOptions::dbias): an array of
// the bias's shape (its broadcast dims included: a dim of extent 1 receives the sum over that
// dim), float, double, bf16 or fp16, keys contiguous. The gradient of a score is P (dP - D) where
// P > 0 and 0 where P = 0 (masked keys, a -inf bias): such a score does not move the output.
struct ScoreBiasGradient : ScoreBias {
  ScoreBiasGradient block(std::int64_t row, std::int64_t key, std::int64_t rows, std::int64_t keys) const {
    ScoreBiasGradient g;
    static_cast<ScoreBias&>(g) = ScoreBias::block(row, key, rows, keys);
    return g;
  }
  template <class B>
  KATTN_CORE_INLINE B* row_out(int b, int h, std::int64_t i) const {
    return const_cast<B*>(row<B>(b, h, i));  // made from a writable array (score_bias_gradient)
  }
};

}  // namespace kattn
