// The bytes one rank sends in ulysses_attention and hybrid_attention (and their backwards): its
// group's head exchanges (head_traffic.hpp) over the positions the call's layout gives each
// member and, in hybrid attention, the inner ring's (ring_traffic.hpp) for the KV heads the rank
// holds. Host arithmetic, no communication: `kattn scale` and the tests use it.
#pragma once

#include <cstdint>
#include <vector>

#include "kattn/dist/dist_options.hpp"
#include "kattn/dist/head_split.hpp"
#include "kattn/dist/head_traffic.hpp"
#include "kattn/dist/hybrid_grid.hpp"
#include "kattn/dist/layout.hpp"
#include "kattn/dist/ring_traffic.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace dist {

// hybrid == false: ulysses_attention (one group of every rank, d.ulysses_size unused).
inline std::int64_t head_sharded_sent(const HeadTrafficProblem& pr, std::int64_t Nq, std::int64_t Nk,
                                      const Options& opt, const DistOptions& d, int ranks, int rank, HeadPass pass,
                                      bool hybrid) {
  const int U = hybrid ? detail::ulysses_ranks(ranks, d) : ranks, R = ranks / U;
  const int group = rank / U, member = rank % U;
  const SequenceLayout ql = hybrid ? hybrid_layout(Nq, ranks, d) : sharded_layout(Nq, ranks, d),
                       kl = hybrid ? hybrid_layout(Nk, ranks, d) : sharded_layout(Nk, ranks, d);
  std::vector<double> nq, nk;
  for (int u = 0; u < U; ++u)
    nq.push_back(double(ql.local_length(group * U + u))), nk.push_back(double(kl.local_length(group * U + u)));
  double sent = U > 1 ? head_exchange_sent(pr, nq, nk, member, pass) : 0.0;
  if (R > 1) {
    // The backward's inner ring computes, and so sends K/V and dK/dV, in the accumulation type.
    const int bytes = pass == HeadPass::backward ? pr.accumulate_bytes : pr.bytes_per_value;
    const TrafficProblem ring{
        Nq, Nk, pr.batch, detail::head_split(pr.heads_q, pr.heads_kv, U, member).kv.count, pr.head_dim, bytes, bytes};
    sent += double(
        ring_traffic(ring, opt, d, R, group, pass == HeadPass::backward ? RingPass::backward : RingPass::forward).sent);
  }
  return static_cast<std::int64_t>(sent);
}

}  // namespace dist
}  // namespace kattn
