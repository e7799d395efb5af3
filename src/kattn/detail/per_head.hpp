// Options given one value per query head (sinks, ALiBi slopes): their check and their copy into
// the execution space's memory, written once.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "kattn/compat.hpp"
#include "kattn/errors.hpp"

namespace kattn {
namespace detail {

// `values` (the option `name`, in units of `what`) fit the call: none, or one per query head.
inline void require_per_head(const std::vector<double>& values, std::int64_t heads_q, const char* name,
                             const char* what) {
  KATTN_REQUIRE(values.empty() || std::int64_t(values.size()) == heads_q, name, ": expected one ", what,
                " per query head (", heads_q, "), got ", values.size());
}

// The values in memory of ExecSpace as T, multiplied by `factor` (kLog2e: the kernels' log2 units).
template <class T, class ExecSpace>
Kokkos::View<T*, typename ExecSpace::memory_space> per_head_values(const ExecSpace& space,
                                                                   const std::vector<double>& values, double factor,
                                                                   const char* label) {
  Kokkos::View<T*, typename ExecSpace::memory_space> d(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)),
                                                       values.size());
  auto h = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < values.size(); ++i) h(i) = static_cast<T>(values[i] * factor);
  compat::fence(space, "kattn::per_head_values: the copy follows the call's earlier work");
  Kokkos::deep_copy(d, h);  // blocking: h is freed on return
  return d;
}

}  // namespace detail
}  // namespace kattn
