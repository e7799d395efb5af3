// The backward pass of attention (FlashAttention's, with recomputation): dQ, dK, dV of the loss
// sum(O * dO) from q, k, v, the forward's o and lse, and dO, in O(N) extra memory: the scores
// and probabilities are recomputed tile by tile from q, k and the saved lse, never stored.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstddef>
#include <vector>

#include "kattn/backward_options.hpp"
#include "kattn/backward_params.hpp"
#include "kattn/backward_shapes.hpp"
#include "kattn/options.hpp"

namespace kattn {

// What a backward call did (decided before any kernel runs).
struct BackwardInfo {
  DqStrategy dq = DqStrategy::key_chunks;  // the strategy used (never automatic)
  bool deterministic = true;               // bitwise reproducible for every thread count and schedule
  int chunks = 1;                          // key_chunks: the chunk count (else key-pass teams per head)
  int block_q = 0, block_k = 0;            // tile sizes
  std::size_t workspace_bytes = 0;         // extra device memory beyond the arguments
  std::vector<double> dsinks;              // d(sum(o * dout)) / d(Options::sinks); empty without sinks
  // The key pass's products on a host space: bf16_dot where bf16 storage multiplied as bf16 pairs
  // (host_backward_cpu_products, and finite inputs), else widened.
  CpuProducts cpu_products = CpuProducts::widened;
};

namespace detail {

// The backward kernels for one validated problem, opt.block_mask included (dense problems);
// compiled once per backend and scalar type in backward.cpp. Returns when the gradients are
// written (the workspace is freed on return).
template <class ExecSpace, class T>
BackwardInfo backward_impl(const ExecSpace& space, const BackwardParams<T>& p, const Options& opt,
                           const BackwardOptions& bopt);

}  // namespace detail

}  // namespace kattn
