// What the forward and the backward share to run under a block mask: the mask's BSR arrays in the
// execution space's memory, and tiles aligned to its blocks. Included by the .cpp files that
// compile the kernels, not by users.
#pragma once

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <utility>

#include "kattn/block_mask.hpp"
#include "kattn/detail/block_sparse.hpp"
#include "kattn/options.hpp"
#include "kattn/workspace.hpp"

namespace kattn {
namespace detail {

// A tile size of at most `cap` positions that never straddles a mask block of B positions: B
// itself when it fits, else the largest divisor of B up to cap (when it is not tiny, which would
// cost more in per-tile overhead than straddling tiles cost in masked work), else cap.
inline int aligned_tile(std::int64_t B, int cap) {
  cap = std::max(cap, 1);
  if (B <= cap) return static_cast<int>(B);
  for (int d = cap; d >= 1; --d)
    if (B % d == 0) return 4 * d >= cap ? d : cap;
  return cap;
}

// The options' tiles, or tiles aligned to the mask block when the options leave them at 0 (cap_q
// query rows and cap_k keys: what the planner would choose for the dense problem), so that a tile
// is either skipped or computed whole.
inline Options aligned_options(const Options& opt, std::int64_t B, int G, std::int64_t q_len, std::int64_t kv_len,
                               int cap_q, int cap_k) {
  Options o = opt;
  if (o.block_q == 0) {
    // Positions per tile: all of them when they fit one tile (a tile from position 0 is aligned).
    const std::int64_t cap_pos = std::max(1, cap_q / G);
    o.block_q = G * static_cast<int>(q_len <= cap_pos ? std::max<std::int64_t>(q_len, 1)
                                                      : aligned_tile(B, static_cast<int>(cap_pos)));
  }
  if (o.block_k == 0) o.block_k = kv_len <= cap_k ? cap_k : aligned_tile(B, cap_k);
  return o;
}

// The mask's BSR arrays copied to the execution space's memory (into buffers of ws when set), and
// the kernels' view of them. The caller fences before it goes out of scope.
template <class ExecSpace>
struct DeviceMask {
  Kokkos::View<std::int64_t*, typename ExecSpace::memory_space> indptr, indices;
  BlockSparse bs;

  DeviceMask(const BlockMask& mask, Workspace* ws) {
    using Host = Kokkos::View<const std::int64_t*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
    using Mem = typename ExecSpace::memory_space;
    indptr = take_buffer<std::int64_t, Mem>(ws, "kattn::block_sparse::indptr", mask.indptr().size());
    indices = take_buffer<std::int64_t, Mem>(ws, "kattn::block_sparse::indices",
                                             std::max<std::size_t>(mask.indices().size(), 1));
    Kokkos::deep_copy(indptr, Host(mask.indptr().data(), mask.indptr().size()));
    if (!mask.indices().empty())
      Kokkos::deep_copy(Kokkos::subview(indices, std::make_pair(std::size_t(0), mask.indices().size())),
                        Host(mask.indices().data(), mask.indices().size()));
    bs.indptr = indptr.data();
    bs.indices = indices.data();
    bs.heads = mask.heads();
    bs.q_blocks = mask.q_blocks();
    bs.k_blocks = mask.k_blocks();
    bs.block = mask.block();
  }
};

}  // namespace detail
}  // namespace kattn
