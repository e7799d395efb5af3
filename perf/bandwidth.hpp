// Streaming read bandwidth of the execution space's threads together (all cores the run uses),
// measured in the same run as the kernels it judges: the ceiling of a memory-bound kernel such as
// decode. Each thread sums contiguous 16 KB blocks with eight independent vector accumulators, so
// the loop is limited by memory, not by add latency (a scalar sum reaches about 8 bytes a cycle).
#pragma once

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <ctime>

#include "kattn/detail/simd.hpp"

namespace kattn {
namespace perf {

struct StreamSum {
  static constexpr std::size_t kBlock = 4096;  // floats per work item
  const float* a;
  KOKKOS_INLINE_FUNCTION void operator()(const std::size_t blk, double& sum) const {
    const float* p = a + blk * kBlock;
#if KATTN_HOST_SIMD
    using V = detail::simd::vec<float>;
    constexpr int W = detail::simd::width<float>();
    V acc[8];
    for (int i = 0; i < 8; ++i) acc[i] = detail::simd::splat<float>(0.0f);
    for (std::size_t i = 0; i < kBlock; i += 8 * W)
      for (int u = 0; u < 8; ++u) acc[u] += detail::simd::load(p + i + u * W);
    for (int u = 1; u < 8; ++u) acc[0] += acc[u];
    float s = 0;
    for (int i = 0; i < W; ++i) s += acc[0][i];
    sum += s;
#else
    float s = 0;
    for (std::size_t i = 0; i < kBlock; ++i) s += p[i];
    sum += s;
#endif
  }
};

// Seconds of CPU time the process has used (all threads).
inline double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

struct StreamRate {
  double wall_gbs = 0;  // bytes / best wall time
  double cpu_gbs = 0;   // bytes / best (CPU time / threads): what the threads reach while they run
};

// A buffer of `bytes` (filled by the space's threads, which touch its pages first) and one
// streaming read of it: the same pass as stream_read_rate, for measurements that pair it with a
// kernel reading as many bytes.
template <class ExecSpace>
class StreamBuffer {
 public:
  StreamBuffer(const ExecSpace& space, double bytes)
      : space_(space),
        blocks_(std::max<std::size_t>(1, static_cast<std::size_t>(bytes) / sizeof(float) / StreamSum::kBlock)),
        a_(Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "kattn::perf::stream"), blocks_ * StreamSum::kBlock) {
    Kokkos::deep_copy(space, a_, 1.0f);
    space.fence();
  }
  double pass() {
    double sum = 0;
    Kokkos::parallel_reduce("kattn::perf::stream_read", Kokkos::RangePolicy<ExecSpace>(space_, 0, blocks_),
                            StreamSum{a_.data()}, sum);
    space_.fence();
    return sum;
  }
  double bytes() const { return double(blocks_ * StreamSum::kBlock * sizeof(float)); }

 private:
  ExecSpace space_;
  std::size_t blocks_;
  Kokkos::View<float*, typename ExecSpace::memory_space> a_;
};

// GB/s (10^9 bytes) reading `bytes` (far more than the last-level cache), best of `trials`.
template <class ExecSpace>
StreamRate stream_read_rate(const ExecSpace& space, std::size_t bytes, int trials = 4) {
  StreamBuffer<ExecSpace> buffer(space, double(bytes));
  double best = 1e30, best_cpu = 1e30, total = 0;
  const int threads = space.concurrency();
  for (int t = 0; t < trials; ++t) {
    const double c0 = process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    total += buffer.pass();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    best_cpu = std::min(best_cpu, (process_cpu_seconds() - c0) / threads);
  }
  if (total < 0) best *= 2;  // keeps the sums alive
  return {buffer.bytes() / best / 1e9, buffer.bytes() / best_cpu / 1e9};
}

template <class ExecSpace>
double stream_read_gbs(const ExecSpace& space, std::size_t bytes, int trials = 4) {
  return stream_read_rate(space, bytes, trials).wall_gbs;
}

}  // namespace perf
}  // namespace kattn
