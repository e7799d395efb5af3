// The grid scheme's model (model/grid_model.hpp; plain arithmetic, no Kokkos, no MPI): its bytes,
// its limits (one rank; free links; a slow link), the shape it picks, and the crossover anchors.
// test_grid_traffic.cpp checks the bytes against the library's traffic model (MPI builds).
#include <gtest/gtest.h>

#include <vector>

#include "model/grid_model.hpp"
#include "model/scaling_anchors.hpp"
#include "model/scaling_model.hpp"

namespace kattn {
namespace scaling {
namespace {

RingModelInput problem(int P, double tokens_per_rank) {
  RingModelInput in;
  in.ranks = P, in.tokens = std::int64_t(tokens_per_rank) * P;
  in.heads_q = 8, in.heads_kv = 8, in.head_dim = 64, in.bytes_per_value = 4;
  in.rate = KernelRate(1e12);
  in.cluster.intra = Link{1e9, 1e-4};
  return in;
}

TEST(GridModel, ShapesAreEveryDivisorRowsAscending) {
  const std::vector<GridShape> s = grid_shapes(12);
  ASSERT_EQ(s.size(), 6u);
  EXPECT_EQ(s.front().rows, 1);
  EXPECT_EQ(s.front().cols, 12);
  EXPECT_EQ(s.back().rows, 12);
  for (const GridShape& g : s) EXPECT_EQ(g.rows * g.cols, 12);
}

TEST(GridModel, BytesAreQueriesAndResultsDownTheColumnAndKeysAlongTheRow) {
  RingModelInput in = problem(8, 512);
  in.bytes_per_value = 2, in.heads_kv = 2;  // 16-bit K/V; queries and results travel in float
  const double n = 512, H = 8, D = 64;
  EXPECT_DOUBLE_EQ(grid_bytes_per_rank(in, {2, 4}), n * H * D * 4 + n * H * (D + 1) * 4 + 3 * 2 * n * 2 * D * 2);
  EXPECT_DOUBLE_EQ(model_grid(in, {2, 4}).bytes_per_rank, grid_bytes_per_rank(in, {2, 4}));
}

// Causal over zigzag shards: a column whose first rank lies after the key shard's owner sees only
// the owner's first segment; the last rank sends all its keys, the first half of them.
TEST(GridModel, CausalZigzagSendsHalfAShardToLaterColumns) {
  RingModelInput in = problem(8, 512);
  in.causal = true;
  const GridMessages m = grid_messages(in);
  EXPECT_DOUBLE_EQ(grid_rank_bytes(in, {2, 4}, 0).sent, m.q + m.result + 3 * 0.5 * m.kv);
  EXPECT_DOUBLE_EQ(grid_rank_bytes(in, {2, 4}, 2).sent, m.q + m.result + (2 + 0.5) * m.kv);
  EXPECT_DOUBLE_EQ(grid_rank_bytes(in, {2, 4}, 7).sent, m.q + m.result + 3 * m.kv);
  EXPECT_DOUBLE_EQ(grid_bytes_per_rank(in, {2, 4}), m.q + m.result + 3 * m.kv);
  EXPECT_DOUBLE_EQ(grid_bytes_per_rank(in, {1, 8}), ring_bytes_per_rank(in));  // the ring's busiest rank
}

// 1 x P: every rank's K/V to every other rank, no query or result travels: the ring's bytes.
TEST(GridModel, OneRowSendsTheRingsBytes) {
  for (int P : {2, 4, 8, 64}) {
    const RingModelInput in = problem(P, 1024);
    EXPECT_DOUBLE_EQ(grid_bytes_per_rank(in, {1, P}), ring_bytes_per_rank(in)) << P;
  }
}

TEST(GridModel, OneRankIsTheLocalCall) {
  const RingModelInput in = problem(1, 4096);
  const GridModel g = model_grid(in, {1, 1});
  EXPECT_EQ(g.bytes_per_rank, 0.0);
  EXPECT_NEAR(g.seconds, model_ring(in).seconds, 1e-15);
  EXPECT_NEAR(g.efficiency, 1.0, 1e-12);
}

// With free links every shape costs its compute, which is the ring's.
TEST(GridModel, FreeLinksCostTheComputeOnly) {
  RingModelInput in = problem(8, 2048);
  in.cluster.intra = Link{1e30, 0};
  for (GridShape s : grid_shapes(8)) {
    const GridModel g = model_grid(in, s);
    EXPECT_NEAR(g.seconds, g.compute_seconds, 1e-12) << s.rows;
    EXPECT_NEAR(g.seconds, model_ring(in).seconds, 1e-12) << s.rows;
    EXPECT_NEAR(g.efficiency, 1.0, 1e-12) << s.rows;
  }
}

// On a slow link the call cannot end before a rank's inputs are in and its last block is computed
// on them, nor before the results it receives have crossed the link.
TEST(GridModel, ASlowLinkExposesTheInputsAndTheResults) {
  RingModelInput in = problem(8, 512);
  in.cluster.intra = Link{12.5e6, 5e-3};
  const GridMessages msg = grid_messages(in);
  const GridModel g = model_grid(in, {2, 4});
  // Inputs: one query shard and three K/V shards share the link.
  EXPECT_NEAR(g.inputs_seconds, 5e-3 + (msg.q + 3 * msg.kv) / 12.5e6, 1e-12);
  EXPECT_GT(g.seconds, g.inputs_seconds + msg.result / 12.5e6);
  EXPECT_GT(g.exposed_comm_seconds, 0.0);
  EXPECT_NEAR(g.seconds, g.compute_seconds + g.exposed_comm_seconds, 1e-12);
}

TEST(GridModel, RanksOnOneNodeUseItsLink) {
  RingModelInput in = problem(8, 512);
  in.cluster.intra = Link{100e9, 1e-6};
  in.cluster.inter = Link{1e9, 1e-5};
  in.cluster.ranks_per_node = 8;
  const GridModel one_node = model_grid(in, {2, 4});
  in.cluster.ranks_per_node = 4;  // a grid row per node: keys stay home, queries and results cross
  const GridModel two_nodes = model_grid(in, {2, 4});
  EXPECT_FALSE(one_node.crosses_nodes);
  EXPECT_TRUE(two_nodes.crosses_nodes);
  EXPECT_GT(two_nodes.seconds, one_node.seconds);
}

TEST(GridModel, ThePickIsTheFastestShape) {
  for (double bandwidth : {1e7, 1e9, 1e11})
    for (int P : {6, 8, 16, 64}) {
      RingModelInput in = problem(P, 1024);
      in.cluster.intra = Link{bandwidth, 1e-5};
      std::vector<GridModel> all;
      const GridModel best = best_grid(in, &all);
      ASSERT_EQ(all.size(), grid_shapes(P).size());
      for (const GridModel& g : all) EXPECT_LE(best.seconds, g.seconds) << P << " " << g.shape.rows;
      EXPECT_EQ(best.shape.rows * best.shape.cols, P);
    }
}

// Where the link is slow against the work, the grid's fewer bytes win over the ring past a few
// ranks; where the transfers hide anyway the two are alike.
TEST(GridModel, TheGridOvertakesTheRingOnASlowLink) {
  RingModelInput in = problem(64, 1024);
  in.cluster.intra = Link{1e9, 1e-5};
  const GridModel best = best_grid(in);
  EXPECT_GT(best.shape.rows, 1);
  EXPECT_LT(best.bytes_per_rank, ring_bytes_per_rank(in));
  EXPECT_LT(best.seconds, model_ring(in).seconds);
}

TEST(GridModel, RefusesWhatItDoesNotModel) {
  RingModelInput in = problem(4, 1024);
  EXPECT_THROW(model_grid(in, {3, 2}), Error);
  in.backward_ratio = 2;
  EXPECT_THROW(model_grid(in, {2, 2}), Error);
  in.backward_ratio = 0, in.causal = true, in.zigzag = false;
  EXPECT_THROW(model_grid(in, {2, 2}), Error);
}

TEST(GridAnchors, EveryAnchorHasItsPublishedPointAndAFasterGridThere) {
  ASSERT_FALSE(grid_anchors().empty());
  for (const GridAnchor& a : grid_anchors()) {
    const RingModelInput in = a.at(a.published_ranks);
    EXPECT_EQ(in.ranks, a.published_ranks);
    EXPECT_GT(a.published_speedup, 1.0) << a.name;
    EXPECT_LT(best_grid(in).seconds, model_ring(in).seconds) << a.name;
  }
}

}  // namespace
}  // namespace scaling
}  // namespace kattn
