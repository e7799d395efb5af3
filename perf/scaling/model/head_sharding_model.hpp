// Performance model of head sharding (DeepSpeed-Ulysses) and of hybrid attention (Ulysses in
// groups of U ranks, a ring across the P / U groups), beside scaling_model.hpp's ring: the time
// and efficiency at P ranks and the bytes a rank sends. The all-to-alls are modelled as kattn runs
// them: one after the other, nothing computing behind them (the inner attention starts when the
// gathers are complete, the results travel when it is done), each over the links its messages
// take (a group of U consecutive ranks spans nodes when U > ranks per node). The inner attention
// is the ring model over the R = P / U groups with Hq / U heads per rank (R = 1: one local call
// over the whole sequence). Plain arithmetic, no MPI: `kattn-scale model --dist ulysses|hybrid`
// prints it, the tests compare with it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kattn/distributed/traffic.hpp"
#include "model/scaling_model.hpp"

namespace kattn {
namespace scaling {

struct HeadShardedModel {
  int ulysses_ranks = 1, ring_ranks = 1;  // U x R = P
  double tokens_per_rank = 0;
  double flops_per_rank = 0;    // useful forward work of a rank, the mean over ranks
  double exchange_seconds = 0;  // the all-to-alls and their copies: never hidden
  bool exchange_crosses_nodes = false;
  RingModel ring;                   // the attention inside: a ring over the R groups, or R = 1 the local call
  double seconds = 0;               // exchanges + the inner attention
  double exposed_comm_seconds = 0;  // the exchanges and the inner ring's exposed transfers
  double ideal_seconds = 0;         // the rank's work at the baseline's kernel rate
  double efficiency = 1;            // ideal / seconds
  double bytes_per_rank = 0;        // sent by one rank: the exchanges and the inner ring's
};

namespace parts {

// One exchange phase: every member sends its messages at once, intra-node ones over the node's
// link and inter-node ones over the NIC, side by side; the phase ends with the slowest member.
// Around the transfer a member copies (a read and a write) its own part in place and, in a
// gather, what it sends into the send buffer, in a scatter what it received out of the receive
// buffer: each value of the member's local arrays once, also on one rank.
inline double exchange_phase_seconds(const std::vector<dist::HeadExchangePhase>& by_member, const Cluster& cl) {
  const int U = static_cast<int>(by_member.size());
  double slowest = 0;
  for (int m = 0; m < U; ++m) {
    double intra = 0, inter = 0, received = 0;
    for (int r = 0; r < U; ++r) {
      if (r == m) continue;
      const bool same_node = cl.ranks_per_node <= 0 || m / cl.ranks_per_node == r / cl.ranks_per_node;
      (same_node ? intra : inter) += by_member[m].to[r];
      received += by_member[r].to[m];
    }
    double t = std::max(intra > 0 ? cl.intra.seconds(intra) : 0.0, inter > 0 ? cl.inter.seconds(inter) : 0.0);
    const double copied = by_member[m].own() + (by_member[m].gather ? intra + inter : received);
    if (cl.memory_bytes_per_second > 0) t += 2.0 * copied / cl.memory_bytes_per_second;
    slowest = std::max(slowest, t);
  }
  return slowest;
}

// All the exchange phases of one call (forward or backward) over a group of U members holding
// n positions each.
inline double exchange_seconds(const dist::TrafficProblem& pr, int U, double n, dist::Pass pass, const Cluster& cl,
                               double* bytes_member0) {
  const std::vector<double> lengths(U, n);
  std::vector<std::vector<dist::HeadExchangePhase>> by_member;  // [member][phase]
  for (int m = 0; m < U; ++m) by_member.push_back(dist::head_exchange_phases(pr, lengths, lengths, m, pass));
  double t = 0;
  for (std::size_t ph = 0; ph < by_member[0].size(); ++ph) {
    std::vector<dist::HeadExchangePhase> phase;
    for (int m = 0; m < U; ++m) phase.push_back(by_member[m][ph]);
    t += exchange_phase_seconds(phase, cl);
    *bytes_member0 += phase[0].sent();
  }
  return t;
}

}  // namespace parts

// Hybrid attention on in.ranks = U x R ranks (ulysses_ranks = U; U = P: Ulysses alone, U = 1: the
// ring alone). in.heads_q must be a multiple of U (the caller checks, as the library does). Nodes
// hold in.cluster.ranks_per_node consecutive ranks; U divides that or is a multiple of it (the
// caller checks): group 0 then stands for every group, and a node holds ranks_per_node / U
// members of each ring.
// Forward, or forward + backward when in.backward_ratio > 0 (each call with its own exchanges;
// the backward's inner ring moves K/V and dK/dV in the accumulation type, as it computes in it).
inline HeadShardedModel model_head_sharded(const RingModelInput& in, int ulysses_ranks) {
  HeadShardedModel m;
  const int P = in.ranks, U = ulysses_ranks, R = P / U;
  const double N = double(in.tokens), n = N / P;
  const Cluster& cl = in.cluster;
  m.ulysses_ranks = U, m.ring_ranks = R;
  m.tokens_per_rank = n;
  const int acc_bytes = std::max(4, in.bytes_per_value);
  dist::TrafficProblem pr;
  pr.batch = in.batch, pr.heads_q = in.heads_q, pr.heads_kv = in.heads_kv, pr.head_dim = in.head_dim;
  pr.bytes_per_value = in.bytes_per_value, pr.lse = true;
  m.exchange_crosses_nodes = cl.ranks_per_node > 0 && U > cl.ranks_per_node;
  // (One member still copies its arrays into and out of the whole-sequence buffers.)
  m.exchange_seconds = parts::exchange_seconds(pr, U, n, dist::Pass::forward, cl, &m.bytes_per_rank);
  if (in.backward_ratio > 0)
    m.exchange_seconds += parts::exchange_seconds(pr, U, n, dist::Pass::backward, cl, &m.bytes_per_rank);
  // The inner ring: member u of every group, Hq / U query heads and the KV heads they use (the
  // most any member holds), the whole sequence over R ranks; R ranks of one member index share a
  // node when the node holds R groups.
  RingModelInput ring = in;
  ring.ranks = R;
  ring.heads_q = in.heads_q / U;
  int kv = 0;
  for (int u = 0; u < U; ++u) kv = std::max(kv, dist::head_share(in.heads_q, in.heads_kv, U, u).heads_kv);
  ring.heads_kv = kv;
  ring.cluster.ranks_per_node = cl.ranks_per_node > 0 ? std::max(1, cl.ranks_per_node / U) : 0;
  ring.backward_ratio = 0;
  m.ring = model_ring(ring);
  if (in.backward_ratio > 0) {
    // The backward's ring alone: the whole ring in the accumulation type less its forward.
    RingModelInput wide = ring;
    wide.bytes_per_value = acc_bytes, wide.grad_bytes_per_value = acc_bytes;
    const RingModel forward_wide = model_ring(wide);
    wide.backward_ratio = in.backward_ratio;
    const RingModel both = model_ring(wide);
    m.ring.seconds += both.seconds - forward_wide.seconds;
    m.ring.exposed_comm_seconds += both.exposed_comm_seconds - forward_wide.exposed_comm_seconds;
    m.ring.compute_seconds += both.compute_seconds - forward_wide.compute_seconds;
    m.ring.bytes_per_rank += both.bytes_per_rank - forward_wide.bytes_per_rank;
  }
  m.bytes_per_rank += m.ring.bytes_per_rank;
  m.seconds = m.exchange_seconds + m.ring.seconds;
  m.exposed_comm_seconds = m.exchange_seconds + m.ring.exposed_comm_seconds;
  m.flops_per_rank = m.ring.flops_per_rank;  // Hq / U heads over N / R positions: the same work as the ring's
  m.ideal_seconds = parts::ideal_seconds(in, m.flops_per_rank, n);
  m.efficiency = m.seconds > 0 ? m.ideal_seconds / m.seconds : 1.0;
  return m;
}

}  // namespace scaling
}  // namespace kattn
