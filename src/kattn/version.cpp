#include "kattn/version.hpp"

#include <Kokkos_Core.hpp>
#include <string>

#include "kattn/cpu_products.hpp"
#include "kattn_build_details.h"

#if KATTN_ENABLE_KOKKOSKERNELS
#include <KokkosKernels_config.h>
#if !defined(KOKKOSKERNELS_VERSION) && __has_include(<Trilinos_version.h>)
#include <Trilinos_version.h>  // Debian's Kokkos Kernels is Trilinos' and has no version of its own
#endif
#endif

namespace kattn {
namespace {

// Kokkos encodes versions as MMmmpp (40601 = 4.6.1).
std::string dotted(int v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

void append(std::string& list, const char* item) { list += (list.empty() ? "" : " ") + std::string(item); }

}  // namespace

BuildInfo build_info() {
  BuildInfo info;
  info.version = KATTN_VERSION;
  info.kokkos_version = dotted(KOKKOS_VERSION);
#if !KATTN_ENABLE_KOKKOSKERNELS
  info.kokkos_kernels_version = "none";  // built with KATTN_ENABLE_KOKKOSKERNELS=OFF
#elif defined(KOKKOSKERNELS_VERSION)
  info.kokkos_kernels_version = dotted(KOKKOSKERNELS_VERSION);
#elif defined(TRILINOS_VERSION_STRING)
  info.kokkos_kernels_version = "Trilinos " TRILINOS_VERSION_STRING;
#else
  info.kokkos_kernels_version = "unknown";
#endif
#ifdef KOKKOS_ENABLE_SERIAL
  append(info.backends, "Serial");
#endif
#ifdef KOKKOS_ENABLE_OPENMP
  append(info.backends, "OpenMP");
#endif
#ifdef KOKKOS_ENABLE_THREADS
  append(info.backends, "Threads");
#endif
#ifdef KOKKOS_ENABLE_CUDA
  append(info.backends, "Cuda");
#endif
#ifdef KOKKOS_ENABLE_HIP
  append(info.backends, "HIP");
#endif
#ifdef KOKKOS_ENABLE_SYCL
  append(info.backends, "SYCL");
#endif
  append(info.options, KATTN_ENABLE_MPI ? "MPI=on" : "MPI=off");
  append(info.options, KATTN_ENABLE_CUDA ? "CUDA=on" : "CUDA=off");
  if (KATTN_DEVICE_SHAPED_HOST)
    append(info.options,
           ("device-shaped host (teams of " + std::to_string(KATTN_DEVICE_SHAPED_TEAM_SIZE) + ")").c_str());
  info.compiler = KATTN_COMPILER;
  info.build = KATTN_BUILD_TYPE;
  if (KATTN_NATIVE_ARCH) append(info.build, "-march=native");
  if (*KATTN_SANITIZE) info.build += std::string(info.build.empty() ? "" : " ") + "-fsanitize=" KATTN_SANITIZE;
  return info;
}

std::string version_text() {
  const BuildInfo info = build_info();
  return "kattn " + info.version + "\n" +                           //
         "Kokkos: " + info.kokkos_version + "\n" +                  //
         "Kokkos backends: " + info.backends + "\n" +               //
         "Kokkos Kernels: " + info.kokkos_kernels_version + "\n" +  //
         "options: " + info.options + "\n" +                        //
         "compiler: " + info.compiler + "\n" +                      //
         "build: " + info.build + "\n" + cpu_products_text();
}

}  // namespace kattn
