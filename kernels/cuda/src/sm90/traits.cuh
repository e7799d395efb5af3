// Tile shapes, shared-memory plan and warp roles of the sm90 forward kernel.
//
// CTA: 3 warpgroups (384 threads). Warpgroup 0 = producer (one thread issues TMA copies,
// registers lowered to kProducerRegs); warpgroups 1 and 2 = consumers, each owning 64 of the
// kBlockM = 128 query rows of the tile (wgmma M = 64), registers raised to kConsumerRegs:
// 128 * 24 + 256 * 240 = 64512 <= 65536.
// Shared memory (1024-B aligned): Q [D/64 regions][128 rows][128 B], then kStages K and V
// stages of [D/64 regions][kBlockN rows][128 B] each, all in TMA's 128-byte swizzle, then
// the mbarriers.
#pragma once

namespace kattn::cuda::detail::sm90 {

template <int D, int BlockN, int Stages, bool PingPong>
struct FwdTraits {
  static_assert(D == 64 || D == 128 || D == 256, "head dim");
  static_assert(BlockN % 16 == 0 && BlockN <= 256, "key tile");
  static constexpr int kHeadDim = D;
  static constexpr int kBlockM = 128;
  static constexpr int kBlockN = BlockN;
  static constexpr int kStages = Stages;
  static constexpr bool kPingPong = PingPong;
  static constexpr int kThreads = 384;
  static constexpr int kProducerRegs = 24;
  static constexpr int kConsumerRegs = 240;
  static constexpr int kRegions = D / 64;  // 64-column (128-byte) regions per row
  static constexpr int kQRegionBytes = kBlockM * 128;
  static constexpr int kKVRegionBytes = kBlockN * 128;
  static constexpr int kQBytes = kRegions * kQRegionBytes;
  static constexpr int kKVStageBytes = kRegions * kKVRegionBytes;
  static constexpr int kOffK = kQBytes;
  static constexpr int kOffV = kOffK + kStages * kKVStageBytes;
  static constexpr int kOffBar = kOffV + kStages * kKVStageBytes;
  static constexpr int kNumBars = 1 + 4 * kStages;  // Q, fullK, fullV, emptyK, emptyV
  static constexpr int kSmemBytes = kOffBar + 8 * kNumBars + 1024;  // + alignment slack
  static_assert(kSmemBytes <= 227 * 1024, "shared memory plan exceeds the sm_90 limit");
  static_assert(kKVRegionBytes % 1024 == 0 && kQRegionBytes % 1024 == 0, "swizzle atoms must stay 1024-B aligned");
  // Named barriers (0 is __syncthreads'): scheduler barriers of consumers 0/1, epilogue.
  static constexpr int kBarSched0 = 1;
  static constexpr int kBarEpilogue0 = 3;
};

}  // namespace kattn::cuda::detail::sm90
