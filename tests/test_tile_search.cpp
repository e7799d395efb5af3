// The automatic tile rule (tile_search.hpp) on the geometries the GPU kernels use: 4 x 4 micro-tiles,
// CUDA's level-0 scratch under Kokkos 4.6 (40,936 bytes) and with Hopper's opt-in shared memory
// (227 KB less Kokkos' reserve). Pure arithmetic: runs in every build.
#include <gtest/gtest.h>

#include <cstddef>
#include <vector>

#include "kattn/detail/backward_plan.hpp"
#include "kattn/detail/tile_search.hpp"

namespace {

using kattn::detail::BackwardGeometry;
using kattn::detail::fit_tiles;
using kattn::detail::TileGeometry;
using kattn::detail::TileSearch;
using kattn::detail::TileSize;

constexpr int kMicro = 4;  // the device micro-tile (tuning.hpp)
constexpr std::size_t kCuda46 = 40936;
constexpr std::size_t kHopperOptIn = 232448 - 8216;

TileSearch device_search(int cap_q, int cap_k) {
  TileSearch s;
  s.start_q = cap_q;
  s.start_k = cap_k;
  s.step_q = s.step_k = kMicro;
  s.largest_area = true;
  return s;
}

struct ForwardBytes {
  int head_dim;
  std::size_t value_bytes;
  std::size_t operator()(int q, int k) const {
    return TileGeometry::make(q, k, head_dim, kMicro, kMicro).scratch_elements() * value_bytes;
  }
};

// The deterministic device backward (query-pass dQ): the larger of its two passes.
struct BackwardBytes {
  int head_dim;
  std::size_t value_bytes;
  std::size_t operator()(int q, int k) const {
    const BackwardGeometry g =
        BackwardGeometry::make(q, k, head_dim, kattn::detail::BackwardMicroTiles{kMicro, kMicro, kMicro, kMicro});
    return std::max(g.key_pass_elements(false, false), g.query_pass_elements()) * value_bytes;
  }
};

// Fits, and no tile of larger area within the caps fits.
template <class Bytes>
void expect_largest(const Bytes& bytes, std::size_t budget, const TileSearch& s, const TileSize& t) {
  ASSERT_LE(bytes(t.block_q, t.block_k), budget);
  for (int q = kMicro; q <= s.start_q; q += kMicro)
    for (int k = kMicro; k <= s.start_k; k += kMicro)
      if (long(q) * k > long(t.block_q) * t.block_k) {
        EXPECT_GT(bytes(q, k), budget) << q << " x " << k << " fits and is larger than " << t.block_q << " x "
                                       << t.block_k;
      }
}

TEST(TileSearch, DeviceForwardTilesAreTheLargestThatFit) {
  for (std::size_t budget : {kCuda46, kHopperOptIn})
    for (std::size_t value_bytes : {4, 8})
      for (int d : {16, 64, 72, 128, 256}) {
        const ForwardBytes bytes{d, value_bytes};
        const TileSearch s = device_search(128, 64);
        expect_largest(bytes, budget, s, fit_tiles(bytes, budget, s));
      }
}

TEST(TileSearch, DeviceBackwardTilesAreTheLargestThatFit) {
  for (std::size_t budget : {kCuda46, kHopperOptIn})
    for (std::size_t value_bytes : {4, 8})
      for (int d : {16, 64, 128}) {
        const BackwardBytes bytes{d, value_bytes};
        const TileSearch s = device_search(64, 64);
        expect_largest(bytes, budget, s, fit_tiles(bytes, budget, s));
      }
}

// The table docs/gpu.md quotes ("GPU tiles"): at D = 128 under Kokkos 4.6's 40 KB, the forward gets
// 20 x 16 in float (halving gave 16 x 16) and the backward 20 x 8 (8 x 8); with the opt-in 227 KB
// the forward reaches 120 x 64 and the backward 64 x 60.
TEST(TileSearch, DeviceTableAtHeadDim128) {
  const auto fwd = [](std::size_t budget, std::size_t vb) {
    return fit_tiles(ForwardBytes{128, vb}, budget, device_search(128, 64));
  };
  const auto bwd = [](std::size_t budget, std::size_t vb) {
    return fit_tiles(BackwardBytes{128, vb}, budget, device_search(64, 64));
  };
  const std::vector<std::pair<TileSize, TileSize>> got = {
      {fwd(kCuda46, 4), TileSize{20, 16}}, {fwd(kCuda46, 8), TileSize{8, 8}},
      {bwd(kCuda46, 4), TileSize{20, 8}},  {bwd(kCuda46, 8), TileSize{8, 4}},
      {fwd(kHopperOptIn, 4), TileSize{120, 64}}, {fwd(kHopperOptIn, 8), TileSize{48, 48}},
      {bwd(kHopperOptIn, 4), TileSize{64, 60}},  {bwd(kHopperOptIn, 8), TileSize{36, 32}}};
  for (const auto& [t, want] : got) {
    EXPECT_EQ(t.block_q, want.block_q);
    EXPECT_EQ(t.block_k, want.block_k);
  }
}

TEST(TileSearch, FixedSidesAreKeptAndNothingFittingGivesTheSmallest) {
  const ForwardBytes bytes{128, 4};
  TileSearch s = device_search(128, 64);
  s.fixed_k = 12;
  const TileSize t = fit_tiles(bytes, kCuda46, s);
  EXPECT_EQ(t.block_k, 12);
  EXPECT_LE(bytes(t.block_q, 12), kCuda46);
  EXPECT_GT(bytes(t.block_q + kMicro, 12), kCuda46);
  const TileSize none = fit_tiles(bytes, 100, device_search(128, 64));
  EXPECT_EQ(none.block_q, kMicro);
  EXPECT_EQ(none.block_k, kMicro);
}

// Hosts halve the larger side from the start (the CPU-measured shapes): 128 x 128 in float at
// D = 128 with 8 x 32 micro-tiles and a 256 KB budget gives 64 x 128.
TEST(TileSearch, HostHalvesTheLargerSide) {
  const auto bytes = [](int q, int k) { return TileGeometry::make(q, k, 128, 8, 32).scratch_elements() * 4; };
  TileSearch s;
  s.start_q = s.start_k = 128;
  s.step_q = 8;
  s.step_k = 32;
  const TileSize t = fit_tiles(bytes, 256 * 1024, s);
  EXPECT_EQ(t.block_q, 64);
  EXPECT_EQ(t.block_k, 128);
}

}  // namespace
