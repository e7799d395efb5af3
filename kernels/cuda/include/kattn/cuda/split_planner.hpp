// kattn::cuda — the split-KV planner: how many splits of the KV sequence a decode
// step uses. A plain host function with no CUDA dependency so that the Kokkos
// split-KV path can apply the same rule.
//
// Rule: one decode work unit is (sequence, KV head [, head group], split). Aim at one
// wave of units over the multiprocessors, splits = floor(num_sms / units_without_split),
// but never make a split shorter than kMinKeysPerSplit keys (merging costs more than
// it gains on short chunks), never more than kMaxSplits, and at least 1.
//   batch 1 x 8 KV heads, 32K keys, 132 SMs -> 16 splits, 128 work units
//   short contexts (< 2 * kMinKeysPerSplit keys) or batch*heads >= SMs -> 1 split
#pragma once

#include <algorithm>
#include <cstdint>

namespace kattn::cuda {

inline constexpr int kMinKeysPerSplit = 256;
inline constexpr int kMaxSplits = 128;

// batch: sequences; kv_head_units: KV heads times query-head groups per KV head
// (the decode grid's y extent); max_seqlen: longest context in keys; num_sms:
// multiprocessor count. Returns the number of splits, >= 1.
inline int plan_num_splits(int batch, int kv_head_units, int64_t max_seqlen, int num_sms) {
  if (batch <= 0 || kv_head_units <= 0 || max_seqlen <= 0 || num_sms <= 0) return 1;
  const int64_t units = int64_t(batch) * kv_head_units;
  if (units >= num_sms) return 1;
  int64_t splits = num_sms / units;
  const int64_t by_length = max_seqlen / kMinKeysPerSplit;  // floor: each split >= min keys
  splits = std::min<int64_t>(splits, by_length);
  splits = std::min<int64_t>(splits, kMaxSplits);
  return int(std::max<int64_t>(splits, 1));
}

}  // namespace kattn::cuda
