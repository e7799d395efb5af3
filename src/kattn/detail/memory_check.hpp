// Workspace sizes checked before they are allocated: a request larger than the memory space can
// give is a kattn::Error that names the buffer, its size and how to make it smaller, instead of
// a crash (or an OOM kill) inside the allocator. Sizes are computed in 64 bits with overflow
// checks, so a product of shape factors that does not fit is refused the same way.
//
// Capacity: host spaces, MemAvailable from /proc/meminfo (physical memory from sysconf where that
// is missing); CUDA and HIP device memory, cudaMemGetInfo's / hipMemGetInfo's free bytes; other
// spaces are not checked.
// The environment variable KATTN_MEMORY_LIMIT (bytes) caps the capacity of every space: to keep
// a run inside a budget, and for the tests.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include <unistd.h>

#include "kattn/compat.hpp"
#include "kattn/errors.hpp"

namespace kattn {
namespace detail {

// Requests below this many bytes are not checked (unless KATTN_MEMORY_LIMIT is set): reading
// /proc/meminfo on every decode step would cost more than it saves.
constexpr std::uint64_t kMemoryCheckThreshold = std::uint64_t(64) << 20;

// a * b, or UINT64_MAX when it does not fit.
inline std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b) {
  if (a != 0 && b > UINT64_MAX / a) return UINT64_MAX;
  return a * b;
}

inline std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; }

// Bytes of the host's memory that a new allocation can get: MemAvailable, else physical memory.
inline std::uint64_t host_available_bytes() {
  if (std::FILE* f = std::fopen("/proc/meminfo", "r")) {
    char line[256];
    unsigned long long kb = 0;
    bool found = false;
    while (!found && std::fgets(line, sizeof line, f)) found = std::sscanf(line, "MemAvailable: %llu kB", &kb) == 1;
    std::fclose(f);
    if (found) return std::uint64_t(kb) * 1024;
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? std::uint64_t(pages) * std::uint64_t(page) : 0;
}

// The KATTN_MEMORY_LIMIT override in bytes, 0 when unset.
inline std::uint64_t memory_limit_override() {
  const char* env = std::getenv("KATTN_MEMORY_LIMIT");
  if (!env || !*env) return 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(env, &end, 10);
  return (end && *end == '\0') ? std::uint64_t(v) : 0;
}

// What an allocation in MemorySpace can get, 0 when the space cannot tell.
template <class MemorySpace>
std::uint64_t memory_capacity() {
#ifdef KOKKOS_ENABLE_CUDA
  if constexpr (std::is_same<MemorySpace, Kokkos::CudaSpace>::value) {
    std::size_t free_bytes = 0, total = 0;
    return cudaMemGetInfo(&free_bytes, &total) == cudaSuccess ? std::uint64_t(free_bytes) : 0;
  }
#endif
#ifdef KOKKOS_ENABLE_HIP
  if constexpr (std::is_same<MemorySpace, compat::HIP::memory_space>::value) {
    std::size_t free_bytes = 0, total = 0;
    return hipMemGetInfo(&free_bytes, &total) == hipSuccess ? std::uint64_t(free_bytes) : 0;
  }
#endif
  if constexpr (std::is_same<MemorySpace, Kokkos::HostSpace>::value) return host_available_bytes();
  return 0;
}

inline std::string format_bytes(std::uint64_t b) {
  if (b == UINT64_MAX) return "more than 2^64 bytes";
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 6) v /= 1024.0, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, unit[u]);
  return buf;
}

// Whether an optional copy of `bytes` (one a kernel makes to run faster, and does without
// otherwise: head-major K and V, V packed for AMX) fits its budget: at most 1 GiB, and an eighth
// of what MemorySpace has available (and of KATTN_MEMORY_LIMIT).
template <class MemorySpace>
bool fits_copy_budget(std::uint64_t bytes) {
  const std::uint64_t available = memory_capacity<MemorySpace>(), limit = memory_limit_override();
  return bytes <= (std::uint64_t(1) << 30) && (available == 0 || bytes <= available / 8) &&
         (limit == 0 || bytes <= limit / 8);
}

// Refuses a workspace of `bytes` (from saturating_mul/add) in MemorySpace that does not fit:
//   "<what> needs 40.0 GiB (<shape>), more than the 20.1 GiB available in HostSpace; <how>".
template <class MemorySpace>
void require_memory(std::uint64_t bytes, const std::string& what, const std::string& shape, const std::string& how) {
  KATTN_REQUIRE(bytes != UINT64_MAX, what, ": its size (", shape, ") overflows 64 bits; ", how);
  const std::uint64_t limit = memory_limit_override();
  if (limit == 0 && bytes < kMemoryCheckThreshold) return;
  std::uint64_t capacity = memory_capacity<MemorySpace>();
  const char* source = "available in ";
  if (limit != 0 && (capacity == 0 || limit < capacity)) {
    capacity = limit;
    source = "allowed (KATTN_MEMORY_LIMIT) in ";
  }
  if (capacity != 0 && bytes > capacity)
    throw Error(concat(what, " needs ", format_bytes(bytes), " (", shape, "), more than the ", format_bytes(capacity),
                       " ", source, MemorySpace::name(), "; ", how));
}

}  // namespace detail
}  // namespace kattn
