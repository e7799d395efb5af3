// Checks an allocation against the memory it would take, before it is made: for programs that
// allocate kattn's inputs and outputs themselves and want kattn's clear error instead of an
// allocator's crash or the OOM killer. The same check every kattn call makes for its own buffers.
#pragma once

#include <cstdint>
#include <string>

#include "kattn/detail/memory_check.hpp"

namespace kattn {

// Throws kattn::Error when `bytes` (UINT64_MAX: a size that overflowed) do not fit what
// MemorySpace has available (host spaces: MemAvailable; CUDA and HIP: the free device memory;
// KATTN_MEMORY_LIMIT, in bytes, caps every space):
//   "<what> needs 40.0 GiB (<shape>), more than the 20.1 GiB available in HostSpace; <how>".
template <class MemorySpace>
void check_memory(std::uint64_t bytes, const std::string& what, const std::string& shape, const std::string& how) {
  detail::require_memory<MemorySpace>(bytes, what, shape, how);
}

}  // namespace kattn
