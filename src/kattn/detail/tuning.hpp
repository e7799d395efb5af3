// Per-execution-space tuning in one place: micro-tile shape of the tile products, team size,
// and the scratch budget the automatic tile sizes aim for.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstddef>

#include "kattn/detail/simd.hpp"

namespace kattn {
namespace detail {

template <class ExecSpace>
constexpr bool is_host_space() {
  return Kokkos::SpaceAccessibility<ExecSpace, Kokkos::HostSpace>::accessible;
}

template <class ExecSpace, class T>
struct Tuning {
#if KATTN_HOST_SIMD
  static constexpr int simd_width = simd::width<T>();
#else
  static constexpr int simd_width = 1;
#endif
  static constexpr bool host = is_host_space<ExecSpace>();
  // Micro-tile of C = A B computed by one thread in registers: rows x cols, the columns being
  // query rows. On the host 8 rows by two vectors keep 16 accumulators, two B vectors and a
  // broadcast A value in the 32 vector registers: per step 16 FMAs against 2 vector loads and
  // 8 broadcasts (perf/bench_tile_gemm measures the shapes).
  static constexpr int micro_rows = host ? 8 : 4;
  static constexpr int micro_cols = host ? 2 * simd_width : 4;
  // On the host, full K/V tiles are read in place from the caller's arrays (their rows are
  // contiguous); devices copy every tile into scratch.
  static constexpr bool kv_in_place = host;
  // Teams of one thread on the host (each core runs whole tiles); a warp multiple on GPUs.
  static constexpr int team_size = host ? 1 : 128;
  // Bytes of scratch the automatic tile sizes aim for: what stays in a core's L2 on the host;
  // on GPUs the limit comes from the policy (about 40 KB of level 0 by default on CUDA).
  static constexpr std::size_t host_scratch_budget = 256 * 1024;
};

}  // namespace detail
}  // namespace kattn
