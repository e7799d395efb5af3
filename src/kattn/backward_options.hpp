// Options of the backward pass beyond the forward's Options: how dQ is accumulated, and whether
// the result must be bitwise reproducible.
#pragma once

#include <cstdint>

#include "kattn/core/score_bias.hpp"

namespace kattn {

// dK and dV are always summed inside one team per key tile (no atomics, fixed order). dQ sums
// over key tiles, which live in different teams; the strategies differ in how:
enum class DqStrategy {
  // Host: key_chunks. Devices: query_pass when deterministic, else atomic.
  automatic,
  // One pass: the key tiles of each (sequence, KV head) are dealt to a fixed number of chunks,
  // one tile of each round of `chunks` tiles, in snake order (under a causal mask the chunks get
  // about the same work); chunk 0's team adds its dQ into dQ itself, the others into their own
  // partial arrays, summed in chunk order. Deterministic; extra memory (chunks - 1) x Nq x Hq x D.
  key_chunks,
  // Two passes: dK, dV per key tile, then one team per query tile recomputes P and dS and sums
  // dQ over the key tiles in order. Deterministic, no extra memory, 7 tile products instead of 5.
  query_pass,
  // One pass: dQ by atomic adds into the output. Not deterministic (float addition order).
  atomic,
};

struct BackwardOptions {
  // true: refuse the non-deterministic strategy (atomic), and never pick it automatically. The
  // deterministic strategies give bitwise the same gradients run to run and for every thread
  // count and team schedule (the key chunks are fixed by the problem and these options, never
  // by the machine's concurrency).
  bool deterministic = false;
  DqStrategy dq = DqStrategy::automatic;
  // key_chunks: chunks per (sequence, KV head); 0 = planned from the problem (see backward_plan).
  int dq_chunks = 0;
  // Where to write the gradient of Options::bias (kattn::score_bias_gradient, score_bias.hpp):
  // the bias's shape, summed over its broadcast dims in a fixed order (deterministic whatever the
  // strategy); inactive: not computed. A broadcast bias takes a workspace of B x Hq x Nq x Nk
  // accumulation values for the sum.
  ScoreBiasGradient dbias;
};

inline const char* name(DqStrategy s) {
  switch (s) {
    case DqStrategy::automatic:
      return "automatic";
    case DqStrategy::key_chunks:
      return "key-chunks";
    case DqStrategy::query_pass:
      return "query-pass";
    case DqStrategy::atomic:
      return "atomic";
  }
  return "?";
}

}  // namespace kattn
