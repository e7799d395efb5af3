// Performance model of ring attention and distributed decode, for scaling studies: time and
// efficiency at P ranks, the bytes each rank sends, and the overlap condition (tokens per rank
// needed to hide a ring step's transfer behind its work). Every input is measured
// (scaling_calibration.hpp: the kernel's rate against the shard size, a ping-pong's link) or a
// stated parameter of the cluster (links between nodes, ranks per node, overheads). Plain
// arithmetic, no MPI: `kattn-scale model` prints it, the tests and benchmarks compare with it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "model/scaling_calibration.hpp"

namespace kattn {
namespace scaling {

// Where the ranks sit and what a ring step costs besides its kernel.
struct Cluster {
  Link intra;                        // between ranks of one node (per rank, per direction)
  Link inter;                        // between nodes (per rank, per direction: a NIC shared by k ranks gives each 1/k)
  int ranks_per_node = 0;            // 0: every rank on one node
  double step_overhead_seconds = 0;  // per ring step: launches, synchronisation
  double memory_bytes_per_second = 0;  // for merging partial outputs; 0: merges are free
  double merge_passes = 3;             // float passes over a rank's (o, lse) per merge: read both, write one
};

struct RingModelInput {
  std::int64_t tokens = 0;  // global sequence length N (queries = keys)
  int ranks = 1;
  int batch = 1, heads_q = 1, heads_kv = 1, head_dim = 64;
  int bytes_per_value = 4;       // K and V as they travel
  int grad_bytes_per_value = 0;  // dK and dV as they travel back; 0: bytes_per_value
  bool causal = false;
  bool zigzag = true;            // causal: zigzag shards, every step half the pairs; false: contiguous, the last
                                 // rank computes a full block at every step after its diagonal one
  KernelRate rate;               // the forward kernel, FLOP/s per rank against tokens per rank
  double backward_ratio = 0;     // backward / forward time of the same piece; 0: forward only
  double baseline_tokens = 0;    // the one-rank run efficiency is against; 0: tokens per rank (weak)
  Cluster cluster;
};

struct RingModel {
  double tokens_per_rank = 0;
  double flops_per_rank = 0;         // useful forward work of a rank, the mean over ranks
  double step_compute_seconds = 0;   // a step's kernels after the first (at one rank: the only one)
  double step_transfer_seconds = 0;  // one step's messages over the slowest hop
  double step_merge_seconds = 0;     // folding one step's partial results into the rank's
  bool crosses_nodes = false;        // some hop of every step leaves its node
  double compute_seconds = 0;        // all kernels
  double overhead_seconds = 0;       // merges and per-step overheads
  double exposed_comm_seconds = 0;   // transfer time not hidden behind a step
  double seconds = 0;                // the slowest rank's
  double ideal_seconds = 0;  // the rank's work at the baseline's kernel rate
  double efficiency = 1;     // ideal / seconds
  double bytes_per_rank = 0;           // sent by one rank over the whole call
  double overlap_tokens_per_rank = 0;  // a step's work hides its transfer from here on
  bool hidden = true;                  // the transfer hides behind each step at these tokens per rank
};

// (P - 1) steps of one K and one V shard of N / P positions.
inline double ring_bytes_per_rank(const RingModelInput& in) {
  const double n = double(in.tokens) / in.ranks;
  return (in.ranks - 1) * 2.0 * in.batch * n * in.heads_kv * in.head_dim * in.bytes_per_value;
}

namespace parts {

// One step of the slowest rank at n tokens per rank: step 0 (its own keys: no receive, no merge)
// and every later step, which are alike.
struct ModelStep {
  double first_forward = 0, first_backward = 0;  // step 0's kernels
  double forward = 0, backward = 0;              // a later step's kernels
  double merge = 0, accumulate = 0;  // forward (o, lse) merge; backward dQ, dK, dV sums
  double kv = 0, grads = 0;          // forward K/V transfer; backward K/V + dK/dV, and dK/dV alone
  double grads_home = 0;
};

inline ModelStep model_step(const RingModelInput& in, double n, bool crosses_nodes) {
  ModelStep s;
  const double block = 4.0 * in.head_dim * in.heads_q * in.batch * n * n / in.rate.at(n);  // n x n pairs
  s.first_forward = in.causal ? 0.5 * block : block;  // the diagonal block: half its pairs under a causal mask
  s.forward = in.causal && in.zigzag ? 0.5 * block : block;
  s.first_backward = in.backward_ratio * s.first_forward;
  s.backward = in.backward_ratio * s.forward;
  const Cluster& cl = in.cluster;
  const double rows = double(in.batch) * n;
  if (cl.memory_bytes_per_second > 0) {
    s.merge = cl.merge_passes * rows * in.heads_q * (in.head_dim + 1) * 4.0 / cl.memory_bytes_per_second;
    s.accumulate = 3.0 * rows * (in.heads_q + 2.0 * in.heads_kv) * in.head_dim * 4.0 / cl.memory_bytes_per_second;
  }
  const Link& link = crosses_nodes ? cl.inter : cl.intra;
  const double values = 2.0 * rows * in.heads_kv * in.head_dim;  // K and V (or dK and dV)
  const int grad_bytes = in.grad_bytes_per_value > 0 ? in.grad_bytes_per_value : in.bytes_per_value;
  s.kv = link.seconds(values * in.bytes_per_value);
  s.grads = link.seconds(values * (in.bytes_per_value + grad_bytes));
  s.grads_home = link.seconds(values * grad_bytes);
  return s;
}

// P steps: step 0 computes on the rank's own keys while step 1's arrive; the transfer of step t
// overlaps step t - 1's work and only what sticks out of it is exposed. Every step after the
// first adds `extra` (its merge) and `overhead`; the first is the one-rank call itself.
inline double ring_pass(int P, double first_kernel, double kernel, double extra, double transfer, double overhead,
                        double* exposed) {
  double t = first_kernel, busy_before = t;
  for (int step = 1; step < P; ++step) {
    const double wait = std::max(0.0, transfer - busy_before);
    *exposed += wait;
    busy_before = kernel + extra + overhead;
    t += wait + busy_before;
  }
  return t;
}

// The rank's work (forward flops, and the backward's at backward_ratio times their time) at the
// one-rank baseline's kernel rate: tokens per rank for weak scaling, in.baseline_tokens for strong.
inline double ideal_seconds(const RingModelInput& in, double flops_per_rank, double tokens_per_rank) {
  const double baseline = in.baseline_tokens > 0 ? in.baseline_tokens : tokens_per_rank;
  return flops_per_rank * (1.0 + in.backward_ratio) / in.rate.at(baseline);
}

}  // namespace parts

// The step's work equals its transfer here (bisection in log n over the modelled step).
inline double ring_overlap_tokens(const RingModelInput& in) {
  const bool crosses = in.cluster.ranks_per_node > 0 && in.ranks > in.cluster.ranks_per_node;
  const auto slack = [&](double n) {
    const parts::ModelStep s = parts::model_step(in, n, crosses);
    return s.forward + s.merge + in.cluster.step_overhead_seconds - s.kv;
  };
  double lo = 1, hi = 1;
  while (slack(hi) < 0 && hi < 1e15) hi *= 2;
  if (slack(lo) >= 0) return lo;
  for (int i = 0; i < 100 && hi / lo > 1.0 + 1e-12; ++i) {
    const double mid = std::sqrt(lo * hi);
    (slack(mid) < 0 ? lo : hi) = mid;
  }
  return hi;
}

// Ring attention (forward, or forward + backward when backward_ratio > 0) on in.ranks ranks: the
// slowest rank's time in seconds step by step, its parts, the bytes it sends (forward: K/V; with
// the backward also K/V again and dK/dV) and its efficiency against the one-rank baseline.
inline RingModel model_ring(const RingModelInput& in) {
  RingModel m;
  const int P = in.ranks;
  const double N = double(in.tokens), n = N / P;
  const Cluster& cl = in.cluster;
  m.tokens_per_rank = n;
  // A ring over several nodes: kattn sends rank r's shard to rank r + t at step t, so at every
  // step some hop leaves its node and the step waits on the slowest.
  m.crosses_nodes = cl.ranks_per_node > 0 && P > cl.ranks_per_node;
  const parts::ModelStep s = parts::model_step(in, n, m.crosses_nodes);
  const double c = in.causal ? 0.5 : 1.0;
  m.flops_per_rank = 4.0 * in.head_dim * in.heads_q * in.batch * n * N * c;
  m.step_compute_seconds = P > 1 ? s.forward + s.backward : s.first_forward + s.first_backward;
  m.step_merge_seconds = s.merge + (in.backward_ratio > 0 ? s.accumulate : 0.0);
  m.step_transfer_seconds = P > 1 ? (in.backward_ratio > 0 ? std::max(s.kv, s.grads) : s.kv) : 0.0;
  const double overhead = cl.step_overhead_seconds;
  m.seconds = parts::ring_pass(P, s.first_forward, s.forward, s.merge, s.kv, overhead, &m.exposed_comm_seconds);
  m.bytes_per_rank = ring_bytes_per_rank(in);
  if (in.backward_ratio > 0) {
    // Backward: K/V travel again with the dK/dV of the previous step; after the last step the
    // dK/dV of the keys it held still have one hop home, with nothing left to hide behind.
    m.seconds +=
        parts::ring_pass(P, s.first_backward, s.backward, s.accumulate, s.grads, overhead, &m.exposed_comm_seconds);
    if (P > 1) m.seconds += s.grads_home, m.exposed_comm_seconds += s.grads_home;
    // K/V once more, and P shards of dK/dV (each step's, the last one's going home).
    const int grad_bytes = in.grad_bytes_per_value > 0 ? in.grad_bytes_per_value : in.bytes_per_value;
    if (P > 1) m.bytes_per_rank *= 2.0 + double(P) / (P - 1) * grad_bytes / in.bytes_per_value;
  }
  m.compute_seconds = s.first_forward + s.first_backward + (P - 1) * (s.forward + s.backward);
  m.overhead_seconds = m.seconds - m.compute_seconds - m.exposed_comm_seconds;
  m.ideal_seconds = parts::ideal_seconds(in, m.flops_per_rank, n);
  m.efficiency = m.seconds > 0 ? m.ideal_seconds / m.seconds : 1.0;
  m.overlap_tokens_per_rank = ring_overlap_tokens(in);
  m.hidden = P == 1 || (s.kv <= s.forward + s.merge + overhead &&
                        (in.backward_ratio == 0 || s.grads <= s.backward + s.accumulate + overhead));
  return m;
}

struct DecodeModelInput {
  std::int64_t context = 0;  // keys in the whole KV cache
  int ranks = 1;
  int batch = 1, queries = 1, heads_q = 1, heads_kv = 1, head_dim = 128;
  int bytes_per_value = 4;
  double flops_per_second = 0;         // per rank
  double memory_bytes_per_second = 0;  // per rank: streaming the KV shard
  double link_bytes_per_second = 0;
  double latency_seconds = 0;
};

struct DecodeModel {
  double local_seconds = 0;   // attention over the local shard (roofline: compute or memory bound)
  double reduce_seconds = 0;  // the allreduce of D + 1 numbers per query row
  double seconds = 0;
  double efficiency = 1;      // local / (local + reduce)
  double bytes_per_rank = 0;  // what the reduction moves per rank
};

// Recursive doubling: ceil(log2 P) exchanges of every query row's (lse, o).
inline DecodeModel model_decode(const DecodeModelInput& in) {
  DecodeModel m;
  const double P = in.ranks, keys = double(in.context) / P;
  const double kv_bytes = 2.0 * in.batch * keys * in.heads_kv * in.head_dim * in.bytes_per_value;
  const double flops = 4.0 * in.head_dim * in.heads_q * in.batch * in.queries * keys;
  m.local_seconds = std::max(kv_bytes / in.memory_bytes_per_second, flops / in.flops_per_second);
  const double rows = double(in.batch) * in.queries * in.heads_q;
  const double row_bytes = rows * (in.head_dim + 1) * in.bytes_per_value;
  const double rounds = in.ranks > 1 ? std::ceil(std::log2(P)) : 0.0;
  m.reduce_seconds = rounds * (in.latency_seconds + row_bytes / in.link_bytes_per_second);
  m.bytes_per_rank = rounds * row_bytes;
  m.seconds = m.local_seconds + m.reduce_seconds;
  m.efficiency = m.seconds > 0 ? m.local_seconds / m.seconds : 1.0;
  return m;
}

}  // namespace scaling
}  // namespace kattn
