// The arithmetic every rank runs to agree, without a message, on which keys travel: the visible
// key range of a shard pair against a row-by-row count, and the pieces each rank receives from
// each other (and the deterministic backward's tours) against the global mask applied position by
// position, for both shardings, many rank counts, windows, causal masks and Nq != Nk. Plain
// arithmetic: every rank checks the same cases.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "dist_support.hpp"
#include "kattn/distributed/traffic.hpp"
#include "kattn/distributed/detail/shard_math.hpp"

namespace kattn {
namespace test {
namespace {

using dist::detail::KeyRange;

std::vector<Options> windows() {
  std::vector<Options> v(12);
  v[1].causal = true;
  v[2].window_left = 0, v[2].window_right = 0;
  v[3].window_left = 1, v[3].window_right = 0;
  v[4].window_left = 0, v[4].window_right = 1;
  v[5].window_left = 5, v[5].window_right = 3;
  v[6].window_left = 40, v[6].window_right = 0;
  v[7].window_left = -1, v[7].window_right = 4;
  v[8].window_left = 6, v[8].window_right = -1;
  v[9].causal = true, v[9].window_left = 1;
  v[10].causal = true, v[10].window_left = 9;
  v[11].window_left = 2, v[11].window_right = 4, v[11].diagonal_shift = -7;
  return v;
}

TEST(ShardMath, VisibleKeysAndPairsMatchARowByRowCount) {
  std::mt19937_64 rng(fresh_seed());
  for (int trial = 0; trial < 4000; ++trial) {
    Options o;
    o.causal = rng() % 3 == 0;
    o.window_left = static_cast<int>(rng() % 12) - 1;
    o.window_right = static_cast<int>(rng() % 12) - 1;
    o.diagonal_shift = static_cast<std::int64_t>(rng() % 81) - 40;
    const std::int64_t q_len = rng() % 30, kv_len = rng() % 30;
    const KeyWindow w = KeyWindow::from(o);
    KeyRange want{kv_len, -1};
    std::int64_t pairs = 0;
    for (std::int64_t i = 0; i < q_len; ++i)
      for (std::int64_t j = 0; j < kv_len; ++j)
        if (w.visible(i, j, q_len, kv_len)) {
          want.lo = std::min(want.lo, j), want.hi = std::max(want.hi, j);
          ++pairs;
        }
    const KeyRange got = dist::detail::visible_keys(o, q_len, kv_len);
    const std::string what = describe(Shape{1, int(q_len), int(kv_len), 1, 1, 1}, o);
    ASSERT_EQ(got.empty(), want.empty()) << what;
    if (!want.empty()) {
      EXPECT_EQ(got.lo, want.lo) << what;
      EXPECT_EQ(got.hi, want.hi) << what;
    }
    EXPECT_EQ(KeyWindow::from(o).visible_pairs(q_len, kv_len), pairs) << what;
  }
}

// Keys of rank `owner` that some query of rank `dest` sees in the global problem, widened to the
// chunks of `align` keys holding them.
std::set<std::int64_t> needed_by_definition(const Options& opt, const SequenceLayout& ql, const SequenceLayout& kl,
                                            int dest, int owner, std::int64_t align) {
  const KeyWindow w = KeyWindow::from(opt);
  std::set<std::int64_t> keys;
  for (const dist::Segment& ks : kl.segments_of(owner))
    for (std::int64_t j = ks.global; j < ks.global + ks.length; ++j) {
      bool seen = false;
      for (const dist::Segment& qs : ql.segments_of(dest))
        for (std::int64_t i = qs.global; i < qs.global + qs.length && !seen; ++i)
          seen = w.visible(i, j, ql.length(), kl.length());
      if (!seen) continue;
      const std::int64_t c0 = j / align * align;
      for (std::int64_t x = std::max(c0, ks.global); x < std::min(c0 + align, ks.global + ks.length); ++x)
        keys.insert(x);
    }
  return keys;
}

TEST(ShardMath, NeededKeysAreWhatTheReceivingRanksQueriesSee) {
  const std::vector<std::pair<int, int>> lengths = {{1, 1}, {3, 3}, {37, 37}, {23, 61}, {61, 23}, {100, 100}};
  for (Sharding sh : {Sharding::contiguous, Sharding::zigzag})
    for (int P = 1; P <= 6; ++P)
      for (std::int64_t align : {1, 4})
        for (const auto& nn : lengths)
          for (const Options& o : windows()) {
            const SequenceLayout ql(nn.first, P, sh, align), kl(nn.second, P, sh, align);
            const std::string what = describe(Shape{1, nn.first, nn.second, 1, 1, 1}, o) + " P=" + std::to_string(P) +
                                     " " + dist::name(sh) + " align=" + std::to_string(align);
            for (int dest = 0; dest < P; ++dest)
              for (int owner = 0; owner < P; ++owner) {
                const auto pieces = dist::detail::needed_keys(o, ql, kl, dest, owner, align);
                std::set<std::int64_t> got;
                std::int64_t prev_end = -1;
                for (const dist::Segment& pc : pieces) {
                  EXPECT_GE(pc.global, prev_end) << what << ": pieces in order, disjoint";
                  prev_end = pc.global + pc.length;
                  EXPECT_EQ(kl.global_position(owner, pc.local), pc.global) << what;
                  for (std::int64_t j = pc.global; j < pc.global + pc.length; ++j) got.insert(j);
                }
                EXPECT_EQ(got, needed_by_definition(o, ql, kl, dest, owner, align))
                    << what << " dest=" << dest << " owner=" << owner;
              }
          }
}

TEST(ShardMath, RingStepsAreTheShiftsWithTraffic) {
  for (Sharding sh : {Sharding::contiguous, Sharding::zigzag})
    for (int P = 1; P <= 7; ++P)
      for (const Options& o : windows()) {
        const SequenceLayout ql(29 * P + 3, P, sh), kl(29 * P + 3, P, sh);
        const auto shifts = dist::detail::ring_shifts(o, ql, kl);
        ASSERT_FALSE(shifts.empty());
        EXPECT_EQ(shifts.front(), 0);
        std::set<int> listed(shifts.begin(), shifts.end());
        for (int t = 1; t < P; ++t) {
          bool traffic = false;
          for (int r = 0; r < P; ++r)
            traffic = traffic || !dist::detail::needed_keys(o, ql, kl, r, (r - t + P) % P, 1).empty();
          EXPECT_EQ(listed.count(t) == 1, traffic) << describe(Shape{}, o) << " P=" << P << " t=" << t;
        }
      }
  // A left window shorter than a shard: contiguous shards need only the left neighbour's keys;
  // zigzag ones the left neighbour's and, for the late segment, the right neighbour's.
  Options o;
  o.causal = true, o.window_left = 20;
  for (int P = 3; P <= 7; ++P) {
    const SequenceLayout c(64 * P, P, Sharding::contiguous), z(64 * P, P, Sharding::zigzag);
    EXPECT_EQ(dist::detail::ring_shifts(o, c, c), (std::vector<int>{0, 1}));
    EXPECT_EQ(dist::detail::ring_shifts(o, z, z), (std::vector<int>{0, 1, P - 1}));
  }
}

TEST(ShardMath, ToursStopAtTheQuerySegmentsThatSeeTheirChunks) {
  // Every chunk some query sees is in exactly one package, whose stops are the query segments
  // (descending) that see some key of that chunk; packages are runs of whole chunks in key order.
  for (Sharding sh : {Sharding::contiguous, Sharding::zigzag})
    for (int P = 1; P <= 5; ++P)
      for (const Options& o : windows()) {
        const std::int64_t C = 4;
        const SequenceLayout ql(37 * P + 1, P, sh, C), kl(41 * P, P, sh, C);
        const KeyWindow w = KeyWindow::from(o);
        const auto& qsegs = ql.segments();
        for (const dist::Segment& ks : kl.segments()) {
          std::map<std::int64_t, std::vector<int>> want;  // chunk start -> stops
          for (std::int64_t c = ks.global; c < ks.global + ks.length; c += C) {
            std::vector<int> stops;
            for (int q = static_cast<int>(qsegs.size()) - 1; q >= 0; --q) {
              bool sees = false;
              for (std::int64_t i = qsegs[q].global; i < qsegs[q].global + qsegs[q].length && !sees; ++i)
                for (std::int64_t j = c; j < std::min(c + C, ks.global + ks.length) && !sees; ++j)
                  sees = w.visible(i, j, ql.length(), kl.length());
              if (sees) stops.push_back(q);
            }
            if (!stops.empty()) want[c] = stops;
          }
          std::map<std::int64_t, std::vector<int>> got;
          std::int64_t prev_end = ks.global;
          for (const auto& tp : dist::detail::tour_plans(o, ql, kl, ks, C)) {
            EXPECT_GE(tp.piece.global, prev_end) << "packages in key order";
            EXPECT_EQ(tp.piece.global % C, 0);
            EXPECT_EQ(tp.piece.local - ks.local, tp.piece.global - ks.global);
            prev_end = tp.piece.global + tp.piece.length;
            for (std::int64_t c = tp.piece.global; c < prev_end; c += C) got[c] = tp.stops;
          }
          EXPECT_EQ(got, want) << describe(Shape{}, o) << " P=" << P << " segment at " << ks.global;
        }
      }
}

TEST(ShardMath, TrafficModelSendsWhatIsReceived) {
  // Over all ranks, what the model sends equals what it receives, in every scheme, pass and mode
  // (sharded_kv: its deterministic chain to a root; a reduction's receipts are not counted, and a
  // broadcast counts once at its root).
  dist::TrafficProblem pr;
  pr.Nq = 203, pr.Nk = 211, pr.batch = 2, pr.heads_q = 60, pr.heads_kv = 3, pr.head_dim = 8, pr.bytes_per_value = 8;
  for (Sharding sh : {Sharding::contiguous, Sharding::zigzag})
    for (bool det : {false, true})
      for (int P = 1; P <= 6; ++P)
        for (const Options& o : windows())
          for (dist::Pass pass : {dist::Pass::forward, dist::Pass::backward}) {
            std::vector<dist::DistOptions> calls;
            dist::DistOptions d;
            d.sharding = sh, d.deterministic = det, d.chunk = 8;
            calls.push_back(d);
            if (!det || pr.heads_kv % P == 0) calls.push_back(with_scheme(dist::Scheme::ulysses, d));
            for (int U = 1; U <= P; ++U)
              if (P % U == 0 && (!det || pr.heads_kv % U == 0)) {
                dist::DistOptions h = with_scheme(dist::Scheme::hybrid, d);
                h.ulysses_size = U;
                calls.push_back(h);
              }
            if (det && pass == dist::Pass::forward)
              for (int root : {0, P - 1}) {
                dist::DistOptions k = with_scheme(dist::Scheme::sharded_kv, d);
                k.root = root;
                calls.push_back(k);
              }
            for (const dist::DistOptions& c : calls) {
              std::int64_t sent = 0, received = 0;
              for (int r = 0; r < P; ++r) {
                const dist::Traffic t = dist::traffic(pr, o, c, P, r, pass);
                sent += t.sent, received += t.received;
              }
              EXPECT_EQ(sent, received) << describe(Shape{}, o) << " P=" << P << " " << dist::name(c.scheme)
                                        << " U=" << c.ulysses_size;
            }
          }
}

TEST(ShardMath, HeadTrafficForwardSendsEachRankItsHeadsAndReturnsTheResults) {
  // 4 members, 8 query heads on 2 KV heads (two members per KV head: shared), 10 positions each.
  dist::TrafficProblem pr;
  pr.batch = 3, pr.heads_q = 8, pr.heads_kv = 2, pr.head_dim = 16, pr.bytes_per_value = 2;
  const std::vector<double> n(4, 10.0);
  const std::vector<dist::HeadExchangePhase> f = dist::head_exchange_phases(pr, n, n, 1, dist::Pass::forward);
  ASSERT_EQ(f.size(), 3u);                                        // q, k, v together; o; lse
  EXPECT_DOUBLE_EQ(f[0].own(), 3 * 10 * (2 + 2 * 1) * 16 * 2.0);  // its own heads: copied, not sent
  // To each other member: 10 positions x (2 query heads + 2 x 1 KV head) x 16 values x 2 bytes.
  EXPECT_DOUBLE_EQ(f[0].sent(), 3 * 3 * 10 * (2 + 2 * 1) * 16 * 2.0);
  EXPECT_DOUBLE_EQ(f[1].sent(), 3 * 3 * 10 * 2 * 16 * 2.0);  // o of its 2 heads at their positions
  EXPECT_DOUBLE_EQ(f[2].sent(), 3 * 3 * 10 * 2 * 4.0);       // lse in float
  pr.lse = false;
  EXPECT_EQ(dist::head_exchange_phases(pr, n, n, 1, dist::Pass::forward).size(), 2u);
}

TEST(ShardMath, HeadTrafficBackwardSumsSharedKvHeadsInTheAccumulationType) {
  dist::TrafficProblem pr;
  pr.heads_q = 8, pr.heads_kv = 2, pr.head_dim = 16, pr.bytes_per_value = 2;
  const std::vector<double> n(4, 10.0);
  const std::vector<dist::HeadExchangePhase> b = dist::head_exchange_phases(pr, n, n, 0, dist::Pass::backward);
  ASSERT_EQ(b.size(), 4u);  // six gathers together; dq; dk; dv
  EXPECT_DOUBLE_EQ(b[0].sent(), 3 * 10 * (2 * (3 * 16 * 2.0 + 4) + 2 * 16 * 2.0));
  EXPECT_DOUBLE_EQ(b[1].sent(), 3 * 10 * 2 * 16 * 2.0);
  EXPECT_DOUBLE_EQ(b[2].sent(), 3 * 10 * 1 * 16 * 4.0);  // a shared KV head: its parts in float
  pr.heads_kv = 4;                                       // one KV head each: dk, dv as stored
  EXPECT_DOUBLE_EQ(dist::head_exchange_phases(pr, n, n, 0, dist::Pass::backward)[3].sent(), 3 * 10 * 1 * 16 * 2.0);
}

}  // namespace
}  // namespace test
}  // namespace kattn
