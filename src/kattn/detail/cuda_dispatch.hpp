// kattn::attention's way to the hand-written CUDA kernels: on a CUDA execution space, a problem in
// 16-bit storage that the kernels take (kernels/cuda/include/kattn/cuda/library_dispatch.hpp says
// which) runs on them; everything else, and every other space, runs the portable Kokkos kernel.
// Compiled in only where kattn is built with both a Kokkos that has CUDA and the kernels.
#pragma once

#include <Kokkos_Core.hpp>
#include <type_traits>

#include "kattn/config.hpp"
#include "kattn/core/attention_params.hpp"
#include "kattn/core/split_planner.hpp"
#include "kattn/core/storage.hpp"
#include "kattn/options.hpp"

#if KATTN_ENABLE_CUDA && defined(KOKKOS_ENABLE_CUDA)
#include <kattn/cuda/library_dispatch.hpp>
#define KATTN_CUDA_DISPATCH 1
#else
#define KATTN_CUDA_DISPATCH 0
#endif

namespace kattn {
namespace detail {

// True when p ran on the hand-written kernels (plan says so); false: run the portable kernel.
template <class ExecSpace, class Q, class T, class KV>
bool ran_on_cuda_kernels(const ExecSpace& space, const AttentionParams<Q, T, KV>& p, const Options& opt,
                         SplitPlan& plan) {
#if KATTN_CUDA_DISPATCH
  if constexpr (std::is_same_v<ExecSpace, Kokkos::Cuda> && is_16bit_v<Q> && std::is_same_v<Q, KV>) {
    if (cuda::try_forward(p, opt, space.cuda_stream()) != nullptr) return false;
    plan = SplitPlan{};
    plan.units = plan.units_unsplit = 1;
    plan.reason = "the hand-written CUDA kernel (sm90a on compute capability 9.0, else sm80)";
    return true;
  }
#endif
  (void)space, (void)p, (void)opt, (void)plan;
  return false;
}

}  // namespace detail
}  // namespace kattn
