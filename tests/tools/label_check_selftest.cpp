// Kernels the label check must object to (an unnamed one, a kattn kernel outside its area's
// region) next to one it must accept: tools.labels.selftest expects exactly those verdicts.
#include <Kokkos_Core.hpp>

#include "kattn/compat.hpp"

// Not in main: CUDA's extended lambdas need an enclosing function whose address can be taken.
void launch() {
  Kokkos::View<double*> x("kattn::selftest::x", 8);
  Kokkos::parallel_for(
      Kokkos::RangePolicy<>(0, 8), KOKKOS_LAMBDA(int i) { x(i) = i; });  // unnamed
  Kokkos::parallel_for(
      "kattn::selftest::outside", Kokkos::RangePolicy<>(0, 8), KOKKOS_LAMBDA(int i) { x(i) += 1; });
  kattn::compat::ScopedRegion region("kattn::selftest");
  Kokkos::parallel_for(
      "kattn::selftest::inside", Kokkos::RangePolicy<>(0, 8), KOKKOS_LAMBDA(int i) { x(i) *= 2; });
  Kokkos::fence();
}

int main(int argc, char* argv[]) {
  Kokkos::initialize(argc, argv);
  launch();
  Kokkos::finalize();
  return 0;
}
