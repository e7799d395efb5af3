#include "kattn/distributed/traffic.hpp"

#include "kattn/distributed/detail/grid_plan.hpp"
#include "kattn/distributed/detail/head_split.hpp"
#include "kattn/distributed/detail/shard_math.hpp"
#include "kattn/distributed/layout.hpp"

namespace kattn {
namespace dist {
namespace {

// The ring's K and V (forward), and K and V out plus dK and dV back (backward), with K/V in
// `kv_bytes` a value and dK/dV in `grad_bytes`.
Traffic ring_traffic(const TrafficProblem& pr, int heads_kv, int kv_bytes, int grad_bytes, const Options& opt,
                     const DistOptions& d, int ranks, int rank, Pass pass) {
  const std::int64_t align = shard_align(d);
  const SequenceLayout ql = sharded_layout(pr.Nq, ranks, d), kl = sharded_layout(pr.Nk, ranks, d);
  const std::int64_t values = 2 * std::int64_t(pr.batch) * heads_kv * pr.head_dim;
  const std::int64_t per_key = values * kv_bytes, per_grad = values * grad_bytes;
  Traffic t;
  if (!d.communicate && pass == Pass::forward) return t;  // the backward has no such mode
  if (pass == Pass::backward && d.deterministic) {
    // The tour (detail/ring_backward.cpp): each package of chunks travels with its dK/dV
    // accumulator through the ranks of the query segments that see it, in descending order, and home.
    for (const Segment& ks : kl.segments())
      for (const detail::TourPlan& tp : detail::tour_plans(opt, ql, kl, ks, align)) {
        const std::int64_t kv = tp.piece.length * per_key, grad = tp.piece.length * per_grad;
        int at = ks.owner;
        bool grads = false;  // K/V alone on the first hop, K/V and dK/dV after
        for (int stop : tp.stops) {
          const int owner = ql.segments()[stop].owner;
          if (owner != at) {
            if (at == rank) t.sent += grads ? kv + grad : kv;
            if (owner == rank) t.received += grads ? kv + grad : kv;
          }
          at = owner;
          grads = true;
        }
        if (at != ks.owner) {
          if (at == rank) t.sent += grad;
          if (ks.owner == rank) t.received += grad;
        }
      }
    return t;
  }
  // The backward's gradients go back the way their keys came.
  for (int r = 0; r < ranks; ++r) {
    if (r == rank) continue;
    const std::int64_t out = detail::total_length(detail::needed_keys(opt, ql, kl, r, rank, align));
    const std::int64_t in = detail::total_length(detail::needed_keys(opt, ql, kl, rank, r, align));
    t.sent += out * per_key + (pass == Pass::backward ? in * per_grad : 0);
    t.received += in * per_key + (pass == Pass::backward ? out * per_grad : 0);
  }
  return t;
}

// ulysses (one group of every rank) and hybrid: the group's head exchanges over the positions the
// layout gives each member, and in hybrid the inner ring's for the KV heads the rank holds.
Traffic head_sharded_traffic(const TrafficProblem& pr, const Options& opt, const DistOptions& d, int ranks, int rank,
                             Pass pass) {
  const bool hybrid = d.scheme == Scheme::hybrid;
  const int U = hybrid ? ulysses_ranks(ranks, d) : ranks, R = ranks / U;
  const int group = rank / U, member = rank % U;
  const SequenceLayout ql = layout_of(pr.Nq, ranks, d), kl = layout_of(pr.Nk, ranks, d);
  std::vector<double> nq, nk;
  for (int u = 0; u < U; ++u)
    nq.push_back(double(ql.local_length(group * U + u))), nk.push_back(double(kl.local_length(group * U + u)));
  Traffic t;
  if (U > 1) {
    std::vector<std::vector<HeadExchangePhase>> by_member;
    for (int u = 0; u < U; ++u) by_member.push_back(head_exchange_phases(pr, nq, nk, u, pass));
    double sent = 0, received = 0;
    for (std::size_t ph = 0; ph < by_member[member].size(); ++ph) {
      sent += by_member[member][ph].sent();
      for (int u = 0; u < U; ++u)
        if (u != member) received += by_member[u][ph].to[member];
    }
    t.sent += static_cast<std::int64_t>(sent), t.received += static_cast<std::int64_t>(received);
  }
  if (R > 1) {
    // The backward's inner ring computes, and so sends K/V and dK/dV, in the accumulation type.
    const int acc = accumulate_bytes(pr.bytes_per_value);
    const int bytes = pass == Pass::backward ? acc : pr.bytes_per_value;
    const Traffic ring = ring_traffic(pr, head_share(pr.heads_q, pr.heads_kv, U, member).heads_kv, bytes, bytes, opt,
                                      d, R, group, pass);
    t.sent += ring.sent, t.received += ring.received;
  }
  return t;
}

// sharded_kv: the finished rows [lse, o] reduced (each contributing rank's once), or in
// deterministic mode the accumulator rows [m, l, o] passed along the chain 0 -> 1 -> ... -> P-1
// and from the last rank to every rank (a broadcast) or to the root.
Traffic sharded_kv_traffic(const TrafficProblem& pr, const DistOptions& d, int ranks, int rank) {
  Traffic t;
  if (ranks == 1) return t;
  const std::int64_t rows = std::int64_t(pr.batch) * pr.Nq * pr.heads_q, acc = accumulate_bytes(pr.bytes_per_value);
  if (!d.deterministic) {
    if (d.root < 0 || rank != d.root) t.sent = rows * (pr.head_dim + 1) * acc;
    return t;
  }
  const std::int64_t row_bytes = rows * (pr.head_dim + 2) * acc;
  const int last = ranks - 1;
  if (rank < last) t.sent += row_bytes;
  if (rank > 0) t.received += row_bytes;
  if (d.root < 0) {
    if (rank == last) t.sent += row_bytes;
    else t.received += row_bytes;
  } else if (d.root != last) {
    if (rank == last) t.sent += row_bytes;
    if (rank == d.root) t.received += row_bytes;
  }
  return t;
}

// grid (detail/grid_plan.hpp): rank (g, c) sends its query shard to every rank (g', c) that computes
// it, its keys to every rank (g, c') whose column sees them, and each block it computes for another
// rank back to it. Forward: the block's finished rows for (g', c) (D + 1 values a row and query
// head), or in deterministic mode its chunk partials (the same per row and chunk it sees). Backward:
// the query shard travels with its o, dout and lse (3 D + 1 values a row and head); dQ goes back to
// (g', c) and dK/dV to (g, c'), summed where computed, or in deterministic mode per chunk block (the
// ring tour's blocks). Everything but K/V travels in the accumulation type (16-bit queries and
// gradients are widened first), K/V as stored.
Traffic grid_traffic(const TrafficProblem& pr, const Options& opt, const DistOptions& d, int ranks, int rank,
                     Pass pass) {
  const detail::GridPlan plan(opt, pr.Nq, pr.Nk, ranks, d);
  const bool backward = pass == Pass::backward, det = d.deterministic;
  const std::int64_t B = pr.batch, H = pr.heads_q, D = pr.head_dim, ab = accumulate_bytes(pr.bytes_per_value);
  const std::int64_t per_key = 2 * B * pr.heads_kv * D * pr.bytes_per_value, per_q = B * H * D * ab,
                     per_grad = 2 * B * pr.heads_kv * D * ab;
  // A query shard's row as it travels: q, and in the backward o, dout and lse with it.
  const std::int64_t per_row = backward ? B * H * (3 * D + 1) * ab : per_q;
  const int g = plan.row_of(rank), c = plan.col_of(rank);
  const auto q_len = [&](int r) { return plan.q_layout().local_length(r); };
  // What `from` computes for query shard qrank and sends its owner: forward rows or backward dQ.
  const auto result = [&](int from, int qrank) -> std::int64_t {
    if (!backward) return (det ? plan.stream_rows(plan.row_of(from), qrank) : q_len(qrank)) * B * H * (D + 1) * ab;
    if (!det) return q_len(qrank) * per_q;
    std::int64_t rows = 0;
    for (int k = 0; k < plan.cols(); ++k)
      for (const detail::GridBlock& b : plan.blocks(qrank, plan.at(plan.row_of(from), k))) rows += b.nq;
    return rows * per_q;
  };
  // The dK/dV `from` sends key shard `owner` (of its row) in the backward.
  const auto grads = [&](int from, int owner) -> std::int64_t {
    if (!det) return detail::total_length(plan.pieces(owner, plan.col_of(from))) * per_grad;
    std::int64_t keys = 0;
    for (int r = 0; r < plan.rows(); ++r)
      for (const detail::GridBlock& b : plan.blocks(plan.at(r, plan.col_of(from)), owner)) keys += b.nk;
    return keys * per_grad;
  };
  Traffic t;
  for (int r = 0; r < plan.rows(); ++r) {
    if (r == g) continue;
    const int other = plan.at(r, c);
    if (plan.sees(rank, r)) t.sent += q_len(rank) * per_row, t.received += result(other, rank);
    if (plan.sees(other, g)) t.received += q_len(other) * per_row, t.sent += result(rank, other);
  }
  for (int k = 0; k < plan.cols(); ++k) {
    if (k == c) continue;
    const int other = plan.at(g, k);
    t.sent += detail::total_length(plan.pieces(rank, k)) * per_key;
    t.received += detail::total_length(plan.pieces(other, c)) * per_key;
    if (backward) t.sent += grads(rank, other), t.received += grads(other, rank);
  }
  return t;
}

}  // namespace

Traffic traffic(const TrafficProblem& pr, const Options& opt, const DistOptions& d, int ranks, int rank, Pass pass) {
  switch (d.scheme) {
    case Scheme::ring:
      // K/V travel as stored; the backward's dK/dV accumulate and travel in the accumulation type.
      return ring_traffic(pr, pr.heads_kv, pr.bytes_per_value, accumulate_bytes(pr.bytes_per_value), opt, d, ranks,
                          rank, pass);
    case Scheme::sharded_kv:
      return sharded_kv_traffic(pr, d, ranks, rank);
    case Scheme::grid:
      return grid_traffic(pr, opt, d, ranks, rank, pass);
    default:
      return head_sharded_traffic(pr, opt, d, ranks, rank, pass);
  }
}

}  // namespace dist
}  // namespace kattn
