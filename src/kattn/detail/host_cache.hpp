// The size of one host core's L2 cache, which decode's automatic key tile (tuning.hpp) is a
// fraction of: read once, from the OS (glibc's sysconf, which reads the CPU's cache descriptors).
#pragma once

#include <cstddef>

#if defined(__unix__)
#include <unistd.h>
#endif

namespace kattn {
namespace detail {

// Bytes of L2 per core; 1 MB where the OS does not say.
inline std::size_t host_l2_bytes() {
  static const std::size_t bytes = [] {
#if defined(_SC_LEVEL2_CACHE_SIZE)
    const long reported = sysconf(_SC_LEVEL2_CACHE_SIZE);
    if (reported > 0) return static_cast<std::size_t>(reported);
#endif
    return std::size_t(1) << 20;
  }();
  return bytes;
}

}  // namespace detail
}  // namespace kattn
