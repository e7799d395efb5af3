// ALiBi (Options::alibi_slopes, core/alibi.hpp) at the forward kernels' entry points: the slopes
// copied to the execution space in log2 units and handed to the kernels through
// AttentionParams::alibi_log2, so every path that runs the tile loop (dense, split-KV, decode,
// ragged, paged, block-sparse, the MPI layer's shards) adds the bias in the one step of the loop.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "kattn/compat.hpp"
#include "kattn/core/state.hpp"
#include "kattn/detail/per_head.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace detail {

// The slopes fit the call: none, or one per query head.
inline void require_alibi(const Options& opt, std::int64_t heads_q) {
  require_per_head(opt.alibi_slopes, heads_q, "alibi_slopes", "slope");
}

// Refuses ALiBi where a path cannot place its distances (`where` names the path).
inline void refuse_alibi(const Options& opt, const char* where) {
  KATTN_REQUIRE(opt.alibi_slopes.empty(), "alibi_slopes: not supported with ", where);
}

// run(p) with p.alibi_log2 set from opt (or p as it is without slopes); returns what run returns.
template <class ExecSpace, class P, class Run>
auto with_alibi(const ExecSpace& space, P p, const Options& opt, const Run& run) {
  require_alibi(opt, p.heads_q);
  if (opt.alibi_slopes.empty()) return run(p);
  using Acc = typename P::acc_type;
  const auto slopes = per_head_values<Acc>(space, opt.alibi_slopes, kLog2e, "kattn::alibi_slopes");
  p.alibi_log2 = slopes.data();
  struct Fence {  // the kernels read the slopes until they finish, also when run throws
    const ExecSpace& space;
    ~Fence() { compat::fence(space, "kattn::alibi: the slopes are freed on return"); }
  } fence{space};
  return run(p);
}

}  // namespace detail
}  // namespace kattn
