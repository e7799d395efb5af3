#include "machine.hpp"

#include "bandwidth.hpp"
#include "kattn/detail/simd.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace kattn {
namespace perf {
namespace {

template <class T>
double fma_peak() {
#if KATTN_HOST_SIMD
  // One register of the widest ISA compiled for (the library's SIMD width), and as many
  // independent chains as latency x throughput needs without spilling.
  constexpr int kBytes = detail::simd::kBytes;
  typedef T V __attribute__((vector_size(kBytes)));
  constexpr int W = kBytes / sizeof(T);
  constexpr int kAcc = detail::simd::kRegisters >= 32 ? 16 : 12;
  V acc[kAcc];
  V a, b;
  for (int i = 0; i < W; ++i) a[i] = T(1) + T(1e-7) * i, b[i] = T(1e-8);
  for (int r = 0; r < kAcc; ++r) acc[r] = b * T(r);
  const long iters = 50'000'000;
  double best = 1e30;
  for (int trial = 0; trial < 3; ++trial) {
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < iters; ++i) {
      for (int r = 0; r < kAcc; ++r) acc[r] = acc[r] * a + b;
      asm volatile("" : "+x"(a));  // keep the loop from being folded
    }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  T sink = 0;
  for (int r = 0; r < kAcc; ++r) sink += acc[r][0];
  asm volatile("" : : "x"(sink));
  return 2.0 * W * kAcc * iters / best / 1e9;
#else  // no host SIMD layer (a GPU compiler's device pass of this file, a device-shaped build)
  return 0;
#endif
}

std::size_t status_field(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) return std::stoull(line.substr(std::strlen(key))) * 1024;
  return 0;
}

}  // namespace

double fma_peak_gflops_float() { return fma_peak<float>(); }
double fma_peak_gflops_double() { return fma_peak<double>(); }

double stream_read_gbs(std::size_t bytes) {
  // The same pass as the multi-threaded ceiling (bandwidth.hpp's StreamSum: wide loads, eight
  // independent accumulators), on this thread alone.
  const std::size_t blocks = std::max<std::size_t>(1, bytes / sizeof(float) / StreamSum::kBlock);
  std::vector<float> a(blocks * StreamSum::kBlock, 1.0f);
  const StreamSum pass{a.data()};
  double best = 1e30, sink = 0;
  for (int trial = 0; trial < 5; ++trial) {
    const auto t0 = std::chrono::steady_clock::now();
    double sum = 0;
    for (std::size_t b = 0; b < blocks; ++b) pass(b, sum);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    sink += sum;
  }
  asm volatile("" : : "x"(sink));
  return double(a.size() * sizeof(float)) / best / 1e9;
}

double stream_read_streams_gbs(std::size_t bytes, int streams) {
#if KATTN_HOST_SIMD
  using V = detail::simd::vec<float>;
  constexpr int W = detail::simd::width<float>();
  constexpr int kAcc = 8;
  const std::size_t per = std::max<std::size_t>(kAcc * W, bytes / sizeof(float) / streams / (kAcc * W) * (kAcc * W));
  std::vector<float> a(per * streams, 1.0f);
  double best = 1e30, sink = 0;
  for (int trial = 0; trial < 5; ++trial) {
    const auto t0 = std::chrono::steady_clock::now();
    V acc[kAcc];
    for (int u = 0; u < kAcc; ++u) acc[u] = detail::simd::splat<float>(0.0f);
    for (std::size_t i = 0; i < per; i += kAcc * W)
      for (int s = 0; s < streams; ++s) {
        const float* p = a.data() + s * per + i;
        for (int u = 0; u < kAcc; ++u) acc[u] += detail::simd::load(p + u * W);
      }
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    for (int u = 0; u < kAcc; ++u) sink += acc[u][0];
  }
  asm volatile("" : : "x"(sink));
  return double(a.size() * sizeof(float)) / best / 1e9;
#else  // no host SIMD layer (a GPU compiler's device pass of this file, a device-shaped build)
  (void)bytes, (void)streams;
  return 0;
#endif
}

double stream_copy_gbs(std::size_t bytes) {
  std::vector<char> a(bytes, 1), b(bytes, 0);
  double best = 1e30;
  for (int trial = 0; trial < 5; ++trial) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(b.data(), a.data(), bytes);
    asm volatile("" : : "r"(b.data()) : "memory");
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * bytes / best / 1e9;
}

namespace {
double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }
}  // namespace

void LoopTimer::start() { t0_ = now(); }
double LoopTimer::seconds(long iterations) const { return (now() - t0_) / double(iterations > 0 ? iterations : 1); }

std::size_t reset_peak_memory() {
  std::ofstream("/proc/self/clear_refs") << "5";  // resets VmHWM to the current RSS
  return status_field("VmRSS:");
}

std::size_t peak_memory() { return status_field("VmHWM:"); }

double extra_memory_mb(std::size_t base) {
  const std::size_t peak = peak_memory();
  return peak > base ? double(peak - base) / 1e6 : 0.0;
}

}  // namespace perf
}  // namespace kattn
