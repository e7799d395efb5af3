// Which heads each rank computes when attention is sharded over heads (DeepSpeed-Ulysses): rank r
// of P takes query heads [r Hq/P, (r+1) Hq/P) and the KV heads those use (GQA: query head h uses
// KV head h / (Hq/Hkv)). When Hkv % P == 0 the KV heads are sharded too; otherwise a KV head may be
// needed by two ranks and goes to both. Internal.
#pragma once

#include <algorithm>
#include <vector>

#include "kattn/distributed/options.hpp"
#include "kattn/errors.hpp"

namespace kattn {
namespace dist {
namespace detail {

// A run of heads [first, first + count).
struct HeadRange {
  int first = 0, count = 0;
};

// Query heads of one local attention call and the KV heads they use, counted from the rank's first
// query head and first KV head.
struct HeadBlock {
  HeadRange q, kv;
};

struct HeadSplit {
  HeadRange q, kv;                // the rank's heads
  std::vector<HeadBlock> blocks;  // local calls that cover them, each a regular GQA problem
};

// Throws the same kattn::Error on every rank (the head counts are agreed before) when the query
// heads do not divide over the ranks.
inline void require_head_split(int heads_q, int ranks) {
  KATTN_REQUIRE(heads_q % ranks == 0, "q: expected a number of heads that is a multiple of the ", ranks,
                " ranks sharing them (head sharding), got ", heads_q);
}

// Deterministic mode promises the bits of every rank count; when ranks hold parts of a GQA group
// the dK, dV sum of that group is cut differently, so those rank counts are refused. The same
// error on every rank (the head counts are agreed before).
inline void require_whole_groups(int heads_kv, int ranks, const DistOptions& d) {
  KATTN_REQUIRE(!d.deterministic || heads_kv % ranks == 0,
                "k: deterministic head sharding needs a number of KV heads that is a multiple of the ", ranks,
                " ranks (each rank then sums whole GQA groups), got ", heads_kv);
}

inline HeadSplit head_split(int heads_q, int heads_kv, int ranks, int rank) {
  const int per_rank = heads_q / ranks, group = heads_q / heads_kv;
  HeadSplit s;
  s.q = {rank * per_rank, per_rank};
  const int kv_first = s.q.first / group, kv_last = (s.q.first + per_rank - 1) / group;
  s.kv = {kv_first, kv_last - kv_first + 1};
  // One call when every local KV head serves the same number of local query heads; else one call
  // per KV head (the kernels map query head h to KV head h / group, which needs whole groups).
  const bool regular = s.kv.count == 1 || (s.q.first % group == 0 && per_rank % group == 0);
  if (regular) {
    s.blocks.push_back({{0, per_rank}, {0, s.kv.count}});
    return s;
  }
  for (int kv = kv_first; kv <= kv_last; ++kv) {
    const int lo = std::max(s.q.first, kv * group), hi = std::min(s.q.first + per_rank, (kv + 1) * group);
    s.blocks.push_back({{lo - s.q.first, hi - lo}, {kv - kv_first, 1}});
  }
  return s;
}

// The query (or KV) head ranges of every rank, in rank order.
inline std::vector<HeadRange> q_ranges(int heads_q, int heads_kv, int ranks) {
  std::vector<HeadRange> r;
  for (int i = 0; i < ranks; ++i) r.push_back(head_split(heads_q, heads_kv, ranks, i).q);
  return r;
}
inline std::vector<HeadRange> kv_ranges(int heads_q, int heads_kv, int ranks) {
  std::vector<HeadRange> r;
  for (int i = 0; i < ranks; ++i) r.push_back(head_split(heads_q, heads_kv, ranks, i).kv);
  return r;
}

// Whether some KV head is computed in parts on several ranks (its dK, dV parts then summed).
inline bool kv_heads_shared(const std::vector<HeadRange>& kv) {
  for (std::size_t r = 1; r < kv.size(); ++r)
    if (kv[r].first < kv[r - 1].first + kv[r - 1].count) return true;
  return false;
}

}  // namespace detail
}  // namespace dist
}  // namespace kattn
