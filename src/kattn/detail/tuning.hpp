// Per-execution-space tuning in one place: micro-tile shape of the tile products, team size,
// and the scratch budget the automatic tile sizes aim for.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstddef>

#include "kattn/detail/host_cache.hpp"
#include "kattn/detail/simd.hpp"
#include "kattn/detail/tile_geometry.hpp"

namespace kattn {
namespace detail {

template <class ExecSpace>
constexpr bool is_host_space() {
  return Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible;
}

// CUDA's default level-0 scratch per team (Kokkos::Cuda's scratch_size_max(0)): what the tiles of
// a device-shaped host build must fit, as on the GPU.
constexpr std::size_t kCudaLevel0Bytes = 40936;

// Threads of a team on GPUs (four warps, two AMD wavefronts).
constexpr int kGpuTeamThreads = 128;

template <class ExecSpace, class T>
struct Tuning {
  // Host tuning: a host execution space, unless the build is device-shaped (config.hpp), where
  // host spaces take every device choice below.
  static constexpr bool host = is_host_space<ExecSpace>() && !KATTN_DEVICE_SHAPED_HOST;
#if KATTN_HOST_SIMD
  static constexpr int simd_width = host ? simd::width<T>() : 1;
  static constexpr int vector_registers = host ? simd::kRegisters : 0;
#else
  static constexpr int simd_width = 1;
  static constexpr int vector_registers = 0;
#endif
  // Micro-tile of C = A B computed by one thread in registers: rows x cols, the columns being
  // query rows. On the host 8 rows by two vectors keep 16 accumulators, two B vectors and a
  // broadcast A value in the 32 vector registers: per step 16 FMAs against 2 vector loads and
  // 8 broadcasts (perf/bench_tile_gemm measures the shapes). With 16 registers (AVX2) 4 rows:
  // 8 accumulators, 2 B vectors and a broadcast, no spill (the backward's query pass; the other
  // products take the two shapes below).
  static constexpr int micro_rows = host ? (vector_registers >= 32 ? 8 : 4) : 4;
  static constexpr int micro_cols = host ? 2 * simd_width : 4;
  // With 16 vector registers (AVX2) 4 x 2 vectors leave 8 chains of FMAs, barely enough to cover
  // the FMA latency on two pipes; two other shapes fill the 16 registers with 12 accumulators:
  // 4 rows x 3 vectors (3 B vectors and the broadcast) for the products whose lanes can be padded
  // to 3 vectors (query rows, keys), 6 rows x 2 vectors for those with the head dim on the lanes
  // (64 or 128 is no multiple of 3 vectors). Tile products on Zen 3: 0.68-0.78 of the FMA peak with
  // 4 x 2, 0.84-0.92 with 6 x 2, 0.88-0.94 with 4 x 3 (perf/RESULTS.md). Elsewhere both are the
  // plain shape.
  static constexpr bool sixteen_registers = host && simd_width > 1 && vector_registers == 16;
  static constexpr int wide_micro_cols = sixteen_registers ? 3 * simd_width : micro_cols;
  static constexpr int tall_micro_rows = sixteen_registers ? 6 : micro_rows;
  // On the host, full K/V tiles are read in place from the caller's arrays (their rows are
  // contiguous); devices copy every tile into scratch.
  static constexpr bool kv_in_place = host;
  // Teams of one thread on the host (each core runs whole tiles); a warp multiple on GPUs; a
  // device-shaped host build asks for KATTN_DEVICE_SHAPED_TEAM_SIZE (team_policy() caps it).
  static constexpr int team_size =
      host ? 1 : (is_host_space<ExecSpace>() ? KATTN_DEVICE_SHAPED_TEAM_SIZE : kGpuTeamThreads);
  // Bytes of scratch the automatic tile sizes aim for: what stays in a core's L2 on the host, as
  // many values in double as in float (512 KB, 128 query rows x 64 keys at D = 128 instead of
  // 32 x 64: the per-tile softmax and rescaling amortised over 4x the rows, 0.50 -> 0.64 of the
  // fp64 FMA peak on Zen 4, perf/RESULTS.md); on GPUs the tiles take the caps below, in level-1
  // scratch where level 0 (about 40 KB by default on CUDA) is too small for them.
  static constexpr std::size_t host_scratch_budget = 256 * 1024 / sizeof(float) * sizeof(T);
  // Largest automatic forward tiles, query rows x keys: the start of the host's halving (128 x 128
  // in float with AVX-512; 72 x 64 with AVX2: whole 3-vector micro-tiles of rows), the caps of the
  // devices' search (tile_search.hpp). On an H200 (Kokkos 4.6 CUDA, N = 4096, D = 128) the tiles
  // that fit level 0 (20 x 16 in float, 8 x 8 in double) ran at 1.6 and 0.26 TFLOP/s, the fastest
  // of a sweep in level 1 at 2.65 (64 x 64, float) and 1.97 (128 x 64, double): perf/RESULTS.md.
  static constexpr int forward_block_q =
      host ? round_up(16 * micro_rows, wide_micro_cols) : (sizeof(T) == 8 ? 128 : 64);
  static constexpr int forward_block_k = host ? 4 * micro_cols : 64;
  // The bf16 pair kernels (pair_column_tiles.hpp) start from twice the keys per tile: their K, V
  // and P take half float's bytes, and the longer tiles spread the per-tile softmax and rescaling
  // (Zen 4, N = 4096: 128 x 256 against 128 x 128, 2-3% at D = 64 and 128, perf/RESULTS.md).
  static constexpr int pair_key_factor = 2;
  // Backward (backward_plan.hpp): starting tile sizes, query rows x keys, before they are fitted
  // to the scratch budget. The key pass keeps K^T, V^T, K, dK, dV, Q, dO and two score tiles in
  // scratch: 576 KB at 128 x 128, D = 128, float, inside a 1 MB L2; 128 x 128 was the fastest
  // or within noise of it among 64..256 x 64..256, 7 to 12% faster than 64 x 64 at N = 4096,
  // D = 64 and 128 (perf/RESULTS.md, bench_backward BackwardTiles). With AVX2's 3-vector key
  // lanes, 120 x 120: whole micro-tiles (128 would pad the keys to 144). Then the number of teams
  // the key-chunk dQ strategy aims for, and the most chunks it uses (each chunk holds a partial
  // dQ: chunks x N x D extra memory). Devices: 64 x 64, in level 1 where level 0 is too small: 2.7x
  // (float) and 9x (double) the level-0 tiles on the H200 (perf/RESULTS.md).
  static constexpr int backward_block_q = host ? round_down(128, wide_micro_cols) : 64;
  static constexpr int backward_block_k = host ? round_down(128, wide_micro_cols) : 64;
  static constexpr std::size_t backward_host_scratch_budget = 768 * 1024;
  static constexpr int backward_target_teams = 16;
  static constexpr int backward_max_dq_chunks = 8;

