// kattn::cuda — how many splits of the KV sequence a decode step uses: the library's one split
// planner (kattn/core/split_planner.hpp), applied to the decode grid. Host-only, no CUDA needed.
//
// One decode work unit (a CTA) is (sequence, KV head [, head group], split); the planner aims at
// one wave of units over the CTAs the GPU holds at once (SMs x decode_ctas_per_sm), never a
// split shorter than kMinKeysPerSplit keys, never more than kMaxSplits splits, at least 1:
//   batch 1 x 8 KV heads (groups of 4), 32K keys, 132 SMs x 2 CTAs -> 32 splits, 256 units
//   short contexts (< 2 * kMinKeysPerSplit keys) or batch*heads >= SMs x CTAs -> 1 split
#pragma once

#include <cstdint>

#include "kattn/core/split_planner.hpp"

namespace kattn::cuda {

inline constexpr int kMinKeysPerSplit = 256;
inline constexpr int kMaxSplits = 128;

// CTAs of the decode kernel an SM holds at once with `packed` query heads per CTA: its launch
// bound (decode_traits.cuh) caps the registers for two up to 4 heads (4 spill 4 bytes, 8 would
// spill 856). Hopper's shared memory holds two 96 KB CTAs; decode_num_splits bounds this by the
// shared memory of the device at hand (an A100 holds one). On the H200 two CTAs per SM streamed the cache
// 1.24-1.30x faster than one wherever the grid had the CTAs for it, 5% slower where it had one
// per SM (perf/RESULTS.md).
constexpr int decode_ctas_per_sm(int packed) { return packed <= 4 ? 2 : 1; }

// batch: sequences; kv_head_units: KV heads times query-head groups per KV head (the decode grid's
// y extent); max_seqlen: longest context in keys; num_sms: multiprocessor count; ctas_per_sm:
// decode_ctas_per_sm of the kernel that runs. Returns >= 1.
inline int plan_num_splits(int batch, int kv_head_units, int64_t max_seqlen, int num_sms, int ctas_per_sm = 1) {
  if (batch <= 0 || kv_head_units <= 0 || max_seqlen <= 0 || num_sms <= 0 || ctas_per_sm <= 0) return 1;
  SplitPlanKnobs knobs;
  knobs.min_chunk = kMinKeysPerSplit;
  knobs.max_splits = kMaxSplits;
  return plan_splits(SplitWork::dense(batch, kv_head_units, max_seqlen, 1), num_sms * ctas_per_sm, knobs).splits;
}

}  // namespace kattn::cuda
