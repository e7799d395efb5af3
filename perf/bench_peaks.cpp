// The machine's ceilings as benchmarks of their own (the other suites measure them again in
// the same run and report fractions of them).
#include <benchmark/benchmark.h>

#include "machine.hpp"

namespace {

void BM_FmaPeakFloat(benchmark::State& state) {
  double g = 0;
  for (auto _ : state) g = kattn::perf::fma_peak_gflops_float();
  state.counters["GFLOP/s"] = g;
}
void BM_FmaPeakDouble(benchmark::State& state) {
  double g = 0;
  for (auto _ : state) g = kattn::perf::fma_peak_gflops_double();
  state.counters["GFLOP/s"] = g;
}
void BM_StreamRead(benchmark::State& state) {
  double g = 0;
  for (auto _ : state) g = kattn::perf::stream_read_gbs(std::size_t(state.range(0)) << 20);
  state.counters["GB/s"] = g;
}
void BM_StreamReadStreams(benchmark::State& state) {
  double g = 0;
  for (auto _ : state)
    g = kattn::perf::stream_read_streams_gbs(std::size_t(1024) << 20, static_cast<int>(state.range(0)));
  state.counters["GB/s"] = g;
}
void BM_StreamCopy(benchmark::State& state) {
  double g = 0;
  for (auto _ : state) g = kattn::perf::stream_copy_gbs(std::size_t(state.range(0)) << 20);
  state.counters["GB/s"] = g;
}

BENCHMARK(BM_FmaPeakFloat)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FmaPeakDouble)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StreamRead)->Arg(1024)->Iterations(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StreamReadStreams)
    ->ArgName("streams")
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->Arg(8)
    ->Iterations(1)
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_StreamCopy)->Arg(1024)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
