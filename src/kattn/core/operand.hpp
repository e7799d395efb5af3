// One array a kernel reads or writes: its first element and its element strides over (batch,
// sequence position, head); the head dim is contiguous. q, k, v, o, lse and the gradients are
// each one of these, so they are filled, shifted and copied as a whole, never field by field.
#pragma once

#include "kattn/core/host_device.hpp"

#include <cstdint>
#include <type_traits>

namespace kattn {

template <class T>
struct Operand {
  T* data = nullptr;
  std::int64_t stride_batch = 0, stride_seq = 0, stride_head = 0;

  Operand() = default;
  KATTN_CORE_INLINE Operand(T* d, std::int64_t sb, std::int64_t sj, std::int64_t sh)
      : data(d), stride_batch(sb), stride_seq(sj), stride_head(sh) {}
  // A writable operand read through a const one.
  template <class U, class = std::enable_if_t<std::is_same_v<const U, T> && !std::is_same_v<U, T>>>
  KATTN_CORE_INLINE Operand(const Operand<U>& o)
      : data(o.data), stride_batch(o.stride_batch), stride_seq(o.stride_seq), stride_head(o.stride_head) {}

  // Set: the optional operands (lse) are null when the call has none.
  KATTN_CORE_INLINE explicit operator bool() const { return data != nullptr; }

  // (b, j, h) in dense addressing; ragged and paged rows go through AttentionParams.
  KATTN_CORE_INLINE T* at(int b, std::int64_t j, int h) const {
    return data + b * stride_batch + j * stride_seq + h * stride_head;
  }
  // The same array from row j on (a piece of the sequence axis).
  KATTN_CORE_INLINE Operand from_row(std::int64_t j) const {
    return Operand(data + j * stride_seq, stride_batch, stride_seq, stride_head);
  }
  // The same array from head h on (a rank's or a block's heads).
  KATTN_CORE_INLINE Operand from_head(int h) const {
    return Operand(data + h * stride_head, stride_batch, stride_seq, stride_head);
  }
};

// Another array laid out as `a` (the float params of a 16-bit call address K/V as stored).
template <class U, class T>
KATTN_CORE_INLINE Operand<U> same_layout(U* data, const Operand<T>& a) {
  return Operand<U>(data, a.stride_batch, a.stride_seq, a.stride_head);
}

// A packed [B, n, H, D] array (the batch stride the whole sequence's).
template <class T>
KATTN_CORE_INLINE Operand<T> dense_operand(T* data, std::int64_t n, int heads, int dim) {
  return Operand<T>(data, n * heads * dim, std::int64_t(heads) * dim, dim);
}

}  // namespace kattn
