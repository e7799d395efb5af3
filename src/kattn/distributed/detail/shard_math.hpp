// Host-side arithmetic shared by the distributed schedules: where a shard pair's diagonal lies,
// whether any of its (query, key) pairs is visible and how many are, and from that which keys
// each rank must receive from each other rank. Internal.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "kattn/core/key_window.hpp"
#include "kattn/distributed/layout.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace dist {
namespace detail {

// Options for the query rows [q_global, q_global + q_len) of a sequence of Nq queries against
// the keys [k_global, k_global + kv_len) of Nk keys: the user's mask moved by the shift of
// core/key_window.hpp, shift = (qo - ko) + (Nk - Nq) - (kv_len - q_len), on top of the user's own shift.
// One split and no progress callback: the MPI layer cuts the keys and reports progress itself.
inline Options shard_options(const Options& opt, std::int64_t q_global, std::int64_t q_len, std::int64_t Nq,
                             std::int64_t k_global, std::int64_t kv_len, std::int64_t Nk) {
  Options o = opt;
  o.diagonal_shift = opt.diagonal_shift + (q_global - k_global) + (Nk - Nq) - (kv_len - q_len);
  o.splits = 1;
  o.split_chunk = 0;
  o.progress = nullptr;
  return o;
}

// The bias (Options::bias) of a block of this rank's query rows [row, row + rows) against the
// global keys [key, key + keys): the ring's bias is this rank's rows over every key of the sequence.
inline Options with_block_bias(Options o, std::int64_t row, std::int64_t key, std::int64_t rows, std::int64_t keys) {
  o.bias = o.bias.block(row, key, rows, keys);
  return o;
}

// The keys [lo, hi] of [0, kv_len) that some query row of [0, q_len) sees; lo > hi when none.
struct KeyRange {
  std::int64_t lo = 0, hi = -1;
  bool empty() const { return lo > hi; }
};

// The rows that see some key are [first_query(0), last_query(kv_len - 1)] (rows before see no key
// yet, rows after none any more), and first(i) <= last(i) + 1 <= first(i + 1) + ... keeps their
// intervals touching: what they see together is [first(row a), last(row b)].
inline KeyRange visible_keys(const Options& o, std::int64_t q_len, std::int64_t kv_len) {
  if (q_len == 0 || kv_len == 0) return KeyRange{kv_len, -1};
  const KeyWindow w = KeyWindow::from(o);
  const std::int64_t a = w.first_query(0, q_len, kv_len), b = w.last_query(kv_len - 1, q_len, kv_len);
  if (a > b) return KeyRange{kv_len, -1};
  const KeyRange r{w.first(a, q_len, kv_len), w.last(b, q_len, kv_len)};
  return r.empty() ? KeyRange{kv_len, -1} : r;
}

// The deterministic mode's walk over a (query segment qs, key piece ks) pair of a sequence of Nq
// queries and Nk keys: each global key chunk of `chunk` keys some row sees, in order, and for it the
// rows that see it in runs of at most `step`: rows(i, n, j0, keys) for rows [i, i + n) of qs and
// keys [j0, j0 + keys) of ks; after_chunk() after each chunk. The ring folds these partials where
// it computes them and the grid ships them, so both walk them in this one order.
template <class Rows, class AfterChunk>
void for_each_chunk_rows(const Options& opt, const Segment& qs, const Segment& ks, std::int64_t Nq, std::int64_t Nk,
                         std::int64_t chunk, std::int64_t step, const Rows& rows, const AfterChunk& after_chunk) {
  const Options whole = shard_options(opt, qs.global, qs.length, Nq, ks.global, ks.length, Nk);
  const KeyRange seen = visible_keys(whole, qs.length, ks.length);
  if (seen.empty()) return;
  const KeyWindow w = KeyWindow::from(whole);
  for (std::int64_t j0 = seen.lo / chunk * chunk; j0 <= seen.hi; j0 += chunk) {
    const std::int64_t keys = std::min(chunk, ks.length - j0);
    const std::int64_t r0 = w.first_query(j0, qs.length, ks.length),
                       r1 = w.last_query(j0 + keys - 1, qs.length, ks.length);
    for (std::int64_t i = r0; i <= r1; i += step) rows(i, std::min(step, r1 - i + 1), j0, keys);
    after_chunk();
  }
}

// Intervals of key segment ks (relative to its start) as pieces of it (global, local, length), in
// order, intervals that overlap or touch merged.
inline std::vector<Segment> parts_of(const Segment& ks, std::vector<KeyRange> seen) {
  std::sort(seen.begin(), seen.end(), [](const KeyRange& a, const KeyRange& b) { return a.lo < b.lo; });
  std::vector<Segment> pieces;
  for (std::size_t i = 0; i < seen.size();) {
    KeyRange r = seen[i++];
    while (i < seen.size() && seen[i].lo <= r.hi + 1) r.hi = std::max(r.hi, seen[i++].hi);
    pieces.push_back(Segment{ks.global + r.lo, ks.local + r.lo, r.hi - r.lo + 1, ks.owner});
  }
  return pieces;
}

// The keys of key segment `ks` (of a sequence of Nk keys) that some row of the query segments
// `qsegs` (of Nq queries) sees, as pieces (global, local in the owner's array, length) in global
// order. Each query segment sees one interval; each is widened to whole multiples of `align` from
// the segment start (the deterministic mode's chunks, which a launch reads whole), and intervals
// that touch are merged. Every rank computes the same pieces for every (queries, segment): both
// sides of a transfer agree on it without a message.
inline std::vector<Segment> needed_keys_of(const Options& opt, const std::vector<Segment>& qsegs, std::int64_t Nq,
                                           std::int64_t Nk, const Segment& ks, std::int64_t align) {
  std::vector<KeyRange> seen;
  for (const Segment& qs : qsegs) {
    KeyRange r = visible_keys(shard_options(opt, qs.global, qs.length, Nq, ks.global, ks.length, Nk), qs.length,
                              ks.length);
    if (r.empty()) continue;
    r.lo = r.lo / align * align;
    r.hi = std::min(ks.length, (r.hi / align + 1) * align) - 1;
    seen.push_back(r);
  }
  return parts_of(ks, std::move(seen));
}
// The same for the query segments of rank `dest` (the ring; the grid passes a column's segments).
inline std::vector<Segment> needed_keys_of(const Options& opt, const SequenceLayout& ql, const SequenceLayout& kl,
                                           int dest, const Segment& ks, std::int64_t align) {
  return needed_keys_of(opt, ql.segments_of(dest), ql.length(), kl.length(), ks, align);
}

// The same over every key segment of rank `owner`: what `owner` must send to `dest`.
inline std::vector<Segment> needed_keys(const Options& opt, const SequenceLayout& ql, const SequenceLayout& kl,
                                        int dest, int owner, std::int64_t align) {
  std::vector<Segment> out;
  for (const Segment& ks : kl.segments_of(owner))
    for (const Segment& p : needed_keys_of(opt, ql, kl, dest, ks, align)) out.push_back(p);
  return out;
}

inline std::int64_t total_length(const std::vector<Segment>& pieces) {
  std::int64_t n = 0;
  for (const Segment& p : pieces) n += p.length;
  return n;
}

// The deterministic backward's tours of key segment ks: its chunks of `align` keys grouped into
// packages, runs of chunks that the same query segments see (indices into ql.segments(), in
// descending order: where the package's dK/dV accumulator stops). Chunks no query sees are left
// out, so under a window most of a segment stays home and only chunks near its ends travel.
struct TourPlan {
  Segment piece;
  std::vector<int> stops;
};
inline std::vector<TourPlan> tour_plans(const Options& opt, const SequenceLayout& ql, const SequenceLayout& kl,
                                        const Segment& ks, std::int64_t align) {
  const auto& qsegs = ql.segments();
  std::vector<KeyRange> seen(qsegs.size());
  for (std::size_t q = 0; q < qsegs.size(); ++q)
    seen[q] = visible_keys(shard_options(opt, qsegs[q].global, qsegs[q].length, ql.length(), ks.global, ks.length,
                                         kl.length()),
                           qsegs[q].length, ks.length);
  std::vector<TourPlan> plans;
  for (std::int64_t c = 0; c < ks.length; c += align) {
    const std::int64_t end = std::min(ks.length, c + align) - 1;
    std::vector<int> stops;
    for (int q = static_cast<int>(qsegs.size()) - 1; q >= 0; --q)
      if (!seen[q].empty() && seen[q].lo <= end && seen[q].hi >= c) stops.push_back(q);
    if (stops.empty()) continue;
    if (!plans.empty() && plans.back().stops == stops &&
        plans.back().piece.local + plans.back().piece.length == ks.local + c) {
      plans.back().piece.length += end - c + 1;
      continue;
    }
    plans.push_back(TourPlan{Segment{ks.global + c, ks.local + c, end - c + 1, ks.owner}, std::move(stops)});
  }
  return plans;
}

// The ring's steps: shift 0 (every rank's own keys) and each shift t in 1 .. P - 1 at which some
// rank r needs keys of rank (r - t) mod P, in increasing order. The same list on every rank, so
// every rank runs and skips the same steps; at step t rank r receives from r - t and sends to r + t.
// O(P^2) pairs of ranks, each O(1): every rank's segments are listed once.
inline std::vector<int> ring_shifts(const Options& opt, const SequenceLayout& ql, const SequenceLayout& kl) {
  const int P = ql.ranks();
  std::vector<std::vector<Segment>> qs(P), ks(P);
  for (const Segment& s : ql.segments()) qs[s.owner].push_back(s);
  for (const Segment& s : kl.segments()) ks[s.owner].push_back(s);
  const auto sees = [&](int dest, int owner) {
    for (const Segment& q : qs[dest])
      for (const Segment& k : ks[owner])
        if (!visible_keys(shard_options(opt, q.global, q.length, ql.length(), k.global, k.length, kl.length()),
                          q.length, k.length)
                 .empty())
          return true;
    return false;
  };
  std::vector<int> shifts{0};
  for (int t = 1; t < P; ++t)
    for (int r = 0; r < P; ++r)
      if (sees(r, (r - t + P) % P)) {
        shifts.push_back(t);
        break;
      }
  return shifts;
}

// One step of the ring for `rank`: the keys it receives from `from` and those it sends to `to`.
struct RingStep {
  int from = 0, to = 0;
  std::vector<Segment> in, out;
};
// The steps of these shifts of P ranks, needed(dest, owner) the keys owner sends dest.
template <class Needed>
std::vector<RingStep> ring_steps(const std::vector<int>& shifts, int P, int rank, const Needed& needed) {
  std::vector<RingStep> steps;
  for (int t : shifts) {
    RingStep s;
    s.from = (rank - t + P) % P, s.to = (rank + t) % P;
    s.in = needed(rank, s.from);
    s.out = needed(s.to, rank);
    steps.push_back(std::move(s));
  }
  return steps;
}
inline std::vector<RingStep> ring_steps(const Options& opt, const SequenceLayout& ql, const SequenceLayout& kl,
                                        int rank) {
  return ring_steps(ring_shifts(opt, ql, kl), ql.ranks(), rank,
                    [&](int dest, int owner) { return needed_keys(opt, ql, kl, dest, owner, 1); });
}

}  // namespace detail
}  // namespace dist
}  // namespace kattn
