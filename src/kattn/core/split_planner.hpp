// The split planner of split-KV attention (Flash-Decoding), the one rule for every backend: how
// many chunks to cut each sequence's keys into, so that a batch too small to fill the machine with
// (sequence, KV head) work units still does. Host-only arithmetic on the batch's lengths, no
// Kokkos: plan_splits.hpp applies it to the Kokkos kernels, the MPI layer to its local attention and
// kernels/cuda to the hand-written decode.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "kattn/errors.hpp"

namespace kattn {

// What the planner decided. Without a split, splits = 1 and chunk = 0.
struct SplitPlan {
  int splits = 1;                   // key chunks of the longest sequence
  std::int64_t chunk = 0;           // keys per chunk (0: each sequence cut into `splits` equal chunks)
  std::int64_t units = 0;           // work units (teams) of the launch that have keys or rows to do
  std::int64_t units_unsplit = 0;   // the same without splitting: sequences x KV heads x row tiles
  int processors = 0;               // the concurrency it planned for
  std::string reason;               // why, in a few words (`kattn plan` prints it)
};

// The work of a batch as the planner sees it: per sequence, its keys and its query-row tiles
// (0 for a sequence without queries), and the head groups a kernel cuts the KV heads into (one
// team each per row tile: the KV heads, or fewer where a team takes several heads together).
struct SplitWork {
  int head_groups = 1;
  std::vector<std::int64_t> kv_len;
  std::vector<std::int64_t> row_tiles;

  static SplitWork dense(std::int64_t batch, int head_groups, std::int64_t kv_len, std::int64_t row_tiles) {
    SplitWork w;
    w.head_groups = head_groups;
    w.kv_len.assign(static_cast<std::size_t>(batch), kv_len);
    w.row_tiles.assign(static_cast<std::size_t>(batch), row_tiles);
    return w;
  }
};

// Knobs of the planner. A chunk of fewer than min_chunk keys does not pay for its partial state
// (written, read back and merged); chunks are multiples of `granule` keys so that they hold whole
// key tiles.
struct SplitPlanKnobs {
  std::int64_t min_chunk = 256;
  std::int64_t granule = 64;
  int max_splits = 128;  // bounds the partial-state workspace
};

// Work units of the launch when every sequence is cut into chunks of `chunk` keys (0: no cut).
inline std::int64_t split_units(const SplitWork& work, std::int64_t chunk) {
  std::int64_t units = 0;
  for (std::size_t b = 0; b < work.kv_len.size(); ++b) {
    const std::int64_t chunks = chunk > 0 && work.kv_len[b] > chunk ? (work.kv_len[b] + chunk - 1) / chunk : 1;
    units += work.head_groups * work.row_tiles[b] * chunks;
  }
  return units;
}

// Picks the chunk size for `processors` concurrent units (SMs on a GPU, threads on a CPU): no split
// when the unsplit units already fill the processors, on one processor, or for contexts shorter
// than two chunks; otherwise the smallest chunk (a multiple of the granule, at least min_chunk,
// and cutting no sequence into more than max_splits chunks) whose units still fit in one wave of
// the processors, so that each processor gets one unit and the longest sequences are cut the
// most. Batch 1 x 8 KV heads x 32K keys on 132 SMs: chunks of 2048 keys, 16 splits, 128 units.
inline SplitPlan plan_splits(const SplitWork& work, int processors, const SplitPlanKnobs& knobs = {}) {
  KATTN_REQUIRE(processors >= 1, "processors: expected at least 1, got ", processors);
  KATTN_REQUIRE(work.head_groups >= 1, "head_groups: expected at least 1, got ", work.head_groups);
  KATTN_REQUIRE(work.kv_len.size() == work.row_tiles.size(), "SplitWork: kv_len and row_tiles differ in length");
  KATTN_REQUIRE(knobs.min_chunk >= 1 && knobs.granule >= 1 && knobs.max_splits >= 1,
                "SplitPlanKnobs: min_chunk, granule and max_splits must be >= 1");
  SplitPlan plan;
  plan.processors = processors;
  plan.units_unsplit = split_units(work, 0);
  plan.units = plan.units_unsplit;
  std::int64_t max_kv = 0;
  for (std::int64_t n : work.kv_len) max_kv = n > max_kv ? n : max_kv;
  const std::string units = std::to_string(plan.units_unsplit) + " work units";
  if (processors == 1) {
    plan.reason = "one processor: splitting would only add a merge";
  } else if (plan.units_unsplit >= processors) {
    plan.reason = units + " already fill " + std::to_string(processors) + " processors";
  } else if (max_kv < 2 * knobs.min_chunk) {
    plan.reason = "context of " + std::to_string(max_kv) + " keys is shorter than two chunks of " +
                  std::to_string(knobs.min_chunk);
  } else {
    // units(chunk) does not grow with the chunk: the smallest chunk whose units fit.
    const std::int64_t g = knobs.granule;
    // At least min_chunk keys, and few enough chunks for max_splits.
    const std::int64_t least = std::max(knobs.min_chunk, (max_kv + knobs.max_splits - 1) / knobs.max_splits);
    std::int64_t lo = (least + g - 1) / g, hi = (max_kv + g - 1) / g;  // in granules
    while (lo < hi) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      if (split_units(work, mid * g) <= processors)
        hi = mid;
      else
        lo = mid + 1;
    }
    const std::int64_t chunk = lo * g;
    if (chunk >= max_kv) {
      plan.reason = "no chunk of at least " + std::to_string(knobs.min_chunk) + " keys makes more units fit";
    } else {
      plan.chunk = chunk;
      plan.splits = static_cast<int>((max_kv + chunk - 1) / chunk);
      plan.units = split_units(work, chunk);
      plan.reason = units + " for " + std::to_string(processors) + " processors: keys cut into chunks of " +
                    std::to_string(chunk) + ", " + std::to_string(plan.units) + " units";
    }
  }
  return plan;
}

}  // namespace kattn
