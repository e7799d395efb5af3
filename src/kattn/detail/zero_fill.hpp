// Zeroing a rank-4 output view of any layout. Kokkos 3.4's deep_copy of a scalar does not
// compile for LayoutStride views (its fill has no iteration order for them), and kattn's outputs
// may be strided (e.g. NumPy arrays read in place).
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

namespace kattn {
namespace detail {

template <class ExecSpace, class View>
void zero_fill(const ExecSpace& space, const View& view) {
  static_assert(View::rank == 4, "kattn::detail::zero_fill: rank-4 views");
  using T = typename View::non_const_value_type;
  using Policy = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<4>, Kokkos::IndexType<std::int64_t>>;
  const std::int64_t e0 = view.extent(0), e1 = view.extent(1), e2 = view.extent(2), e3 = view.extent(3);
  if (e0 == 0 || e1 == 0 || e2 == 0 || e3 == 0) return;
  Kokkos::parallel_for(
      "kattn::zero_fill", Policy(space, {0, 0, 0, 0}, {e0, e1, e2, e3}),
      KOKKOS_LAMBDA(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) { view(a, b, c, d) = T(0); });
}

}  // namespace detail
}  // namespace kattn
