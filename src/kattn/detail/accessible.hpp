// Whether an execution space may touch the caller's memory: the entry points static_assert it,
// so that views or an index layout in a space the kernels cannot read fail to compile instead of
// crashing at run time (a host reference handed a layout in CudaSpace, say).
#pragma once

#include <Kokkos_Core.hpp>

namespace kattn {
namespace detail {

template <class ExecSpace, class... Views>
constexpr bool accessible_from() {
  return (Kokkos::SpaceAccessibility<ExecSpace, typename Views::memory_space>::accessible && ...);
}

template <class ExecSpace, class MemorySpace>
constexpr bool layout_accessible_from() {
  return Kokkos::SpaceAccessibility<ExecSpace, MemorySpace>::accessible;
}

}  // namespace detail
}  // namespace kattn
