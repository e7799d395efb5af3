// What ring attention moves between ranks: the bytes one rank sends and receives, from the shapes,
// the sharding and the mask. Under a window or a causal mask a rank receives from each other rank
// only the keys some query of its own sees (shard_math.hpp's needed_keys, widened to whole chunks
// in deterministic mode), so this is both the traffic model and the schedule's own arithmetic.
// Host only, no MPI: `kattn scale` and the tests use it.
#pragma once

#include <cstdint>

#include "kattn/dist/dist_options.hpp"
#include "kattn/dist/layout.hpp"
#include "kattn/dist/shard_math.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace dist {

// The global problem, as every rank sees it.
struct TrafficProblem {
  std::int64_t Nq = 0, Nk = 0;  // global query and key lengths
  int batch = 1, heads_kv = 1, head_dim = 64;
  int bytes_per_value = 4;       // K and V as they travel
  int grad_bytes_per_value = 0;  // dK and dV as they travel (the backward); 0: bytes_per_value
};

struct RingTraffic {
  std::int64_t sent = 0, received = 0;  // bytes of one rank
};

enum class RingPass { forward, backward };

// Bytes of K and V (forward), and of K and V out plus dK and dV back (backward), that `rank` of
// `ranks` sends and receives in ring_attention / ring_attention_backward.
inline RingTraffic ring_traffic(const TrafficProblem& pr, const Options& opt, const DistOptions& d, int ranks,
                                int rank, RingPass pass) {
  const std::int64_t align = shard_align(d);
  const SequenceLayout ql = sharded_layout(pr.Nq, ranks, d), kl = sharded_layout(pr.Nk, ranks, d);
  const std::int64_t values = 2 * std::int64_t(pr.batch) * pr.heads_kv * pr.head_dim;
  const std::int64_t per_key = values * pr.bytes_per_value,
                     per_grad = values * (pr.grad_bytes_per_value > 0 ? pr.grad_bytes_per_value : pr.bytes_per_value);
  RingTraffic t;
  if (!d.communicate && pass == RingPass::forward) return t;  // the backward has no such mode
  if (pass == RingPass::backward && d.deterministic) {
    // The tour (ring_backward.cpp): each package of chunks travels with its dK/dV accumulator
    // through the ranks of the query segments that see it, in descending order, and home.
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
    t.sent += out * per_key + (pass == RingPass::backward ? in * per_grad : 0);
    t.received += in * per_key + (pass == RingPass::backward ? out * per_grad : 0);
  }
  return t;
}

}  // namespace dist
}  // namespace kattn
