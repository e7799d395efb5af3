// Shapes of the split-KV paged decode kernel.
//   256 threads; a key is read by kTpk = D/8 threads, one 16-byte chunk (8 elements) each,
//   so kKpp = 256 / kTpk keys are read per pass and a warp's loads are whole 16-byte
//   vectors over contiguous key rows. Each thread stages kU keys (K and V) per pipeline
//   stage through cp.async; kStages - 1 stages are in flight while one is consumed:
//   (kStages-1) * kU * 2 * 16 B * 256 threads = 64 KB in flight per CTA.
//   A thread only ever reads back the chunks it copied itself, so the pipeline needs no
//   CTA barrier (cp.async.wait_group orders a thread's own copies).
#pragma once

#include <kattn/cuda/split_planner.hpp>

namespace kattn::cuda::detail {

template <int D, int GP>
struct DecodeTraits {
  static_assert(D == 64 || D == 128 || D == 256, "head dim");
  static_assert(GP == 1 || GP == 2 || GP == 4 || GP == 8, "packed query heads");
  static constexpr int kHeadDim = D;
  static constexpr int kGroup = GP;  // query heads packed per CTA (one KV head)
  static constexpr int kThreads = 256;
  static constexpr int kTpk = D / 8;
  static constexpr int kKpp = kThreads / kTpk;
  static constexpr int kU = 4;
  static constexpr int kStages = 3;
  static constexpr int kKeysPerIter = kKpp * kU;
  static constexpr int kStageBytes = kU * 2 * 16 * kThreads;
  static constexpr int kPipeBytes = kStages * kStageBytes;
  static constexpr int kMergeBytes = kKpp * GP * (D + 2) * 4;
  static constexpr int kSmemBytes = kPipeBytes > kMergeBytes ? kPipeBytes : kMergeBytes;
  // CTAs per SM the register allocation must allow (the launch bound's second argument; the
  // split planner counts on it, split_planner.hpp).
  static constexpr int kMinBlocks = decode_ctas_per_sm(GP);
};

}  // namespace kattn::cuda::detail
