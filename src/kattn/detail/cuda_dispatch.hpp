// kattn::attention's way to the hand-written CUDA kernels: on a CUDA execution space, a problem in
// 16-bit storage that the kernels take (detail/cuda/kernel_rule.hpp says which) runs on them, the
// dense forward or the split-KV paged decode; everything else, and every other space, runs the
// portable Kokkos kernel. Compiled in only where kattn is built with both a
// Kokkos that has CUDA and the kernels.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kattn/config.hpp"
#include "kattn/core/attention_params.hpp"
#include "kattn/core/split_planner.hpp"
#include "kattn/core/storage.hpp"
#include "kattn/options.hpp"
#include "kattn/ragged.hpp"
#include "kattn/workspace.hpp"

#if KATTN_ENABLE_CUDA && defined(KOKKOS_ENABLE_CUDA)
#include "kattn/detail/cuda/kernel_rule.hpp"
#define KATTN_CUDA_DISPATCH 1
#else
#define KATTN_CUDA_DISPATCH 0
#endif

namespace kattn {
namespace detail {

#if KATTN_CUDA_DISPATCH
// The library's int64 page indices as the decode's int32 ones (decode_params checked they fit).
struct NarrowPageIndices {
  const std::int64_t* from;
  std::int32_t* to;
  KOKKOS_INLINE_FUNCTION void operator()(std::int64_t i) const { to[i] = static_cast<std::int32_t>(from[i]); }
};

template <class S>
bool ran_on_cuda_forward(const Kokkos::Cuda& space, const AttentionParams<S, float>& p, const Options& opt,
                         SplitPlan& plan) {
  if (cuda::try_forward(p, opt, space.cuda_stream()) != nullptr) return false;
  plan = SplitPlan{};
  plan.units = plan.units_unsplit = 1;
  plan.reason = "the hand-written CUDA kernel (sm90a on compute capability 9.0, else sm80)";
  return true;
}

// The decode reads int32 page tables and a workspace for its split partials: both are made here,
// on the space's stream, for a problem the decode takes (from opt.workspace when set, else freed
// on return, as the portable kernels' buffers are; the host tables are staged by the copy before
// it returns).
template <class S>
bool ran_on_cuda_decode(const Kokkos::Cuda& space, const AttentionParams<S, float>& p, const Options& opt,
                        const BatchLengths& lengths, SplitPlan& plan) {
  cuda::DecodeParams d;
  cuda::DecodePageTable table;
  if (cuda::dispatch_decode_params(p, opt, lengths.q_len, lengths.kv_len, d, table) != nullptr) return false;
  using Mem = Kokkos::Cuda::memory_space;
  using Host = Kokkos::View<const std::int32_t*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
  const auto take = [&](const char* label, std::size_t n) {
    return take_buffer<std::int32_t, Mem>(opt.workspace, space, std::string("kattn::cuda_decode::") + label, n);
  };
  const auto indptr = take("page_indptr", table.indptr.size());
  const auto last = take("last_page_len", table.last_page_len.size());
  const auto indices = take("page_indices", static_cast<std::size_t>(table.entries()));
  Kokkos::deep_copy(space, indptr, Host(table.indptr.data(), table.indptr.size()));
  Kokkos::deep_copy(space, last, Host(table.last_page_len.data(), table.last_page_len.size()));
  Kokkos::parallel_for("kattn::cuda_decode::page_indices",
                       Kokkos::RangePolicy<Kokkos::Cuda, Kokkos::IndexType<std::int64_t>>(space, 0, table.entries()),
                       NarrowPageIndices{p.kv_page_indices, indices.data()});
  d.kv_page_indptr = indptr.data();
  d.kv_last_page_len = last.data();
  d.kv_page_indices = indices.data();
  d.num_splits = cuda::decode_num_splits(d);
  d.workspace_bytes = cuda::decode_workspace_bytes(d, d.num_splits);
  const auto scratch =
      take_buffer<unsigned char, Mem>(opt.workspace, space, "kattn::cuda_decode::workspace", d.workspace_bytes);
  d.workspace = scratch.data();
  if (cuda::decode(d, space.cuda_stream()) != cudaSuccess) return false;
  plan = SplitPlan{};
  plan.splits = d.num_splits;
  plan.units_unsplit = std::int64_t(p.batch) * p.heads_kv;
  plan.units = plan.units_unsplit * d.num_splits;
  plan.reason = "the hand-written CUDA split-KV paged decode (kernels/cuda), " + std::to_string(d.num_splits) +
                (d.num_splits == 1 ? " split" : " splits");
  return true;
}
#endif

// True when p ran on the hand-written kernels (plan says so); false: run the portable kernel.
// `lengths`: each sequence's queries and keys (ragged and paged; empty when dense).
template <class ExecSpace, class Q, class T, class KV>
bool ran_on_cuda_kernels(const ExecSpace& space, const AttentionParams<Q, T, KV>& p, const Options& opt,
                         const BatchLengths& lengths, SplitPlan& plan) {
#if KATTN_CUDA_DISPATCH
  if constexpr (std::is_same_v<ExecSpace, Kokkos::Cuda> && is_16bit_v<Q> && std::is_same_v<Q, KV>) {
    if (p.kv_page_indptr) return ran_on_cuda_decode(space, p, opt, lengths, plan);
    return ran_on_cuda_forward(space, p, opt, plan);
  }
#endif
  (void)space, (void)p, (void)opt, (void)lengths, (void)plan;
  return false;
}

}  // namespace detail
}  // namespace kattn
