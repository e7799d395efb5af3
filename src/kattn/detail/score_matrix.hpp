// The [B, H, Nq, Nk] score (and probability) matrices of the textbook algorithms, on one flat
// allocation indexed with 64-bit offsets computed here. (Kokkos 3.4's rank-4 LayoutRight view
// mis-addresses an extent pair of exactly 65536 x 65536, 2^32 elements: a write to its last
// element faults; a flat view does not depend on that offset code.)
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <string>

namespace kattn {
namespace detail {

template <class ExecSpace, class T>
struct ScoreMatrix {
  Kokkos::View<T*, typename ExecSpace::memory_space> data;
  std::int64_t heads = 0, rows = 0, cols = 0;

  ScoreMatrix() = default;
  // Uninitialised; the caller has checked the size (memory_check.hpp).
  ScoreMatrix(const ExecSpace& space, const std::string& label, std::int64_t batch, std::int64_t heads_,
              std::int64_t rows_, std::int64_t cols_)
      : data(Kokkos::view_alloc(space, Kokkos::WithoutInitializing, label),
             static_cast<std::size_t>(batch * heads_ * rows_ * cols_)),
        heads(heads_),
        rows(rows_),
        cols(cols_) {}

  KOKKOS_INLINE_FUNCTION T& operator()(int b, int h, std::int64_t i, std::int64_t j) const {
    return data(((std::int64_t(b) * heads + h) * rows + i) * cols + j);
  }
};

}  // namespace detail
}  // namespace kattn
