// Performance model of ring attention and distributed decode, for scaling studies: time and
// efficiency at P ranks from a measured per-rank throughput and a link bandwidth, the bytes each
// rank sends, and the overlap condition (tokens per rank needed to hide the ring transfer behind
// the step's compute). Plain arithmetic, no MPI: `kattn scale --model` prints it, the tests and
// benchmarks compare measurements with it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace kattn {
namespace dist {

struct RingModelInput {
  std::int64_t tokens = 0;  // global sequence length N (queries = keys)
  int ranks = 1;
  int batch = 1, heads_q = 1, heads_kv = 1, head_dim = 64;
  int bytes_per_value = 4;
  bool causal = false;               // zigzag sharding assumed: every rank does half the pairs
  double flops_per_second = 0;       // per rank, measured on the local attention kernel
  double link_bytes_per_second = 0;  // per direction, per rank
  double latency_seconds = 0;        // per message
};

struct RingModel {
  double tokens_per_rank = 0;
  double flops_per_rank = 0;         // useful work of one rank
  double step_compute_seconds = 0;   // one (query shard, key shard) step
  double step_transfer_seconds = 0;  // one K and one V shard over the link
  double compute_seconds = 0;        // all steps
  double exposed_comm_seconds = 0;   // transfer time not hidden behind compute
  double seconds = 0;
  double efficiency = 1;  // compute / (compute + exposed communication)
  double bytes_per_rank = 0;
  double overlap_tokens_per_rank = 0;  // the step compute equals the step transfer here
  bool hidden = true;                  // the transfer hides behind compute at these tokens per rank
};

// (P - 1) steps of one K and one V shard of N / P positions.
inline double ring_bytes_per_rank(const RingModelInput& in) {
  const double n = double(in.tokens) / in.ranks;
  return (in.ranks - 1) * 2.0 * in.batch * n * in.heads_kv * in.head_dim * in.bytes_per_value;
}

// Tokens per rank n at which a step's compute a n^2 equals its transfer latency + b n.
inline double ring_overlap_tokens(const RingModelInput& in) {
  const double c = in.causal ? 0.5 : 1.0;
  const double a = 4.0 * in.head_dim * in.heads_q * in.batch * c / in.flops_per_second;
  const double b = 2.0 * in.batch * in.heads_kv * in.head_dim * in.bytes_per_value / in.link_bytes_per_second;
  return (b + std::sqrt(b * b + 4.0 * a * in.latency_seconds)) / (2.0 * a);
}

inline RingModel model_ring(const RingModelInput& in) {
  RingModel m;
  const double P = in.ranks, N = double(in.tokens), n = N / P;
  const double c = in.causal ? 0.5 : 1.0;
  m.tokens_per_rank = n;
  m.flops_per_rank = 4.0 * in.head_dim * in.heads_q * in.batch * n * N * c;
  m.step_compute_seconds = m.flops_per_rank / P / in.flops_per_second;
  m.step_transfer_seconds = in.latency_seconds + 2.0 * in.batch * n * in.heads_kv * in.head_dim * in.bytes_per_value /
                                                     in.link_bytes_per_second;
  m.compute_seconds = P * m.step_compute_seconds;
  // Each of the P - 1 transfers overlaps one step's compute; what sticks out is exposed.
  m.exposed_comm_seconds = (P - 1) * std::max(0.0, m.step_transfer_seconds - m.step_compute_seconds);
  m.seconds = m.compute_seconds + m.exposed_comm_seconds;
  m.efficiency = m.seconds > 0 ? m.compute_seconds / m.seconds : 1.0;
  m.bytes_per_rank = ring_bytes_per_rank(in);
  m.overlap_tokens_per_rank = ring_overlap_tokens(in);
  m.hidden = in.ranks == 1 || m.step_transfer_seconds <= m.step_compute_seconds;
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

}  // namespace dist
}  // namespace kattn
