// Inputs of the benchmarks (forward, backward, block-sparse): [batch, n, heads, d] views (one
// sequence of one head unless asked) of standard normal values from a fixed seed, and the view
// types they use.
#pragma once

#include <Kokkos_Core.hpp>

#include <random>
#include <string>

#include "kattn/core/storage.hpp"

namespace kattn {
namespace perf {

template <class T, class Memory = Kokkos::DefaultExecutionSpace::memory_space>
using View4 = Kokkos::View<T****, Kokkos::LayoutRight, Memory>;
template <class T, class Memory = Kokkos::DefaultExecutionSpace::memory_space>
using View3 = Kokkos::View<T***, Kokkos::LayoutRight, Memory>;

// Memory: where the view lives (the default space's memory, or the host's for a host library).
// T: float, double, or a 16-bit storage type (values drawn in float and rounded to it).
template <class T, class Memory = Kokkos::DefaultExecutionSpace::memory_space>
View4<T, Memory> random_view(const char* label, int n, int d, unsigned seed, int batch = 1, int heads = 1) {
  View4<T, Memory> v(std::string(label), batch, n, heads, d);
  auto h = Kokkos::create_mirror_view(v);
  std::mt19937 gen(seed);
  std::normal_distribution<accumulate_t<T>> dist(0, 1);
  for (std::size_t i = 0; i < h.span(); ++i) h.data()[i] = narrow<T>(dist(gen));
  Kokkos::deep_copy(v, h);
  return v;
}

}  // namespace perf
}  // namespace kattn
