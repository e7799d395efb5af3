// Options shared by every attention entry point: the variant (mask, softcap, scale) and the
// tiling/splitting knobs.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "kattn/core/score_bias.hpp"
#include "kattn/cpu_products.hpp"
#include "kattn/errors.hpp"

namespace kattn {

class BlockMask;  // block_mask.hpp
class Workspace;  // workspace.hpp

struct Options {
  // Causal mask, aligned to the bottom right when the key count Nk exceeds the query count Nq:
  // query i sees key j iff j <= i + Nk - Nq.
  bool causal = false;
  // Sliding window: query i sees keys i + Nk - Nq - window_left <= j <= i + Nk - Nq + window_right;
  // -1 leaves that side unbounded. Combines with causal (which caps the right side at 0).
  std::int64_t window_left = -1;
  std::int64_t window_right = -1;
  // Moves the diagonal of causal/window masks right by this many keys: for a shard of a longer
  // sequence (ring attention), see KeyWindow in core/key_window.hpp. 0 for whole sequences.
  std::int64_t diagonal_shift = 0;
  // Logits soft-capping: each scaled score s becomes softcap * tanh(s / softcap); 0 turns it off.
  double softcap = 0.0;
  // Attention sinks (GPT-OSS, StreamingLLM): one logit per query head that takes part in each
  // row's softmax and carries no value, so a row's weights sum to less than 1 and lse includes it.
  // Natural-log units, compared with the scaled (and soft-capped) scores; -inf gives a head none.
  // Empty: no sinks; otherwise one per query head. A row that sees no key gets o = 0, lse = sink.
  // The backward returns their gradient (BackwardInfo::dsinks).
  std::vector<double> sinks;
  // ALiBi (FlashAttention's alibi_slopes): the score of query i and key j of head h gains
  // -alibi_slopes[h] * |i + Nk - Nq - j| (natural-log units, after softcap, before the mask; the
  // diagonal moves with diagonal_shift). Empty: none; otherwise one finite slope per query head.
  std::vector<double> alibi_slopes;
  // An additive bias of the scores [B or 1, Hq or 1, Nq, Nk] (core/score_bias.hpp; made from a
  // view by kattn::score_bias, score_bias.hpp): PyTorch SDPA's attn_mask, relative position
  // biases. Added after softcap and ALiBi, before the mask; a boolean bias is 0 where true and
  // -inf where false. Not owned: it must outlive the call. Dense keys and values; no gradient.
  ScoreBias bias;
  // Score scale; 0 means 1 / sqrt(head_dim).
  double scale = 0.0;
  // Query-row and key tile sizes; 0 lets kattn choose from the execution space's scratch limit
  // and the head dim. Query rows are (position, head of the GQA group) pairs.
  int block_q = 0;
  int block_k = 0;
  // Split-KV: number of key chunks per sequence whose partial states are merged; 0 = planned
  // for the execution space; 1 runs the tiled forward without a merge.
  int splits = 0;
  // Split-KV with fixed-size chunks: keys per split (every sequence is cut at the same key
  // positions whatever the batch and the machine, as a deterministic reduction needs); overrides
  // `splits` when > 0.
  std::int64_t split_chunk = 0;
  // Block-sparse mask (block_mask.hpp), or none: query i of head h also needs block
  // (i / B, j / B) listed to see key j. Not owned: it must outlive the call. Dense KV only.
  const BlockMask* block_mask = nullptr;
  // Progress of a long call: when set, the forward runs the query positions in a few pieces in
  // order (the backward: its key pass in pieces of key tiles, its query pass in pieces of query
  // tiles, with the same results bit for bit) and calls this on the host after each with the
  // fraction of the work done (0 < f <= 1, increasing, 1 once at the end). Returning false stops
  // the call with a kattn::Error once the piece in flight is done (the outputs not reached are
  // left as they were); an exception it throws propagates likewise. Unset: one launch. Dense
  // inputs; ragged and paged batches report 1 once, at the end.
  std::function<bool(double fraction)> progress;
  // Where the call takes its scratch buffers (workspace.hpp): calls repeated with one workspace
  // take them from it after the first, instead of allocating and freeing them each time (the
  // split partials, the backward's row sums and dQ partials, 16-bit calls' float copies, the
  // distributed calls' message buffers). Not owned; one call at a time uses it. nullptr: each
  // call allocates its own. The results are the same either way, bit for bit.
  Workspace* workspace = nullptr;
  // How bf16 storage is multiplied on a CPU (cpu_products.hpp): automatic takes the CPU's bf16 dot
  // products where it has them (P rounded to bf16 for P V, as on GPUs), widened the exact float
  // path. Other storage types and GPUs ignore it.
  CpuProducts cpu_products = CpuProducts::automatic;
};

// The sink of query head h (Options::sinks), -inf when the call has none: what the references add
// to a row's softmax.
inline double sink_of(const Options& opt, int h) {
  return opt.sinks.empty() ? -std::numeric_limits<double>::infinity() : opt.sinks[static_cast<std::size_t>(h)];
}

// Refuses options no call takes (every entry point calls it first), naming the field.
inline void validate(const Options& opt) {
  KATTN_REQUIRE(opt.window_left >= -1, "window: expected a left bound >= 0 or -1 (unbounded), got ",
                opt.window_left);
  KATTN_REQUIRE(opt.window_right >= -1, "window: expected a right bound >= 0 or -1 (unbounded), got ",
                opt.window_right);
  KATTN_REQUIRE(std::isfinite(opt.softcap) && opt.softcap >= 0.0,
                "softcap: expected a finite value >= 0 (0 = off), got ", opt.softcap);
  for (const double slope : opt.alibi_slopes)
    KATTN_REQUIRE(std::isfinite(slope), "alibi_slopes: expected finite slopes, got ", slope);
  KATTN_REQUIRE(std::isfinite(opt.scale), "scale: expected a finite value (0 = 1/sqrt(head dim)), got ", opt.scale);
  KATTN_REQUIRE(opt.block_q >= 0, "block_q: expected a tile size >= 1 or 0 (automatic), got ", opt.block_q);
  KATTN_REQUIRE(opt.block_k >= 0, "block_k: expected a tile size >= 1 or 0 (automatic), got ", opt.block_k);
  KATTN_REQUIRE(opt.splits >= 0, "splits: expected a split count >= 1 or 0 (planned), got ", opt.splits);
  KATTN_REQUIRE(opt.split_chunk >= 0, "split_chunk: expected keys per split >= 1 or 0 (from splits), got ",
                opt.split_chunk);
}

}  // namespace kattn
