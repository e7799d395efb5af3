// The grid model's bytes against the library's own traffic model (kattn::dist::traffic, the count
// the calls report in DistStats::bytes_sent), rank by rank; and what the 1 x P grid shares with the
// ring. Built with MPI only (the traffic model lives in kattn::dist); no MPI call is made.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "kattn/distributed/traffic.hpp"
#include "model/grid_model.hpp"

namespace kattn {
namespace scaling {
namespace {

struct Case {
  int P, rows, hq, hkv, bytes;
  bool causal;
};

dist::TrafficProblem problem_of(const RingModelInput& in) {
  dist::TrafficProblem pr;
  pr.Nq = pr.Nk = in.tokens;
  pr.batch = in.batch, pr.heads_q = in.heads_q, pr.heads_kv = in.heads_kv, pr.head_dim = in.head_dim;
  pr.bytes_per_value = in.bytes_per_value;
  return pr;
}

dist::DistOptions grid_options(int rows, int cols) {
  dist::DistOptions d;
  d.scheme = dist::Scheme::grid;
  d.sharding = dist::Sharding::zigzag;
  d.grid = {rows, cols};
  return d;
}

TEST(GridTraffic, TheModelsBytesAreTheLibrarysForEveryRank) {
  const Case cases[] = {{4, 2, 8, 8, 4, false}, {4, 2, 8, 8, 4, true},  {8, 2, 8, 2, 2, true},  {8, 4, 4, 4, 8, false},
                        {8, 1, 8, 8, 4, true},  {8, 8, 8, 8, 4, true},  {6, 3, 6, 3, 2, false}, {6, 2, 6, 3, 2, true},
                        {16, 4, 8, 1, 2, true}, {12, 3, 4, 4, 4, false}};
  for (const Case& c : cases) {
    RingModelInput in;
    in.ranks = c.P, in.tokens = 2 * c.P * 96, in.batch = 2;  // whole zigzag halves
    in.heads_q = c.hq, in.heads_kv = c.hkv, in.head_dim = 24, in.bytes_per_value = c.bytes, in.causal = c.causal;
    const GridShape s{c.rows, c.P / c.rows};
    Options opt;
    opt.causal = c.causal;
    double most = 0;
    for (int rank = 0; rank < c.P; ++rank) {
      const dist::Traffic t =
          dist::traffic(problem_of(in), opt, grid_options(s.rows, s.cols), c.P, rank, dist::Pass::forward);
      const GridRankBytes b = grid_rank_bytes(in, s, rank);
      EXPECT_DOUBLE_EQ(double(t.sent), b.sent)
          << c.P << " ranks, " << s.rows << " x " << s.cols << (c.causal ? " causal" : "") << ", rank " << rank;
      EXPECT_DOUBLE_EQ(double(t.received), b.received) << "rank " << rank;
      most = std::max(most, double(t.sent));
    }
    EXPECT_DOUBLE_EQ(grid_bytes_per_rank(in, s), most);
  }
}

// 1 x P: each rank sends its keys to every other rank, only those the other's queries see, and no
// query or result travels: rank by rank the bytes of the ring's forward, causal or not, under a
// window, and in deterministic mode (whole chunks both). The schedules differ: the ring sends one
// shard a step, the grid posts every shard before its first kernel.
TEST(GridTraffic, OneRowSendsTheRingsKeysRankByRank) {
  for (int P : {2, 4, 8})
    for (int variant = 0; variant < 5; ++variant) {
      dist::TrafficProblem pr;
      pr.Nq = pr.Nk = 2 * P * 200;
      pr.heads_q = 4, pr.heads_kv = 2, pr.head_dim = 16;
      Options opt;
      opt.causal = variant >= 1;
      if (variant == 2) opt.window_left = 150;
      if (variant == 3) opt.window_left = 150, opt.window_right = 40, opt.causal = false;
      dist::DistOptions ring;
      ring.sharding = variant == 0 ? dist::Sharding::contiguous : dist::Sharding::zigzag;
      ring.deterministic = variant == 4;
      ring.chunk = 64;
      dist::DistOptions grid = ring;
      grid.scheme = dist::Scheme::grid;
      grid.grid = {1, P};
      for (int rank = 0; rank < P; ++rank) {
        const dist::Traffic r = dist::traffic(pr, opt, ring, P, rank, dist::Pass::forward);
        const dist::Traffic g = dist::traffic(pr, opt, grid, P, rank, dist::Pass::forward);
        EXPECT_EQ(g.sent, r.sent) << P << " ranks, variant " << variant << ", rank " << rank;
        EXPECT_EQ(g.received, r.received) << P << " ranks, variant " << variant << ", rank " << rank;
      }
    }
}

}  // namespace
}  // namespace scaling
}  // namespace kattn
