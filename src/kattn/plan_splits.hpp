// The split of a problem on an execution space (Flash-Decoding's key chunks): the work it hands
// the planner (core/split_planner.hpp) and the plan kattn::attention runs with, from
// Options::splits / split_chunk or planned for the space's processors. Split-KV is exact and
// deterministic: the partial states of the chunks are merged in chunk order with the one merge
// of the state algebra, so the result never depends on the schedule.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <type_traits>
#include "kattn/core/attention_params.hpp"
#include "kattn/core/split_planner.hpp"
#include "kattn/detail/shapes.hpp"
#include "kattn/detail/tile_sizes.hpp"
#include "kattn/options.hpp"
#include "kattn/paged.hpp"
#include "kattn/processors.hpp"
#include "kattn/ragged.hpp"

namespace kattn {

// The work a problem hands the planner: its sequences' keys and query-row tiles with the tile
// sizes the kernels will use on `space`, the row tiles' heads packed for `procs` processors.
// (T: the accumulation type the kernels tile in; Q, KV the storage.)
template <class ExecSpace, class Q, class T, class KV>
SplitWork split_work(const ExecSpace& space, const AttentionParams<Q, T, KV>& p, const Options& opt,
                     const BatchLengths& lengths, int procs) {
  const int G = p.group_size();
  const int block_q = query_tile_rows<ExecSpace, T>(space, p.head_dim, p.q_len * G, opt);
  const bool row_tiles = row_tile_rows<ExecSpace, T>(p.q_len * G, opt) > 0;
  const auto tiles = [&](std::int64_t q_len) { return (q_len * G + block_q - 1) / block_q; };
  const int groups = row_tiles ? p.heads_kv / row_tile_team_heads<ExecSpace, T>(
                                                  p.heads_kv, block_q, p.head_dim,
                                                  fixed_split_units(p.batch, tiles(p.q_len), p.kv_len, opt), procs)
                               : p.heads_kv;
  if (lengths.kv_len.empty()) return SplitWork::dense(p.batch, groups, p.kv_len, tiles(p.q_len));
  SplitWork w;
  w.head_groups = groups;
  w.kv_len = lengths.kv_len;
  w.row_tiles.resize(lengths.q_len.size());
  for (std::size_t b = 0; b < lengths.q_len.size(); ++b) w.row_tiles[b] = tiles(lengths.q_len[b]);
  return w;
}

// The split of a problem: from opt.split_chunk (fixed keys per split) or opt.splits when set,
// else planned for `procs` processors (0: those of `space`).
template <class ExecSpace, class Q, class T, class KV>
SplitPlan plan_splits(const ExecSpace& space, const AttentionParams<Q, T, KV>& p, const Options& opt,
                      const BatchLengths& lengths = {}, int procs = 0) {
  const int P = procs > 0 ? procs : processors(space);
  const SplitWork work = split_work(space, p, opt, lengths, P);
  std::int64_t max_kv = 0;
  for (std::int64_t n : work.kv_len) max_kv = n > max_kv ? n : max_kv;
  SplitPlan plan;
  plan.processors = P;
  plan.units_unsplit = split_units(work, 0);
  if (opt.split_chunk > 0) {
    plan.chunk = opt.split_chunk;
    plan.splits = static_cast<int>(max_kv > opt.split_chunk ? (max_kv + opt.split_chunk - 1) / opt.split_chunk : 1);
    KATTN_REQUIRE((max_kv + opt.split_chunk - 1) / opt.split_chunk <= INT32_MAX, "split_chunk: ", opt.split_chunk,
                  " keys per split cut ", max_kv, " keys into more than 2^31 - 1 splits");
    plan.units = split_units(work, plan.chunk);
    plan.reason = "fixed chunks of " + std::to_string(opt.split_chunk) + " keys (split_chunk)";
  } else if (opt.splits > 0) {
    plan.splits = opt.splits;
    plan.units = plan.units_unsplit * opt.splits;
    plan.reason = std::to_string(opt.splits) + " splits (given)";
  } else {
    plan = plan_splits(work, P);
  }
  return plan;
}

// The split of a dense problem of the given shape, in scalar type T (float by default): what
// kattn::attention would do on `space` with these options (procs > 0: planned for that many processors).
template <class T = float, class ExecSpace>
SplitPlan plan_splits(const ExecSpace& space, std::int64_t batch, std::int64_t q_len, std::int64_t kv_len, int heads_q,
                      int heads_kv, int head_dim, const Options& opt = {}, int procs = 0) {
  KATTN_REQUIRE(batch >= 0 && batch <= INT32_MAX, "batch: expected 0 .. 2^31 - 1 sequences, got ", batch);
  KATTN_REQUIRE(q_len >= 0 && kv_len >= 0, "q_len, kv_len: expected lengths >= 0, got ", q_len, ", ", kv_len);
  KATTN_REQUIRE(heads_q >= 1 && head_dim >= 1, "heads_q, head_dim: expected at least 1");
  detail::check_gqa(heads_q, heads_kv);
  validate(opt);
  AttentionParams<T> p;
  p.batch = static_cast<int>(batch);
  p.q_len = q_len;
  p.kv_len = kv_len;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.head_dim = head_dim;
  return plan_splits(space, p, opt, BatchLengths{}, procs);
}

}  // namespace kattn
