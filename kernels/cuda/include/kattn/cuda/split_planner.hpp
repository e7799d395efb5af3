// kattn::cuda — how many splits of the KV sequence a decode step uses: the library's one split
// planner (kattn/core/split_planner.hpp), applied to the decode grid. Host-only, no CUDA needed.
//
// One decode work unit is (sequence, KV head [, head group], split); the planner aims at one wave
// of units over the multiprocessors, never a split shorter than kMinKeysPerSplit keys, never more
// than kMaxSplits splits, at least 1:
//   batch 1 x 8 KV heads, 32K keys, 132 SMs -> 16 splits, 128 work units
//   short contexts (< 2 * kMinKeysPerSplit keys) or batch*heads >= SMs -> 1 split
#pragma once

#include <cstdint>

#include "kattn/core/split_planner.hpp"

namespace kattn::cuda {

inline constexpr int kMinKeysPerSplit = 256;
inline constexpr int kMaxSplits = 128;

// batch: sequences; kv_head_units: KV heads times query-head groups per KV head (the decode grid's
// y extent); max_seqlen: longest context in keys; num_sms: multiprocessor count. Returns >= 1.
inline int plan_num_splits(int batch, int kv_head_units, int64_t max_seqlen, int num_sms) {
  if (batch <= 0 || kv_head_units <= 0 || max_seqlen <= 0 || num_sms <= 0) return 1;
  SplitPlanKnobs knobs;
  knobs.min_chunk = kMinKeysPerSplit;
  knobs.max_splits = kMaxSplits;
  return plan_splits(SplitWork::dense(batch, kv_head_units, max_seqlen, 1), num_sms, knobs).splits;
}

}  // namespace kattn::cuda
