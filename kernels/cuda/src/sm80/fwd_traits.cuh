// Tile shapes of the sm80 (mma.sync) forward kernel, per head dim.
//   4 warps, 16 query rows each (kBlockM = 64); K/V double-buffered through cp.async.
//   Shared memory rows are D elements; 16-byte chunk c of row r is stored at chunk
//   c ^ (r % 8): the 8 row addresses of one ldmatrix phase then hit 8 different 16-byte
//   bank groups (conflict-free), for any D >= 64.
#pragma once

namespace kattn::cuda::detail {

template <int D>
struct Sm80FwdTraits {
  static_assert(D == 64 || D == 128 || D == 256, "head dim");
  static constexpr int kHeadDim = D;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = kWarps * 32;
  static constexpr int kBlockM = 16 * kWarps;
  static constexpr int kBlockN = D <= 128 ? 64 : 32;  // D=256: keep S + O under ~200 registers
  static constexpr int kChunks = D / 8;               // 16-byte chunks per row
  static constexpr int kStages = 2;
  static constexpr int kSmemQ = kBlockM * D;  // elements
  static constexpr int kSmemKV = kBlockN * D;
  static constexpr int kSmemBytes = (kSmemQ + 2 * kStages * kSmemKV) * 2;
};

__device__ __forceinline__ int swz_offset(int row, int chunk, int d) { return row * d + ((chunk ^ (row & 7)) << 3); }

}  // namespace kattn::cuda::detail
