// The forward kernels' entry points, declared only: their one definition and explicit
// instantiation per backend and scalar type is forward_kernels.cpp, so every other translation
// unit (the front door, the MPI layer, the CLI, users' code) calls them without compiling them.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>

#include "kattn/core/attention_params.hpp"
#include "kattn/core/split_planner.hpp"
#include "kattn/detail/accessible.hpp"
#include "kattn/options.hpp"
#include "kattn/ragged.hpp"

namespace kattn {
namespace detail {

// Attention for one validated problem, every option included: the split from opt.splits /
// opt.split_chunk or planned (opt.splits == 0), opt.block_mask (dense problems), opt.progress.
// `lengths` holds each sequence's queries and keys for ragged and paged batches; empty when
// dense. Returns the split it used. Its scratch (split partials, the head-major K and V of
// head_major_kv.hpp) comes from opt.workspace when set.
// Instantiated for storage (Q, KV) = (float, float), (double, double), (bf16, bf16), (fp16, fp16),
// (float, bf16) and (float, fp16), T = accumulate_t<Q>.
template <class ExecSpace, class Q, class T, class KV>
SplitPlan attention_impl(const ExecSpace& space, const AttentionParams<Q, T, KV>& p, const Options& opt,
                         const BatchLengths& lengths);

// Finished partial states of the query rows over `chunks` consecutive chunks of `chunk` keys (the
// last may be short; p.kv_len covers them all), unmerged, mask placed by opt.diagonal_shift: the
// building block of the MPI layer's deterministic mode. Partial s of row (b, i, h) goes to
// ws_o[((s * rows) + (b * q_len + i) * heads_q + h) * D] and ws_lse[s * rows + ...], rows =
// batch * q_len * heads_q. A chunk's partial for a row depends only on that row, the chunk's keys,
// block_k and the mask (tiles start at the chunk start; the per-row arithmetic does not depend on
// which rows share a tile), so it has the same bits on every rank count. opt.block_k must be set.
// Instantiated for (Q, KV) = (float, float), (double, double), (float, bf16) and (float, fp16):
// partials are in the accumulation type T, whatever the cache's storage.
template <class ExecSpace, class Q, class T, class KV>
void chunk_partials(const ExecSpace& space, const AttentionParams<Q, T, KV>& p, const Options& opt, int chunks,
                    std::int64_t chunk, T* ws_o, T* ws_lse);

}  // namespace detail
}  // namespace kattn
