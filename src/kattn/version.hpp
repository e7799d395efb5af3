// What this kattn is and was built with: its version, the Kokkos it runs on, its options.
// `kattn --version` prints it; put it in logs and bug reports.
#pragma once

#include <string>

#include "kattn/config.hpp"  // KATTN_VERSION, KATTN_ENABLE_{MPI,CUDA,KOKKOSKERNELS}

namespace kattn {

struct BuildInfo {
  std::string version;                 // kattn's, "0.1.0"
  std::string kokkos_version;          // "4.6.1"
  std::string kokkos_kernels_version;  // "4.7.0", "Trilinos 13.2" (Debian's), "none" (built without)
  std::string backends;                // the Kokkos backends compiled in: "Serial OpenMP"
  std::string options;                 // kattn's build options: "MPI=off CUDA=off"
  std::string compiler;                // "GNU 12.2.0"
  std::string build;                   // build type and host flags: "Release -march=native"
};

// Fixed at build time; callable before Kokkos::initialize.
BuildInfo build_info();

// build_info() as lines of "name: value" under a first line "kattn <version>", then the CPU this
// runs on and the products it takes for 16-bit storage (cpu_products_text()).
std::string version_text();

}  // namespace kattn
