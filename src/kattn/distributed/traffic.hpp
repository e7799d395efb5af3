// What a distributed call moves between ranks: the bytes one rank sends (DistStats::bytes_sent) and
// receives, from the shapes, the scheme, the sharding and the mask. Under a window or a causal mask
// a ring rank receives from each other rank only the keys some query of its own sees (widened to
// whole chunks in deterministic mode); head sharding's all-to-alls move every head a rank does
// not compute. The schedules' own arithmetic, on the host, with no communication: for scaling
// studies and tests.
#pragma once

#include <cstdint>
#include <vector>

#include "kattn/distributed/detail/head_split.hpp"
#include "kattn/distributed/options.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace dist {

// The global problem, as every rank sees it.
struct TrafficProblem {
  std::int64_t Nq = 0, Nk = 0;  // global query and key lengths (sharded_kv: the queries every rank holds)
  int batch = 1, heads_q = 1, heads_kv = 1, head_dim = 64;
  // The arrays as stored: 4 (float), 8 (double) or 2 (bf16, fp16). What a scheme moves in the
  // accumulation type (lse, partial rows, the ring backward's dK and dV, a 16-bit KV head's summed
  // parts) travels in 4 or 8 bytes.
  int bytes_per_value = 4;
  bool lse = true;  // the forward returns lse (head sharding moves it back)
};

enum class Pass { forward, backward };

// Bytes of one rank: what it hands to MPI's sends (a broadcast counts at its root, a reduction at
// every rank that contributes) and what reaches it in those messages (a reduction's: not counted).
struct Traffic {
  std::int64_t sent = 0, received = 0;
};

// The traffic of `rank` of `ranks` in dist::attention (Pass::forward) or dist::attention_backward
// (Pass::backward) with these options, as the call counts it in DistStats::bytes_sent.
Traffic traffic(const TrafficProblem& pr, const Options& opt, const DistOptions& d, int ranks, int rank, Pass pass);

// The accumulation type's bytes for values stored in `bytes_per_value` (8 for double, else 4).
inline int accumulate_bytes(int bytes_per_value) { return bytes_per_value == 8 ? 8 : 4; }

// Head sharding in detail, for models that time its all-to-alls: one all-to-all of a call, from
// one member of a group, the bytes of its part for each member, its own (to[self]) copied in place
// rather than sent. The exchanges of a call run one after the other (the forward's gathers of q,
// k, v together, then o, then lse; the backward's six gathers together, then dq, dk, dv), so each
// is a phase. A gather packs what the member sends (its positions of every member's heads); a
// scatter unpacks what it receives.
struct HeadExchangePhase {
  std::vector<double> to;
  int self = 0;
  bool gather = true;
  double sent() const {
    double s = 0;
    for (std::size_t r = 0; r < to.size(); ++r)
      if (int(r) != self) s += to[r];
    return s;
  }
  double own() const { return to[self]; }
};

// The query heads and the KV heads they use that `member` of a group of `members` computes (GQA:
// a KV head whose query heads fall on two members goes to both).
struct HeadShare {
  int heads_q = 0, heads_kv = 0;
};

inline HeadShare head_share(int heads_q, int heads_kv, int members, int member) {
  const detail::HeadSplit s = detail::head_split(heads_q, heads_kv, members, member);
  return {s.q.count, s.kv.count};
}

// The phases of one call for `member` of a group of nq.size() members, which hold nq[r] query and
// nk[r] key positions (lengths as doubles: a model may pass N / P).
inline std::vector<HeadExchangePhase> head_exchange_phases(const TrafficProblem& pr, const std::vector<double>& nq,
                                                           const std::vector<double>& nk, int member, Pass pass) {
  const int U = static_cast<int>(nq.size());
  const std::vector<detail::HeadRange> qh = detail::q_ranges(pr.heads_q, pr.heads_kv, U),
                                       kvh = detail::kv_ranges(pr.heads_q, pr.heads_kv, U);
  const double B = pr.batch, D = pr.head_dim, vb = pr.bytes_per_value, ab = accumulate_bytes(pr.bytes_per_value);
  const int m = member;
  // dK, dV of a KV head two members computed parts of travel in the accumulation type, to be
  // summed once at their owner (16-bit storage; wider storage travels as stored anyway).
  const bool shared = detail::kv_heads_shared(kvh);
  const double grad_kv_bytes = shared && vb < ab ? ab : vb;
  // Per member r: a gather sends this member's positions of r's heads, a scatter r's positions of
  // this member's heads.
  const auto phase = [&](bool gather, auto bytes_to) {
    HeadExchangePhase p;
    p.self = m, p.gather = gather;
    for (int r = 0; r < U; ++r) p.to.push_back(B * bytes_to(r));
    return p;
  };
  std::vector<HeadExchangePhase> phases;
  if (pass == Pass::forward) {
    phases.push_back(
        phase(true, [&](int r) { return nq[m] * qh[r].count * D * vb + 2 * nk[m] * kvh[r].count * D * vb; }));
    phases.push_back(phase(false, [&](int r) { return nq[r] * qh[m].count * D * vb; }));
    if (pr.lse) phases.push_back(phase(false, [&](int r) { return nq[r] * qh[m].count * ab; }));
    return phases;
  }
  // q, o, dout and lse of the query positions, k and v of the key positions.
  phases.push_back(
      phase(true, [&](int r) { return nq[m] * qh[r].count * (3 * D * vb + ab) + 2 * nk[m] * kvh[r].count * D * vb; }));
  phases.push_back(phase(false, [&](int r) { return nq[r] * qh[m].count * D * vb; }));  // dq
  for (int g = 0; g < 2; ++g)                                                           // dk, dv
    phases.push_back(phase(false, [&](int r) { return nk[r] * kvh[m].count * D * grad_kv_bytes; }));
  return phases;
}

}  // namespace dist
}  // namespace kattn
