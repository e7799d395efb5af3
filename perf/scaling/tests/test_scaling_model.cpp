// The scaling model and its calibration (plain arithmetic, no Kokkos, no MPI): interpolation of
// the kernel's rate, the ping-pong fit, what each overlap term adds, and the published anchors.
#include <gtest/gtest.h>

#include <cmath>

#include "model/scaling_anchors.hpp"
#include "model/scaling_calibration.hpp"
#include "model/scaling_model.hpp"

namespace kattn {
namespace scaling {
namespace {

TEST(KernelRate, InterpolatesInLogTokensAndHoldsTheEnds) {
  const KernelRate r({{4096, 40e9}, {1024, 20e9}, {4096, 60e9}});  // unsorted, 4096 twice: mean 50e9
  EXPECT_DOUBLE_EQ(r.at(1024), 20e9);
  EXPECT_DOUBLE_EQ(r.at(4096), 50e9);
  EXPECT_NEAR(r.at(2048), 35e9, 1e-3);  // halfway in log(tokens)
  EXPECT_DOUBLE_EQ(r.at(10), 20e9);
  EXPECT_DOUBLE_EQ(r.at(1e9), 50e9);
  EXPECT_TRUE(r.extrapolates(10));
  EXPECT_FALSE(r.extrapolates(3000));
  EXPECT_THROW(KernelRate(std::vector<RatePoint>{}), Error);
  EXPECT_THROW(KernelRate(-1.0), Error);
}

TEST(FitLink, RecoversLatencyAndBandwidth) {
  const Link truth{12.5e9, 3e-6};
  std::vector<LinkSample> s;
  for (double b = 8; b <= 64e6; b *= 8) s.push_back({b, truth.seconds(b)});
  const Link fit = fit_link(s);
  EXPECT_NEAR(fit.bytes_per_second / truth.bytes_per_second, 1.0, 1e-9);
  EXPECT_NEAR(fit.latency_seconds, truth.latency_seconds, 1e-12);
  EXPECT_THROW(fit_link({{8, 1e-6}}), Error);
  EXPECT_THROW(fit_link({{8, 2e-6}, {16, 1e-6}}), Error);
}

RingModelInput plain(int P, double tflops) {
  RingModelInput in;
  in.tokens = std::int64_t(65536) * P, in.ranks = P;
  in.heads_q = in.heads_kv = 8, in.head_dim = 128, in.bytes_per_value = 2;
  in.rate = KernelRate(tflops * 1e12);
  in.cluster.intra = Link{25e9, 2e-6};
  return in;
}

TEST(RingModel, OneRankIsTheKernel) {
  RingModelInput in = plain(1, 400);
  in.cluster.memory_bytes_per_second = 1e12, in.cluster.step_overhead_seconds = 1e-3;  // no merge, no extra step
  const RingModel m = model_ring(in);
  EXPECT_DOUBLE_EQ(m.efficiency, 1.0);
  EXPECT_EQ(m.exposed_comm_seconds, 0.0);
  EXPECT_EQ(m.bytes_per_rank, 0.0);
}

TEST(RingModel, HiddenTransferWithoutOverheadsIsPerfect) {
  const RingModel m = model_ring(plain(64, 10));  // slow kernel: every transfer hides
  EXPECT_TRUE(m.hidden);
  EXPECT_NEAR(m.efficiency, 1.0, 1e-12);
}

TEST(RingModel, ATransferLongerThanTheStepIsExposedOnEveryStepButTheFirst) {
  const int P = 8;
  RingModelInput in = plain(P, 4000);
  const RingModel m = model_ring(in);
  EXPECT_FALSE(m.hidden);
  EXPECT_NEAR(m.exposed_comm_seconds, (P - 1) * (m.step_transfer_seconds - m.step_compute_seconds), 1e-12);
  EXPECT_NEAR(m.seconds, m.compute_seconds + m.exposed_comm_seconds, 1e-12);
  // The overlap condition is where the step's work equals its transfer.
  in.tokens = std::int64_t(std::ceil(m.overlap_tokens_per_rank * 1.001)) * P;
  EXPECT_TRUE(model_ring(in).hidden);
  in.tokens = std::int64_t(m.overlap_tokens_per_rank * 0.999) * P;
  EXPECT_FALSE(model_ring(in).hidden);
}

TEST(RingModel, MergesAndStepOverheadsCostOnEveryStep) {
  const int P = 4;
  RingModelInput in = plain(P, 10);
  in.cluster.memory_bytes_per_second = 1e12;
  in.cluster.step_overhead_seconds = 1e-3;
  const RingModel m = model_ring(in);
  EXPECT_NEAR(m.overhead_seconds, (P - 1) * (m.step_merge_seconds + 1e-3), 1e-12);
  EXPECT_LT(m.efficiency, 1.0);
}

// Causal: zigzag gives every rank half of every block; contiguous shards leave the last rank its
// diagonal half-block and P - 1 full ones, against P / 2 blocks on average.
TEST(RingModel, ContiguousCausalShardsWaitOnTheLastRank) {
  for (int P : {2, 4, 8}) {
    RingModelInput in = plain(P, 10);
    in.causal = true;
    EXPECT_NEAR(model_ring(in).efficiency, 1.0, 1e-12) << P;
    in.zigzag = false;
    EXPECT_NEAR(model_ring(in).efficiency, (P / 2.0) / (P - 0.5), 1e-12) << P;
  }
}

TEST(RingModel, ARingOverNodesWaitsOnTheSlowLink) {
  RingModelInput in = plain(8, 4000);
  in.cluster.inter = Link{1e9, 20e-6};
  in.cluster.ranks_per_node = 8;
  const RingModel one_node = model_ring(in);
  in.cluster.ranks_per_node = 4;
  const RingModel two_nodes = model_ring(in);
  EXPECT_FALSE(one_node.crosses_nodes);
  EXPECT_TRUE(two_nodes.crosses_nodes);
  EXPECT_NEAR(two_nodes.step_transfer_seconds, in.cluster.inter.seconds(2.0 * 65536 * 8 * 128 * 2), 1e-12);
  EXPECT_GT(two_nodes.exposed_comm_seconds, one_node.exposed_comm_seconds);
}

TEST(RingModel, BackwardSendsGradientsBackAndTheLastHopIsExposed) {
  const int P = 4;
  RingModelInput in = plain(P, 10);
  in.backward_ratio = 2.5;
  in.grad_bytes_per_value = 4;
  const RingModel m = model_ring(in);
  const double shard = 2.0 * 65536 * 8 * 128;
  EXPECT_DOUBLE_EQ(m.bytes_per_rank, (P - 1) * shard * 2 * 2 + P * shard * 4);
  EXPECT_NEAR(m.exposed_comm_seconds, in.cluster.intra.seconds(shard * 4), 1e-12);  // the hop home
  EXPECT_NEAR(m.ideal_seconds, 3.5 * m.flops_per_rank / 10e12, 1e-12);
}

TEST(RingModel, SmallShardsRunBelowPeakInStrongScaling) {
  RingModelInput in = plain(1, 1);
  in.rate = KernelRate({{1024, 1e12}, {65536, 4e12}});
  in.tokens = 65536, in.ranks = 16, in.baseline_tokens = 65536;  // strong: against one rank at N
  const RingModel m = model_ring(in);
  EXPECT_NEAR(m.efficiency, in.rate.at(4096) / 4e12, 1e-9);  // the transfers hide; the kernel slows
}

// The published anchors, each with the parameters of its hardware (scaling_anchors.hpp).
TEST(ScalingAnchors, RingFlashAttentionWithinFivePoints) {
  for (const ScalingAnchor& a : scaling_anchors()) {
    if (a.name.rfind("ring-flash-attn", 0) != 0) continue;
    const RingModel m = model_ring(a.input);
    EXPECT_NEAR(m.efficiency, a.published_efficiency, 0.05) << a.name;
  }
}

// Meta's 93% is the whole 405B prefill's FLOP rate (GEMMs included) over a standalone attention
// kernel's (the paper's Appendix A); at 65K tokens per rank the attention ring has nothing left to
// lose under this model (every transfer hides, merges are a fraction of a percent), so it predicts
// 0.99: above the anchor by more than five points. The test pins that known gap so a change in the
// model shows.
TEST(ScalingAnchors, MetaMillionTokensIsAnUpperBound) {
  for (const ScalingAnchor& a : scaling_anchors()) {
    if (a.name != "meta-cp-1m") continue;
    const RingModel m = model_ring(a.input);
    EXPECT_TRUE(m.hidden);
    EXPECT_GT(m.efficiency, a.published_efficiency);
    EXPECT_LT(m.efficiency, a.published_efficiency + 0.07);
  }
}

}  // namespace
}  // namespace scaling
}  // namespace kattn
