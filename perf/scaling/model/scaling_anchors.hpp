// Published scaling results and the parameters of the hardware they ran on, as inputs of the
// scaling model: the model run with them must land near the published efficiency before it is
// trusted to extrapolate. Sources and the derivation of every number are in docs/distributed-reference.md
// ("How close the model gets"); `kattn-scale model --anchor NAME` prints the same.
#pragma once

#include <string>
#include <vector>

#include "model/grid_model.hpp"
#include "model/scaling_model.hpp"

namespace kattn {
namespace scaling {

struct ScalingAnchor {
  std::string name;
  std::string source;
  double published_efficiency = 0;
  RingModelInput input;
};

namespace parts {

// ring-flash-attn's README benchmark: 8 x H800 on NVLink, Llama-3.1-8B attention (32 query heads,
// 8 KV heads, D = 128), bf16, causal, zigzag, batch 1, 8K tokens per GPU. Its one-GPU column
// (flash_attn at 8K: 591.5 iter/s forward, 154.7 forward + backward) gives the kernel's rate and
// the backward/forward ratio; the merge is its PyTorch update_out_and_lse in float32 (9.5 passes
// over the output: the cast, out - block_out, the scaled product, the subtraction).
inline RingModelInput ring_flash_attn_h800(bool backward) {
  RingModelInput in;
  const double n = 8192;
  in.ranks = 8, in.tokens = 8 * 8192;
  in.heads_q = 32, in.heads_kv = 8, in.head_dim = 128;
  in.bytes_per_value = 2, in.grad_bytes_per_value = 4;  // bf16 K/V; dK/dV accumulate in float32
  in.causal = true;
  const double forward_flops = 4.0 * in.head_dim * in.heads_q * n * n / 2;
  in.rate = KernelRate(forward_flops * 591.5);
  in.backward_ratio = backward ? 591.5 / 154.7 - 1.0 : 0.0;
  in.cluster.ranks_per_node = 8;
  in.cluster.intra = Link{200e9, 10e-6};         // H800 NVLink: 400 GB/s both ways; NCCL point-to-point latency
  in.cluster.inter = Link{50e9, 10e-6};          // beyond 8 ranks only: a 400 Gb/s NIC per GPU (assumed)
  in.cluster.memory_bytes_per_second = 3.35e12;  // HBM3
  in.cluster.merge_passes = 9.5;
  in.cluster.step_overhead_seconds = 20e-6;  // a few kernel launches from Python per step
  return in;
}

// Meta, "Context Parallelism for Scalable Million-Token Inference" (arXiv 2411.01783): Llama 3
// 405B, 1M tokens, 16 nodes x 8 H100, tensor parallel over the 8 GPUs of a node (16 query heads,
// 1 KV head per GPU, D = 128) and the pass-KV ring across nodes, every hop over RDMA (400 Gb/s per
// GPU), bf16, causal with load-balanced sharding. The kernel at 540 TFLOP/s, the paper's own
// standalone FlashAttention-3 causal benchmark at 8K tokens on one of its H100s (power-limited to
// 500 W, 96 GB of HBM2e at 2.4 TB/s): its Appendix A counts the whole prefill's 502 TFLOP/s per
// GPU (GEMMs included) and Section 4.2.3 divides that by this rate for the 93% (docs/distributed-reference.md).
inline RingModelInput meta_cp_1m_h100() {
  RingModelInput in;
  in.ranks = 16, in.tokens = std::int64_t(1) << 20;
  in.heads_q = 16, in.heads_kv = 1, in.head_dim = 128;
  in.bytes_per_value = 2;
  in.causal = true;
  in.rate = KernelRate(540e12);
  in.cluster.ranks_per_node = 1;  // one GPU of each node per ring: every hop leaves the node
  in.cluster.intra = Link{450e9, 5e-6};
  in.cluster.inter = Link{50e9, 10e-6};
  in.cluster.memory_bytes_per_second = 2.4e12;  // HBM2e
  // The merge (Appendix B, eq. 4; xformers' merge_attentions) folds the 16 partial outputs once at
  // the end: 16 reads and a write of the output in all, 17 / 15 passes per ring step.
  in.cluster.merge_passes = 17.0 / 15.0;
  in.cluster.step_overhead_seconds = 20e-6;
  return in;
}

}  // namespace parts

// Every anchor, by name: what `kattn-scale model --anchor NAME` and the tests run.
inline std::vector<ScalingAnchor> scaling_anchors() {
  return {{"ring-flash-attn-fwd", "github.com/zhuzilin/ring-flash-attention README, zigzag_ring, 8xH800, fwd only",
           0.852, parts::ring_flash_attn_h800(false)},
          {"ring-flash-attn-fwd-bwd", "github.com/zhuzilin/ring-flash-attention README, zigzag_ring, 8xH800, fwd + bwd",
           0.902, parts::ring_flash_attn_h800(true)},
          {"meta-cp-1m", "arXiv 2411.01783, Llama 3 405B 1M-token prefill, 16 x 8 H100, 77 s", 0.93,
           parts::meta_cp_1m_h100()}};
}

// Published speedups of 2D schemes over ring attention, with the hardware they ran on as model
// inputs: `kattn-scale model --crossover NAME` prints the ring against the grid at 8 to 1024 ranks
// on that hardware (the anchor's whole sequence over every rank count: strong scaling) and the
// speedup at the published rank count beside the paper's. The papers' sequence lengths and head
// shapes were not at hand: those below are assumptions, named as such, and so are the link and
// kernel rates (each the hardware's usual figure). The model is kattn's grid, not the papers'
// schedules: queries and results travel in float (kattn widens 16-bit queries), every block's
// rows go back to their owner.
struct GridAnchor {
  std::string name;
  std::string source;
  int published_ranks = 0;
  double published_speedup = 0;  // over ring attention, the paper's best at that rank count
  std::string published;         // the claim as the paper states it
  std::string assumed;           // what the model takes that the paper was not checked for
  RingModelInput input;          // at published_ranks
  // The anchor's problem and hardware on P ranks (the same whole sequence).
  RingModelInput at(int P) const {
    RingModelInput in = input;
    in.ranks = P;
    return in;
  }
};

namespace parts {

// A 2D anchor's hardware: the kernel's rate, ranks per node, the links, the memory bandwidth.
struct GridHardware {
  double flops_per_second = 0;
  int ranks_per_node = 0;
  Link intra, inter;
  double memory_bytes_per_second = 0;
};

// An attention layer of `heads` heads of 128 (MHA), bf16, causal over zigzag shards, batch 1.
inline RingModelInput grid_setup(std::int64_t tokens, int ranks, int heads, const GridHardware& hw) {
  RingModelInput in;
  in.ranks = ranks, in.tokens = tokens;
  in.heads_q = heads, in.heads_kv = heads, in.head_dim = 128;
  in.bytes_per_value = 2;
  in.causal = true;
  in.rate = KernelRate(hw.flops_per_second);
  in.cluster.ranks_per_node = hw.ranks_per_node;
  in.cluster.intra = hw.intra, in.cluster.inter = hw.inter;
  in.cluster.memory_bytes_per_second = hw.memory_bytes_per_second;
  in.cluster.merge_passes = 3;
  in.cluster.step_overhead_seconds = 10e-6;  // a kernel launch and a fold per piece
  return in;
}

}  // namespace parts

inline std::vector<GridAnchor> grid_anchors() {
  // A100 80 GB: FlashAttention-2 forward, NVLink 3 (300 GB/s a direction), HBM2e; H100: FlashAttention-3
  // forward, NVLink 4 (450 GB/s a direction), HBM3. Between nodes: the NIC's share per GPU.
  const parts::GridHardware a100_4{190e12, 4, Link{300e9, 10e-6}, Link{25e9, 10e-6}, 2.0e12};
  const parts::GridHardware h100_1{500e12, 1, Link{450e9, 5e-6}, Link{50e9, 10e-6}, 3.35e12};
  const parts::GridHardware h100_8{500e12, 8, Link{450e9, 5e-6}, Link{50e9, 10e-6}, 3.35e12};
  return {{"attention2d-a100", "Attention2D, arXiv 2503.15758 (GPT-3-like model, 64 A100 on 16 nodes)", 64, 5.0,
           "up to 5x over Ring Attention on 64 A100 GPUs across 16 nodes",
           "128K tokens, 96 heads x 128, bf16, causal; FlashAttention-2 at 190 TFLOP/s; 4 GPUs a node on NVLink 3 "
           "(300 GB/s a direction); 200 Gb/s InfiniBand per GPU (25 GB/s)",
           parts::grid_setup(std::int64_t(1) << 17, 64, 96, a100_4)},
          {"attention2d-h100", "Attention2D, arXiv 2503.15758 (GPT-3-like model, 64 H100 on 64 nodes)", 64, 9.4,
           "up to 9.4x over Ring Attention on 64 H100 GPUs across 64 nodes",
           "128K tokens, 96 heads x 128, bf16, causal; FlashAttention-3 at 500 TFLOP/s; one GPU a node, 400 Gb/s "
           "InfiniBand (50 GB/s)",
           parts::grid_setup(std::int64_t(1) << 17, 64, 96, h100_1)},
          {"mesh-attention-256", "Mesh-Attention, arXiv 2512.20968 (256 GPUs)", 256, 3.4,
           "up to 3.4x (2.9x on average) over Ring-Attention on 256 GPUs, 79-85% less communication",
           "1M tokens, 32 heads x 128 (MHA), bf16, causal; 32 nodes of 8 H100-class GPUs (NVLink 450 GB/s a "
           "direction, 400 Gb/s InfiniBand per GPU); kernel at 500 TFLOP/s",
           parts::grid_setup(std::int64_t(1) << 20, 256, 32, h100_8)}};
}

}  // namespace scaling
}  // namespace kattn
