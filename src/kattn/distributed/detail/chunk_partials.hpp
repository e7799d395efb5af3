// The deterministic mode's chunk partials (kattn::detail::chunk_partials, compiled once with the
// forward kernels) and the key tile size they use on every rank count.
#pragma once

#include <cstdint>

#include "kattn/detail/attention_impl.hpp"
#include "kattn/detail/tile_sizes.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace dist {
namespace detail {

using kattn::detail::chunk_partials;

// The key tile size of the deterministic mode: opt.block_k, or what the planner picks for the
// whole (global) problem, so every rank count uses the same.
template <class ExecSpace, class T>
int deterministic_block_k(const ExecSpace& space, int head_dim, std::int64_t global_query_rows, const Options& opt) {
  if (opt.block_k > 0) return opt.block_k;
  return plan_tiles<ExecSpace, T>(space, head_dim, global_query_rows, opt).geometry.block_k;
}

}  // namespace detail
}  // namespace dist
}  // namespace kattn
