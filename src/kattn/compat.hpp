// The one place where Kokkos 3.4 (Debian's Trilinos build) and Kokkos 4.x differ for kattn.
#pragma once

#include <Kokkos_Core.hpp>

#include <string>
#include <vector>

#ifndef KOKKOS_VERSION
#error "kattn: Kokkos did not define KOKKOS_VERSION"
#endif

// Kokkos 3.4.1 has no KOKKOS_VERSION_MAJOR; derive it.
#define KATTN_KOKKOS_VERSION_MAJOR (KOKKOS_VERSION / 10000)

// True while compiling device code of a GPU backend; host-only fast paths (vector extensions,
// libm calls) hide behind it.
#if defined(__CUDA_ARCH__) || defined(__HIP_DEVICE_COMPILE__) || defined(__SYCL_DEVICE_ONLY__)
#define KATTN_DEVICE_COMPILE 1
#else
#define KATTN_DEVICE_COMPILE 0
#endif

namespace kattn {
namespace compat {

// Math functions moved from Kokkos::Experimental to Kokkos in 3.7.
#if KOKKOS_VERSION >= 30700
using Kokkos::exp;
using Kokkos::exp2;
using Kokkos::log;
using Kokkos::log2;
using Kokkos::sqrt;
using Kokkos::tanh;
#else
using Kokkos::Experimental::exp;
using Kokkos::Experimental::exp2;
using Kokkos::Experimental::log;
using Kokkos::Experimental::log2;
using Kokkos::Experimental::sqrt;
using Kokkos::Experimental::tanh;
#endif

template <class T>
KOKKOS_INLINE_FUNCTION constexpr T infinity() {
  return Kokkos::Experimental::infinity<T>::value;
}

// Profiling region for the lifetime of the object (Kokkos::Profiling::ScopedRegion is 4.x only).
class ScopedRegion {
 public:
  explicit ScopedRegion(const std::string& name) { Kokkos::Profiling::pushRegion(name); }
  ~ScopedRegion() { Kokkos::Profiling::popRegion(); }
  ScopedRegion(const ScopedRegion&) = delete;
  ScopedRegion& operator=(const ScopedRegion&) = delete;
};

// The HIP execution space left Kokkos::Experimental in 4.0.
#ifdef KOKKOS_ENABLE_HIP
#if KOKKOS_VERSION >= 40000
using HIP = Kokkos::HIP;
#else
using HIP = Kokkos::Experimental::HIP;
#endif
#endif

// Page-locked host memory the device copies to and from by DMA: Kokkos::SharedHostPinnedSpace
// (4.x; HostSpace where there is no device), the backend's own before it (3.x).
#if defined(KOKKOS_HAS_SHARED_HOST_PINNED_SPACE)
using PinnedHostSpace = Kokkos::SharedHostPinnedSpace;
#elif defined(KOKKOS_ENABLE_CUDA)
using PinnedHostSpace = Kokkos::CudaHostPinnedSpace;
#elif defined(KOKKOS_ENABLE_HIP)
using PinnedHostSpace = Kokkos::Experimental::HIPHostPinnedSpace;
#else
using PinnedHostSpace = Kokkos::HostSpace;
#endif

// Kokkos::initialize(argc, argv) that takes Kokkos 4's thread flag --kokkos-num-threads=N with
// every Kokkos: before 3.7 the flag was --kokkos-threads=N, and it is renamed for those.
inline void initialize(int& argc, char* argv[]) {
#if KOKKOS_VERSION < 30700
  static std::vector<std::string> renamed;          // owns the renamed arguments until exit
  renamed.reserve(static_cast<std::size_t>(argc));  // no reallocation: argv points into it
  const std::string flag = "--kokkos-num-threads";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.compare(0, flag.size(), flag) == 0) {
      renamed.push_back("--kokkos-threads" + arg.substr(flag.size()));
      argv[i] = &renamed.back()[0];
    }
  }
#endif
  Kokkos::initialize(argc, argv);
}

// Kokkos 3.4 has no fence(label).
template <class ExecSpace>
void fence(const ExecSpace& space, const char* label) {
#if KOKKOS_VERSION >= 30600
  space.fence(label);
#else
  (void)label;
  space.fence();
#endif
}

}  // namespace compat
}  // namespace kattn
