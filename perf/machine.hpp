// The machine's own ceilings, measured in the same run as the kernels they judge, and the
// process's peak memory. Shared by every benchmark suite.
#pragma once

#include <cstddef>

namespace kattn {
namespace perf {

// FMA-bound loop on one core: independent accumulators, full-width vectors. GFLOP/s.
double fma_peak_gflops_float();
double fma_peak_gflops_double();
// Streaming read (sum of a large array: wide loads, independent accumulators, one thread) and copy,
// GB/s counting bytes read (+ written for copy).
double stream_read_gbs(std::size_t bytes);
// The same read cut into `streams` equal parts read side by side (a vector from each in turn),
// for the ceiling's sake: whether more concurrent streams read faster than one.
double stream_read_streams_gbs(std::size_t bytes, int streams);
double stream_copy_gbs(std::size_t bytes);

// Seconds per iteration of a timed Google Benchmark loop: call start() before the loop and
// seconds(state) after it.
class LoopTimer {
 public:
  void start();
  double seconds(long iterations) const;

 private:
  double t0_ = 0;
};

// Resets the kernel's peak-RSS counter (VmHWM) and returns the current RSS in bytes.
std::size_t reset_peak_memory();
// Peak RSS since the last reset, in bytes.
std::size_t peak_memory();
// Peak RSS above `base` (from reset_peak_memory) in MB; 0 when the peak reads below the base
// (Linux updates RSS counters per thread in batches, so the two can disagree by a few pages).
double extra_memory_mb(std::size_t base);

}  // namespace perf
}  // namespace kattn
