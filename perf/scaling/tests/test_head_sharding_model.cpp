// Head sharding's traffic and its model (plain arithmetic, no Kokkos, no MPI): the bytes of each
// exchange, Ulysses and hybrid at their limits (one rank, U = 1: the ring), the exchange time on
// one node and across nodes. tests/mpi checks the traffic against the bytes the calls send.
#include <gtest/gtest.h>

#include <vector>

#include "model/head_sharding_model.hpp"
#include "model/scaling_model.hpp"

namespace kattn {
namespace scaling {
namespace {

RingModelInput problem(int P, std::int64_t tokens_per_rank) {
  RingModelInput in;
  in.ranks = P, in.tokens = tokens_per_rank * P;
  in.heads_q = 16, in.heads_kv = 4, in.head_dim = 128, in.bytes_per_value = 2, in.causal = true;
  in.rate = KernelRate(400e12);
  in.cluster.intra = Link{200e9, 10e-6};
  return in;
}

TEST(HeadShardedModel, OneRankIsTheLocalCall) {
  const HeadShardedModel m = model_head_sharded(problem(1, 32768), 1);
  EXPECT_EQ(m.exchange_seconds, 0.0);
  EXPECT_EQ(m.bytes_per_rank, 0.0);
  EXPECT_DOUBLE_EQ(m.efficiency, 1.0);
}

TEST(HeadShardedModel, OneRankStillCopiesItsArraysThroughTheWholeSequenceBuffers) {
  RingModelInput in = problem(1, 4096);
  in.cluster.memory_bytes_per_second = 1e11;
  const HeadShardedModel m = model_head_sharded(in, 1);
  // q (16 heads), k, v (4 each), o (16) at 2 bytes, lse (16) at 4: read and written once.
  const double n = 4096, D = 128;
  EXPECT_NEAR(m.exchange_seconds, 2 * (n * (16 + 8) * D * 2 + n * 16 * D * 2 + n * 16 * 4) / 1e11, 1e-15);
  EXPECT_EQ(m.bytes_per_rank, 0.0);
  EXPECT_LT(m.efficiency, 1.0);
}

TEST(HeadShardedModel, UlyssesSumsItsExchangesAfterTheLocalCallOverTheWholeSequence) {
  // Two members, one head each, no packing cost: forward = (q, k, v) + o + lse, one latency each.
  RingModelInput in = problem(2, 4096);
  in.heads_q = in.heads_kv = 2;
  const HeadShardedModel m = model_head_sharded(in, 2);
  const double n = 4096, D = 128, bw = 200e9, lat = 10e-6;
  EXPECT_NEAR(m.exchange_seconds, 3 * lat + (3 * n * D * 2 + n * D * 2 + n * 4) / bw, 1e-15);
  EXPECT_DOUBLE_EQ(m.bytes_per_rank, 3 * n * D * 2 + n * D * 2 + n * 4);
  // The inner call: one head over all 8192 positions, causal.
  EXPECT_NEAR(m.ring.seconds, 4 * D * 1 * 8192.0 * 8192.0 * 0.5 / 400e12, 1e-15);
  EXPECT_NEAR(m.seconds, m.exchange_seconds + m.ring.seconds, 1e-15);
  EXPECT_LT(m.efficiency, 1.0);
  EXPECT_NEAR(m.efficiency, m.ring.seconds / m.seconds, 1e-12);  // same work, same rate
}

TEST(HeadShardedModel, OneMemberPerGroupIsTheRingWhenCopiesAreFree) {
  const RingModelInput in = problem(8, 16384);  // memory_bytes_per_second = 0
  const HeadShardedModel m = model_head_sharded(in, 1);
  const RingModel r = model_ring(in);
  EXPECT_EQ(m.exchange_seconds, 0.0);
  EXPECT_DOUBLE_EQ(m.seconds, r.seconds);
  EXPECT_DOUBLE_EQ(m.bytes_per_rank, r.bytes_per_rank);
  EXPECT_DOUBLE_EQ(m.efficiency, r.efficiency);
}

TEST(HeadShardedModel, AllToAllAcrossNodesWaitsOnTheSlowLinkWhereHybridKeepsItInTheNode) {
  // 16 ranks, 8 per node, a NIC of 25 GB/s per rank against 200 GB/s inside the node.
  RingModelInput in = problem(16, 8192);
  in.cluster.ranks_per_node = 8;
  in.cluster.inter = Link{25e9, 20e-6};
  const HeadShardedModel ulysses = model_head_sharded(in, 16), hybrid = model_head_sharded(in, 8);
  EXPECT_TRUE(ulysses.exchange_crosses_nodes);
  EXPECT_FALSE(hybrid.exchange_crosses_nodes);
  EXPECT_TRUE(hybrid.ring.crosses_nodes);  // the ring of two groups: one member index on each node
  EXPECT_GT(ulysses.exchange_seconds, 4 * hybrid.exchange_seconds);
  EXPECT_GT(hybrid.efficiency, ulysses.efficiency);
  // The same ranks on one node: Ulysses' exchange over the fast link only.
  in.cluster.ranks_per_node = 0;
  EXPECT_LT(model_head_sharded(in, 16).exchange_seconds, ulysses.exchange_seconds / 4);
}

TEST(HeadShardedModel, BackwardAddsItsOwnExchangesAndRing) {
  RingModelInput in = problem(8, 8192);
  const HeadShardedModel forward = model_head_sharded(in, 4);
  in.backward_ratio = 2.5;
  const HeadShardedModel both = model_head_sharded(in, 4);
  EXPECT_GT(both.exchange_seconds, 2 * forward.exchange_seconds);  // six gathers and three scatters
  EXPECT_GT(both.ring.seconds, 3.4 * forward.ring.seconds);
  EXPECT_GT(both.bytes_per_rank, 2 * forward.bytes_per_rank);
  EXPECT_LE(both.efficiency, 1.0);
}

}  // namespace
}  // namespace scaling
}  // namespace kattn
