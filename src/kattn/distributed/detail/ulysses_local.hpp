// The local attention of head sharding: kattn's forward and backward on the whole sequence of a
// rank's heads, with the options that make deterministic mode bitwise the same for every rank
// count, and the measurements. Internal.
#pragma once

#include <cstdint>

#include "kattn/backward.hpp"
#include "kattn/core/attention_params.hpp"
#include "kattn/detail/attention_impl.hpp"
#include "kattn/detail/backward_plan.hpp"
#include "kattn/distributed/detail/chunk_partials.hpp"
#include "kattn/distributed/detail/clock.hpp"
#include "kattn/distributed/options.hpp"
#include "kattn/distributed/detail/shard_math.hpp"
#include "kattn/ragged.hpp"

namespace kattn {
namespace dist {
namespace detail {

// The local call's options: the caller's without a progress callback (DistOptions::progress
// reports the call's). A row's arithmetic depends on its keys, the key tile and the split, never
// on how many heads share the call: deterministic mode fixes the key tile from the whole problem
// (all heads) and turns split-KV off (fixed-size split chunks stay), so every rank count computes
// the same bits.
template <class ExecSpace, class T>
Options local_options(const ExecSpace& space, int head_dim, std::int64_t global_query_rows, const Options& opt,
                      const DistOptions& d) {
  Options local = opt;
  local.progress = nullptr;
  if (!d.deterministic) return local;
  Options plan = opt;
  plan.block_q = 0;
  local.block_k = deterministic_block_k<ExecSpace, T>(space, head_dim, global_query_rows, plan);
  if (local.split_chunk == 0) local.splits = 1;
  return local;
}

// Deterministic mode: the dQ strategy and key-chunk count the whole problem gets (the planner
// counts the heads), so every rank count sums dQ alike. dK and dV are summed per key tile over
// the query rows of one KV head in a fixed order, the same whenever a rank holds whole GQA groups.
template <class ExecSpace, class T>
BackwardOptions local_backward_options(const ExecSpace& space, const AttentionParams<T>& whole, const Options& opt,
                                       const DistOptions& d, BackwardOptions bopt) {
  if (!d.deterministic) return bopt;
  bopt.deterministic = true;
  if (bopt.dq_chunks == 0) {
    const kattn::detail::BackwardPlan plan = kattn::detail::plan_backward<ExecSpace, T>(
        space, whole.batch, whole.heads_kv, whole.group_size(), whole.head_dim, whole.q_len, whole.kv_len,
        std::int64_t(whole.batch) * whole.q_len, opt, bopt);
    bopt.dq = plan.dq;
    bopt.dq_chunks = plan.chunks;
  }
  return bopt;
}

template <class ExecSpace, class T>
void local_forward(const ExecSpace& space, const AttentionParams<T>& a, const Options& opt, DistStats& stats) {
  const double t0 = now(), c0 = cpu_now();
  kattn::detail::attention_impl(space, a, opt, BatchLengths{});
  space.fence();
  stats.compute_seconds += now() - t0;
  stats.compute_cpu_seconds += cpu_now() - c0;
  const double pairs = double(KeyWindow::from(opt).visible_pairs(a.q_len, a.kv_len));
  stats.flops += 4.0 * a.head_dim * pairs * a.batch * a.heads_q;
}

template <class ExecSpace, class T>
void local_backward(const ExecSpace& space, const BackwardParams<T>& b, const Options& opt, const BackwardOptions& bopt,
                    DistStats& stats) {
  const double t0 = now(), c0 = cpu_now();
  kattn::detail::backward_impl(space, b, opt, bopt);
  space.fence();
  stats.compute_seconds += now() - t0;
  stats.compute_cpu_seconds += cpu_now() - c0;
  const AttentionParams<T>& a = b.fwd;
  const double pairs = double(KeyWindow::from(opt).visible_pairs(a.q_len, a.kv_len));
  stats.flops += 10.0 * a.head_dim * pairs * a.batch * a.heads_q;
}

}  // namespace detail
}  // namespace dist
}  // namespace kattn