  // Row tiles (row_tiles.hpp): tiles of at most this many query rows (decode: one
  // position times the GQA group) put the vector lanes on the head dim instead of the rows,
  // where the transposed tiles above would leave most lanes idle (a group of 8 fills a quarter
  // of a 32-float micro-tile, a single head 1/32). 0 = never (devices, whose threads are the
  // lanes). perf/bench_decode measures both sides of the choice.
  static constexpr int row_tile_max_rows = host ? 16 : 0;
  // KV heads per row-tile team: all of a sequence's on the host, so that a team reads each key's
  // K and V rows of every head together, in order (see row_tiles.hpp), as long as their
  // Q and O fit this budget; one on devices.
  static constexpr bool row_tile_pack_heads = host;
  static constexpr std::size_t row_tile_head_budget = 256 * 1024;
  // K + V bytes of one key tile (all heads of the team) when the options leave block_k at 0:
  // enough keys to amortise the per-tile softmax bookkeeping, few enough that the tile and the
  // next one, prefetched, stay well inside L2. An eighth of the core's L2 was the fastest of a
  // sweep on two cores: 256 KB of a 2 MB L2 (Emerald Rapids: 32 keys at 8 heads x D = 128 in
  // float) and 64 KB of a 512 KB one (Zen 3: 8 keys); perf/RESULTS.md.
  static std::size_t row_tile_kv_bytes() { return host_l2_bytes() / 8; }
  static constexpr int row_tile_max_keys = 256;
  // Software prefetch of the next key tile's K and V rows while the current one is folded: a
  // decode reads each row once, scattered (one KV head's rows are head_dim apart in a
  // [seq, heads, dim] cache, pages anywhere), which the hardware prefetchers follow poorly.
  static constexpr bool row_tile_prefetch = host;
  // How far ahead the pair order of one-row-per-head decode prefetches (row_tile_products.hpp), at most
  // one tile: 64 KB (Zen 4, paired: 0.79-0.84 of the stream against 0.71-0.75 at 32 KB; 32 KB had
  // been the best of one run on Emerald Rapids against 8 KB and a whole 128 KB tile).
  static constexpr std::size_t row_tile_prefetch_bytes = 64 * 1024;
};

// The team policy of the tiled kernels. Scheduled dynamically: under a causal mask or a window
// the teams' work differs (the last query tiles see the most keys, the first key tiles the most
// queries), and a static schedule hands each host thread one contiguous range of the league, so
// one thread gets most of the work. With work stealing the threads finish together. (GPUs schedule
// blocks as they free up either way.) The launch bound is the GPU team size: without it Kokkos
// compiles HIP kernels for 1024-thread blocks, which caps a thread at 128 VGPRs and spills the
// tile kernels; host backends ignore it. The member type is that of the plain policy.
template <class ExecSpace>
using TilePolicy =
    Kokkos::TeamPolicy<ExecSpace, Kokkos::Schedule<Kokkos::Dynamic>, Kokkos::LaunchBounds<kGpuTeamThreads, 1>>;

// A tiled kernel's policy: the tuning's team size, capped at what the space runs for this functor
// (one thread on Serial, the thread pool on OpenMP, the register file on GPUs).
template <class ExecSpace, class T, class Functor>
TilePolicy<ExecSpace> team_policy(const ExecSpace& space, int league_size, const Functor& kern) {
  const TilePolicy<ExecSpace> probe(space, league_size, 1);
  const int max = probe.team_size_max(kern, Kokkos::ParallelForTag());
  const int want = Tuning<ExecSpace, T>::team_size;
  return TilePolicy<ExecSpace>(space, league_size, want < max ? want : max);
}

// Level-0 scratch a team of this space has, and level 1; a device-shaped host build caps level 0
// at CUDA's default.
template <class ExecSpace>
std::size_t scratch_limit(const ExecSpace& space, int level) {
  Kokkos::TeamPolicy<ExecSpace> policy(space, 1, Kokkos::AUTO);
  const std::size_t limit = static_cast<std::size_t>(policy.scratch_size_max(level));
  if (KATTN_DEVICE_SHAPED_HOST && level == 0 && is_host_space<ExecSpace>() && limit > kCudaLevel0Bytes)
    return kCudaLevel0Bytes;
  return limit;
}

}  // namespace detail
}  // namespace kattn
