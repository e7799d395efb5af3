// What head sharding (Ulysses, and the head exchanges of hybrid attention) moves between ranks:
// the bytes one member of a group sends in each all-to-all of a call, from the shapes and the
// positions every member holds. The exchanges of head_sharded.hpp, counted as they post their
// messages: a member's own heads of its own positions never travel. Plain arithmetic, host only,
// no MPI: the scaling model, `kattn scale` and the tests use it.
#pragma once

#include <cstdint>
#include <vector>

#include "kattn/dist/head_split.hpp"

namespace kattn {
namespace dist {

// The global problem as every member sees it.
struct HeadTrafficProblem {
  int batch = 1, heads_q = 1, heads_kv = 1, head_dim = 64;
  int bytes_per_value = 4;   // q, k, v, o, dout and dq as stored (2 for bf16 / fp16)
  int accumulate_bytes = 4;  // lse, and 16-bit dK / dV parts that several members sum
  bool lse = true;           // the forward returns lse (one more exchange)
};

enum class HeadPass { forward, backward };

// One all-to-all of a call, from one member: the bytes of its part for each member, its own
// (to[self]) copied in place rather than sent. The exchanges of a call run one after the other
// (the forward's gathers of q, k, v together, then o, then lse; the backward's six gathers
// together, then dq, dk, dv), so each is a phase. A gather packs what the member sends (its
// positions of every member's heads); a scatter unpacks what it receives.
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

// The phases of one call for `member` of a group of nq.size() members, which hold nq[r] query and
// nk[r] key positions (lengths as doubles: the model passes N / P).
inline std::vector<HeadExchangePhase> head_exchange_phases(const HeadTrafficProblem& pr, const std::vector<double>& nq,
                                                           const std::vector<double>& nk, int member, HeadPass pass) {
  const int U = static_cast<int>(nq.size());
  const std::vector<detail::HeadRange> qh = detail::q_ranges(pr.heads_q, pr.heads_kv, U),
                                       kvh = detail::kv_ranges(pr.heads_q, pr.heads_kv, U);
  const double B = pr.batch, D = pr.head_dim, vb = pr.bytes_per_value, ab = pr.accumulate_bytes;
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
  if (pass == HeadPass::forward) {
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

// All the bytes one member sends in a call.
inline double head_exchange_sent(const HeadTrafficProblem& pr, const std::vector<double>& nq,
                                 const std::vector<double>& nk, int member, HeadPass pass) {
  double s = 0;
  for (const HeadExchangePhase& p : head_exchange_phases(pr, nq, nk, member, pass)) s += p.sent();
  return s;
}

}  // namespace dist
}  // namespace kattn
