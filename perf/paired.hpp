// Paired timing in one run, for ratios that a shared, noisy machine cannot skew: each iteration
// times run_a, then run_b (after one warm-up call of each); the sorted ratios time(b) / time(a) and
// the sorted times of b.
#pragma once

#include <Kokkos_Core.hpp>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace kattn {
namespace perf {

struct Paired {
  std::vector<double> ratio, tb;
  double median_ratio() const { return ratio[ratio.size() / 2]; }
};

template <class RunA, class RunB>
Paired paired(benchmark::State& state, const RunA& run_a, const RunB& run_b) {
  const Kokkos::DefaultExecutionSpace space;
  const auto seconds = [&](const auto& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    space.fence();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  seconds(run_a), seconds(run_b);  // warm-up
  Paired p;
  for (auto _ : state) {
    const double ta = seconds(run_a);
    p.tb.push_back(seconds(run_b));
    p.ratio.push_back(p.tb.back() / ta);
  }
  std::sort(p.ratio.begin(), p.ratio.end());
  std::sort(p.tb.begin(), p.tb.end());
  return p;
}

}  // namespace perf
}  // namespace kattn
