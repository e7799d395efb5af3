// Options of the backward pass beyond the forward's Options: how dQ is accumulated, and whether
// the result must be bitwise reproducible.
#pragma once

#include <cstdint>

namespace kattn {

// dK and dV are always summed inside one team per key tile (no atomics, fixed order). dQ sums
// over key tiles, which live in different teams; the strategies differ in how:
enum class DqStrategy {
  // Host: key_chunks. Devices: query_pass when deterministic, else atomic.
  automatic,
  // One pass: the keys of each (sequence, KV head) are dealt round-robin, by tile, to a fixed
  // number of chunks; each chunk's team adds its dQ into its own partial array, and the
  // partials are summed in chunk order. Deterministic; extra memory chunks x Nq x Hq x D.
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
