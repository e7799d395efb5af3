// kattn::cuda — split-KV paged decode (Flash-Decoding) and the partial-state merge.
//
// decode(): for each sequence b and query head h, attention of the single query
// q[b, h] over the sequence's keys in the paged cache. The keys are cut into
// num_splits chunks (planned by split_planner.hpp when p.num_splits == 0); each
// (sequence, KV head, split) block packs the whole GQA group of query heads of its KV
// head so that K/V are read once per group. With more than one split the per-split
// states go to p.workspace and merge_states() combines them; with one split the decode
// kernel writes o and lse itself. Supported: bf16/fp16, head_dim 64/128/256, any page
// size >= 1, any Hq % Hkv == 0, empty sequences (o = 0, lse = -inf).
#pragma once

#include <kattn/cuda/params.hpp>

#include <cstddef>

namespace kattn::cuda {

// nullptr when supported, else a reason naming the argument.
const char* decode_check(const DecodeParams& p);

// Number of splits decode() will use for p (p.num_splits, or the plan).
int decode_num_splits(const DecodeParams& p);

// Bytes of workspace decode() needs for p with `num_splits` splits (0 when 1 split).
size_t decode_workspace_bytes(const DecodeParams& p, int num_splits);

// Sets the kernels' dynamic shared-memory limits for p's configuration once, so that a
// later decode() launch (for example inside CUDA graph capture) does no attribute call.
cudaError_t decode_prepare(const DecodeParams& p);

cudaError_t decode(const DecodeParams& p, cudaStream_t stream);

// Combines per-split normalised partial outputs and their LSEs (see MergeParams).
const char* merge_check(const MergeParams& p);
cudaError_t merge_states(const MergeParams& p, cudaStream_t stream);

}  // namespace kattn::cuda
