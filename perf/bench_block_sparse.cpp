// Block-sparse forward time against mask density at long sequences (B = 1, one head): random
// block masks keeping a given fraction of blocks (and a local-band pattern), timed beside the
// dense tiled forward of the same shape in the same run. Counters: ratio = sparse / dense time,
// kept = the mask's density, overhead_ms = sparse time - kept x dense time (what does not shrink
// with the mask: the empty-mask run measures it directly).
#include <Kokkos_Core.hpp>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <ctime>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kattn/attention.hpp"
#include "machine.hpp"
#include "random_view.hpp"

namespace {

using kattn::perf::random_view;
using kattn::perf::View3;
using kattn::perf::View4;

// Dense seconds per (N, D, sizeof T), measured by BM_Dense, which is registered first.
std::map<std::pair<int, int>, double>& dense_seconds() {
  static std::map<std::pair<int, int>, double> m;
  return m;
}

kattn::BlockMask random_mask(std::int64_t block, int n, double density, unsigned seed) {
  const std::int64_t nb = (n + block - 1) / block;
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(0, 1);
  std::vector<std::uint8_t> dense(static_cast<std::size_t>(nb * nb));
  for (auto& x : dense) x = u(gen) < density ? 1 : 0;
  return kattn::BlockMask::from_dense(block, 1, nb, nb, dense);
}

// per_mille >= 0: a random mask keeping that fraction of blocks; -W: the pattern local:W.
kattn::BlockMask make_mask(std::int64_t block, int n, std::int64_t per_mille) {
  if (per_mille >= 0) return random_mask(block, n, per_mille / 1000.0, 7);
  return kattn::make_block_mask(kattn::parse_block_pattern("local:" + std::to_string(-per_mille)), block, n, n);
}

template <class T>
struct Inputs {
  View4<T> q, k, v, o;
  View3<T> lse;
  Inputs(int n, int d)
      : q(random_view<T>("q", n, d, 1)),
        k(random_view<T>("k", n, d, 2)),
        v(random_view<T>("v", n, d, 3)),
        o("o", 1, n, 1, d),
        lse("lse", 1, 1, n) {}
};

// The tiled forward (one split, no merge), under the mask when one is given.
kattn::Options tiled_forward(const kattn::BlockMask* mask = nullptr) {
  kattn::Options o;
  o.splits = 1;
  o.block_mask = mask;
  return o;
}

template <class T>
void BM_Dense(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), d = static_cast<int>(state.range(1));
  Inputs<T> in(n, d);
  const Kokkos::DefaultExecutionSpace space;
  kattn::perf::LoopTimer timer;
  timer.start();
  for (auto _ : state) {
    kattn::attention(space, in.q, kattn::kv::dense(in.k, in.v), in.o, in.lse, tiled_forward());
    space.fence();
  }
  const double s = timer.seconds(state.iterations());
  dense_seconds()[{n, d * int(sizeof(T))}] = s;
  state.counters["GFLOP/s"] = 4.0 * n * double(n) * d / s / 1e9;
}

// range(2): density in per mille of blocks (random mask), or -W: the pattern local:W.
template <class T>
void BM_BlockSparse(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), d = static_cast<int>(state.range(1));
  const std::int64_t per_mille = state.range(2), block = state.range(3);
  Inputs<T> in(n, d);
  const kattn::BlockMask mask = make_mask(block, n, per_mille);
  const Kokkos::DefaultExecutionSpace space;
  kattn::perf::LoopTimer timer;
  timer.start();
  for (auto _ : state) {
    kattn::attention(space, in.q, kattn::kv::dense(in.k, in.v), in.o, in.lse, tiled_forward(&mask));
    space.fence();
  }
  const double s = timer.seconds(state.iterations());
  const double kept = mask.density();
  state.counters["kept"] = kept;
  state.counters["GFLOP/s"] = 4.0 * n * double(n) * d * kept / s / 1e9;
  const auto it = dense_seconds().find({n, d * int(sizeof(T))});
  if (it != dense_seconds().end()) {
    state.counters["ratio"] = s / it->second;
    state.counters["overhead_ms"] = (s - kept * it->second) * 1e3;
  }
}

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

constexpr int kPairs = 5;

// range(2): density in per mille of blocks (or -W: local:W); range(3): mask block.
template <class T>
void BM_Ratio(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), d = static_cast<int>(state.range(1));
  const std::int64_t per_mille = state.range(2), block = state.range(3);
  Inputs<T> in(n, d);
  const kattn::BlockMask mask = make_mask(block, n, per_mille);
  const Kokkos::DefaultExecutionSpace space;
  std::vector<double> dense, sparse, ratio;
  for (auto _ : state) {
    for (int r = 0; r < kPairs; ++r) {
      double t0 = cpu_seconds();
      kattn::attention(space, in.q, kattn::kv::dense(in.k, in.v), in.o, in.lse, tiled_forward());
      space.fence();
      dense.push_back(cpu_seconds() - t0);
      t0 = cpu_seconds();
      kattn::attention(space, in.q, kattn::kv::dense(in.k, in.v), in.o, in.lse, tiled_forward(&mask));
      space.fence();
      sparse.push_back(cpu_seconds() - t0);
      ratio.push_back(sparse.back() / dense.back());
    }
  }
  std::sort(ratio.begin(), ratio.end());
  const double dmin = *std::min_element(dense.begin(), dense.end());
  const double smin = *std::min_element(sparse.begin(), sparse.end());
  state.counters["kept"] = mask.density();
  state.counters["ratio_median"] = ratio[ratio.size() / 2];
  state.counters["ratio_min"] = smin / dmin;
  state.counters["dense_ms"] = dmin * 1e3;
  state.counters["sparse_ms"] = smin * 1e3;
  state.counters["overhead_ms"] = (smin - mask.density() * dmin) * 1e3;
}

void dense_shapes(benchmark::internal::Benchmark* b) {
  for (int d : {64, 128}) b->Args({16384, d});
  b->ArgNames({"N", "D"})->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5);
}

void sparse_shapes(benchmark::internal::Benchmark* b) {
  for (int d : {64, 128}) {
    for (int block : {64, 128})
      for (int per_mille : {0, 50, 100, 200, 500, 1000}) b->Args({16384, d, per_mille, block});
    b->Args({16384, d, -6, 128});  // local:6: 13 of 128 blocks per row, 9.9% kept
  }
  b->ArgNames({"N", "D", "per_mille", "block"})->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5);
}

void ratio_shapes(benchmark::internal::Benchmark* b) {
  for (int d : {64, 128})
    for (int block : {128, 64}) {
      for (int per_mille : {0, 50, 100, 200, 500, 1000}) b->Args({16384, d, per_mille, block});
      b->Args({16384, d, block == 128 ? -6 : -12, block});  // a band keeping 9.9% of the blocks
    }
  b->ArgNames({"N", "D", "per_mille", "block"})->Unit(benchmark::kMillisecond)->Iterations(1);
}

// Registration order is run order: the dense baselines first.
BENCHMARK_TEMPLATE(BM_Dense, float)->Apply(dense_shapes);
BENCHMARK_TEMPLATE(BM_BlockSparse, float)->Apply(sparse_shapes);
BENCHMARK_TEMPLATE(BM_Ratio, float)->Apply(ratio_shapes);

}  // namespace
