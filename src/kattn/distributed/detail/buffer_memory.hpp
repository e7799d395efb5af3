// The memory check of the buffers a distributed call allocates up front (message buffers,
// accumulators, partial workspaces), made inside the call's collective allocation step: a buffer
// that does not fit on one rank (its memory, or KATTN_MEMORY_LIMIT there) fails on every rank
// before any transfer. With a workspace, a request that does not fit first frees the buffers the
// workspace holds idle (kinds this call may not take) and is checked again. Internal.
#pragma once

#include <cstdint>

#include "kattn/detail/memory_check.hpp"
#include "kattn/workspace.hpp"

namespace kattn {
namespace dist {
namespace detail {

using kattn::detail::take_buffer;

template <class MemorySpace>
void require_buffers(Workspace* ws, const char* call, std::uint64_t values, std::uint64_t value_bytes) {
  kattn::detail::require_memory<MemorySpace>(
      ws, kattn::detail::saturating_mul(values, value_bytes), kattn::detail::concat(call, ": its buffers"),
      kattn::detail::concat(values, " values of ", value_bytes, " bytes"), "spread the sequence over more ranks");
}

// Buffers of two value sizes (a 16-bit call's K/V in 16 bits and its float copies of the rest).
template <class MemorySpace>
void require_buffers(Workspace* ws, const char* call, std::uint64_t values, std::uint64_t value_bytes,
                     std::uint64_t other_values, std::uint64_t other_bytes) {
  using kattn::detail::saturating_mul;
  kattn::detail::require_memory<MemorySpace>(
      ws, kattn::detail::saturating_add(saturating_mul(values, value_bytes), saturating_mul(other_values, other_bytes)),
      kattn::detail::concat(call, ": its buffers"),
      kattn::detail::concat(values, " values of ", value_bytes, " bytes and ", other_values, " of ", other_bytes),
      "spread the sequence over more ranks");
}

}  // namespace detail
}  // namespace dist
}  // namespace kattn
