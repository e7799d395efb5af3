// Google Benchmark main bracketed by Kokkos (accepts --kokkos-* arguments).
#include <Kokkos_Core.hpp>
#include <benchmark/benchmark.h>

int main(int argc, char* argv[]) {
  Kokkos::initialize(argc, argv);
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  Kokkos::finalize();
  return 0;
}
