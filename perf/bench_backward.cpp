// Tiled backward against the textbook backward (S, P, dP, dS materialised), B = 1, one head.
// GFLOP/s counts 2.5x the forward's 4 N^2 D (halved for causal): the five tile products of
// FlashAttention-2's backward (S, dP, dV, dK, dQ) against the forward's two. The forward is timed
// in the same benchmark on the same inputs, so bwd/fwd is a ratio measured side by side; the
// fraction of this core's FMA peak (measured in the same run) and the extra memory (peak RSS
// above the inputs and outputs) are reported too. bwd/fwd_cpu is the same ratio in process CPU
// time, which other processes on a shared machine do not inflate.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <Kokkos_Core.hpp>
#include <Kokkos_Random.hpp>
#include <algorithm>
#include <chrono>
#include <ctime>
#include <string>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/backward.hpp"
#include "kattn/core/alibi.hpp"
#include "kattn/reference_backward.hpp"
#include "kattn/score_bias.hpp"
#include "kattn/workspace.hpp"
#include "machine.hpp"
#include "paired.hpp"
#include "random_view.hpp"

namespace {

using kattn::perf::random_view;
using kattn::perf::View3;
using kattn::perf::View4;

// Measured again for every benchmark (about a second): on a shared machine a peak measured once
// at start-up judges later rows against another machine state.
template <class T>
double fma_peak() {
  return std::is_same<T, float>::value ? kattn::perf::fma_peak_gflops_float() : kattn::perf::fma_peak_gflops_double();
}

enum class Algo { tiled, reference };

// CPU time of the process: on a shared machine the wall clock also counts the time other
// processes hold the core, the CPU time does not (one thread: Kokkos Serial, or OpenMP with one).
double cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

struct Seconds {
  double wall = 0, cpu = 0;
};

// Seconds per forward call, over at least 0.2 s.
template <class T>
Seconds time_forward(const View4<T>& q, const View4<T>& k, const View4<T>& v, const View4<T>& o, const View3<T>& lse,
                     const kattn::Options& opt) {
  const Kokkos::DefaultExecutionSpace space;
  kattn::attention(space, q, kattn::kv::dense(k, v), o, lse, opt);  // warm-up, and the o/lse the backward reads
  space.fence();
  int calls = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const double c0 = cpu_seconds();
  double elapsed = 0;
  while (elapsed < 0.2 || calls < 2) {
    kattn::attention(space, q, kattn::kv::dense(k, v), o, lse, opt);
    space.fence();
    ++calls;
    elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return {elapsed / calls, (cpu_seconds() - c0) / calls};
}

// Args: N, D, causal, dq strategy (0 automatic, 1 key-chunks, 2 query-pass, 3 atomic; tiled only).
template <class T, Algo algo>
void BM_Backward(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), d = static_cast<int>(state.range(1));
  kattn::Options opt;
  opt.causal = state.range(2) != 0;
  opt.splits = 1;  // the forward that feeds the backward: no merge
  kattn::BackwardOptions bopt;
  bopt.dq = static_cast<kattn::DqStrategy>(state.range(3));
  const double peak = fma_peak<T>();
  auto q = random_view<T>("q", n, d, 1), k = random_view<T>("k", n, d, 2), v = random_view<T>("v", n, d, 3);
  auto dout = random_view<T>("do", n, d, 4);
  View4<T> o("o", 1, n, 1, d), dq("dq", 1, n, 1, d), dk("dk", 1, n, 1, d), dv("dv", 1, n, 1, d);
  View3<T> lse("lse", 1, 1, n);
  const Seconds fwd = time_forward(q, k, v, o, lse, opt);
  const Kokkos::DefaultExecutionSpace space;
  const std::size_t base = kattn::perf::reset_peak_memory();
  kattn::perf::LoopTimer timer;
  timer.start();
  const double c0 = cpu_seconds();
  kattn::BackwardInfo info;
  for (auto _ : state) {
    if (algo == Algo::tiled)
      info = kattn::attention_backward(space, q, kattn::kv::dense(k, v), o, lse, dout, dq, dk, dv, opt, bopt);
    else
      kattn::reference_backward(space, q, k, v, dout, dq, dk, dv, opt);
    space.fence();
  }
  const double seconds = timer.seconds(state.iterations());
  const double cpu = (cpu_seconds() - c0) / double(state.iterations());
  const double fwd_flops = 4.0 * n * double(n) * d * (opt.causal ? 0.5 : 1.0);
  const double gflops = 2.5 * fwd_flops / seconds / 1e9;
  state.counters["GFLOP/s"] = gflops;
  state.counters["fwd_GFLOP/s"] = fwd_flops / fwd.wall / 1e9;
  state.counters["bwd/fwd"] = seconds / fwd.wall;
  state.counters["bwd/fwd_cpu"] = cpu / fwd.cpu;
  state.counters["frac_peak"] = gflops / peak;
  state.counters["fma_peak"] = peak;
  // Peak RSS growth: a lower bound when the allocator reuses pages an earlier run touched.
  state.counters["extra_MB"] = kattn::perf::extra_memory_mb(base);
  // What the backward allocates (dQ partials, D, lse2); the textbook: two N x N arrays.
  state.counters["workspace_MB"] =
      (algo == Algo::tiled ? double(info.workspace_bytes) : 2.0 * n * double(n) * sizeof(T)) / 1e6;
}

// The gate (backward / forward at N = 4096, D = 128, float, one core) on a shared, noisy
// machine: forward and backward alternate, each iteration times one of each, and the counters
// are the ratio of the fastest of each (what the core does undisturbed) and the median of the
// per-iteration ratios (noise that slows both cancels), in wall and CPU time, with the spread.
// Args: N, D, causal[, backward block_q, block_k (0: planned)].
template <class T>
void BM_BackwardForwardRatio(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), d = static_cast<int>(state.range(1));
  kattn::Options opt;
  opt.causal = state.range(2) != 0;
  opt.splits = 1;  // the forward that feeds the backward: no merge
  kattn::Options bwd_opt = opt;  // the forward keeps its own tiles
  if (state.range(3) > 0) bwd_opt.block_q = static_cast<int>(state.range(3));
  if (state.range(4) > 0) bwd_opt.block_k = static_cast<int>(state.range(4));
  auto q = random_view<T>("q", n, d, 1), k = random_view<T>("k", n, d, 2), v = random_view<T>("v", n, d, 3);
  auto dout = random_view<T>("do", n, d, 4);
  View4<T> o("o", 1, n, 1, d), dq("dq", 1, n, 1, d), dk("dk", 1, n, 1, d), dv("dv", 1, n, 1, d);
  View3<T> lse("lse", 1, 1, n);
  const Kokkos::DefaultExecutionSpace space;
  std::vector<double> fwd_wall, bwd_wall, fwd_cpu, bwd_cpu, ratio_wall, ratio_cpu;
  const auto wall = [] { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); };
  kattn::attention(space, q, kattn::kv::dense(k, v), o, lse, opt);
  kattn::attention_backward(space, q, kattn::kv::dense(k, v), o, lse, dout, dq, dk, dv, bwd_opt);  // warm-up
  for (auto _ : state) {
    double w0 = wall(), c0 = cpu_seconds();
    kattn::attention(space, q, kattn::kv::dense(k, v), o, lse, opt);
    space.fence();
    double w1 = wall(), c1 = cpu_seconds();
    kattn::attention_backward(space, q, kattn::kv::dense(k, v), o, lse, dout, dq, dk, dv, bwd_opt);
    space.fence();
    double w2 = wall(), c2 = cpu_seconds();
    fwd_wall.push_back(w1 - w0), bwd_wall.push_back(w2 - w1), fwd_cpu.push_back(c1 - c0), bwd_cpu.push_back(c2 - c1);
    ratio_wall.push_back((w2 - w1) / (w1 - w0));
    ratio_cpu.push_back((c2 - c1) / (c1 - c0));
  }
  const auto min = [](const std::vector<double>& x) { return *std::min_element(x.begin(), x.end()); };
  const auto max = [](const std::vector<double>& x) { return *std::max_element(x.begin(), x.end()); };
  const auto median = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  state.counters["ratio_min_wall"] = min(bwd_wall) / min(fwd_wall);
  state.counters["ratio_min_cpu"] = min(bwd_cpu) / min(fwd_cpu);
  state.counters["ratio_median_wall"] = median(ratio_wall);
  state.counters["ratio_median_cpu"] = median(ratio_cpu);
  state.counters["ratio_max_cpu"] = max(ratio_cpu);
  state.counters["fwd_ms_min"] = 1e3 * min(fwd_wall);
  state.counters["bwd_ms_min"] = 1e3 * min(bwd_wall);
  state.counters["fwd_spread"] = max(fwd_wall) / min(fwd_wall);  // 1 on a quiet machine
  const double fwd_flops = 4.0 * n * double(n) * d * (opt.causal ? 0.5 : 1.0);
  state.counters["bwd_GFLOP/s_best"] = 2.5 * fwd_flops / min(bwd_wall) / 1e9;
  state.counters["fwd_GFLOP/s_best"] = fwd_flops / min(fwd_wall) / 1e9;
}

void shapes(benchmark::internal::Benchmark* b, int max_n, int dq) {
  for (int causal : {0, 1})
    for (int d : {64, 128})
      for (int n = 512; n <= max_n; n *= 2) b->Args({n, d, causal, dq});
  b->ArgNames({"N", "D", "causal", "dq"})->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.3);
}

// The textbook backward holds two N x N arrays and runs plain loops: 4096 takes tens of seconds.
BENCHMARK_TEMPLATE(BM_Backward, float, Algo::tiled)->Apply([](auto* b) { shapes(b, 16384, 0); });
BENCHMARK_TEMPLATE(BM_Backward, float, Algo::reference)->Apply([](auto* b) { shapes(b, 4096, 0); });
BENCHMARK_TEMPLATE(BM_Backward, double, Algo::tiled)->Apply([](auto* b) { shapes(b, 16384, 0); });
BENCHMARK_TEMPLATE(BM_Backward, double, Algo::reference)->Apply([](auto* b) { shapes(b, 4096, 0); });
// The dQ strategies side by side (float, the shape and a long one).
BENCHMARK_TEMPLATE(BM_Backward, float, Algo::tiled)
    ->ArgNames({"N", "D", "causal", "dq"})
    ->ArgsProduct({{4096, 16384}, {128}, {0, 1}, {1, 2, 3}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->MinTime(0.3);

BENCHMARK_TEMPLATE(BM_BackwardForwardRatio, float)
    ->ArgNames({"N", "D", "causal", "bq", "bk"})
    ->Args({4096, 128, 0, 0, 0})
    ->Args({4096, 128, 1, 0, 0})
    ->Args({4096, 64, 0, 0, 0})
    ->Iterations(15)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// The backward's tile sizes (tuning.hpp's choice): rows x keys.
BENCHMARK_TEMPLATE(BM_BackwardForwardRatio, float)
    ->Name("BackwardTiles")
    ->ArgNames({"N", "D", "causal", "bq", "bk"})
    ->ArgsProduct({{4096}, {64, 128}, {0}, {64, 128, 256}, {64, 128, 256}})
    ->Iterations(7)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// A training step (forward and backward, causal) of `heads` heads in storage S, with its scratch
// from one kattn::Workspace against allocated per call: the 16-bit backward's float copies of q,
// k, v, o, dout and the gradients, its row sums and any dQ partials. Each iteration times one
// step each way, in alternating order; the counters are the median of the per-iteration ratios
// (with / without) and the minor page faults per step each way. Args: N, D, heads.
template <class S>
void BM_TrainingStepWorkspace(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), d = static_cast<int>(state.range(1));
  const int heads = static_cast<int>(state.range(2));
  auto q = random_view<S>("q", n, d, 1, 1, heads), k = random_view<S>("k", n, d, 2, 1, heads);
  auto v = random_view<S>("v", n, d, 3, 1, heads), dout = random_view<S>("do", n, d, 4, 1, heads);
  View4<S> o("o", 1, n, heads, d), dq("dq", 1, n, heads, d), dk("dk", 1, n, heads, d), dv("dv", 1, n, heads, d);
  View3<float> lse("lse", 1, heads, n);
  const Kokkos::DefaultExecutionSpace space;
  kattn::Workspace ws;
  kattn::Options plain;
  plain.causal = true;
  kattn::Options kept = plain;
  kept.workspace = &ws;
  const auto faults = [] {
    rusage u;
    getrusage(RUSAGE_SELF, &u);
    return double(u.ru_minflt);
  };
  struct Cost {
    double seconds, faults;
  };
  const auto step = [&](const kattn::Options& opt) {
    const double f0 = faults();
    const auto t0 = std::chrono::steady_clock::now();
    kattn::attention(space, q, kattn::kv::dense(k, v), o, lse, opt);
    kattn::attention_backward(space, q, kattn::kv::dense(k, v), o, lse, dout, dq, dk, dv, opt);
    space.fence();
    return Cost{std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), faults() - f0};
  };
  step(kept), step(plain);  // warm-up: the workspace's buffers are allocated here
  std::vector<double> ratio, with_s, without_s;
  double with_faults = 0, without_faults = 0;
  bool kept_first = true;
  for (auto _ : state) {
    Cost a{}, b{};
    if (kept_first)
      a = step(kept), b = step(plain);
    else
      b = step(plain), a = step(kept);
    kept_first = !kept_first;
    ratio.push_back(a.seconds / b.seconds);
    with_s.push_back(a.seconds), without_s.push_back(b.seconds);
    with_faults += a.faults, without_faults += b.faults;
  }
  const auto median = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  const double steps = double(state.iterations());
  state.counters["ratio_median"] = median(ratio);
  state.counters["ms_with"] = 1e3 * median(with_s);
  state.counters["ms_without"] = 1e3 * median(without_s);
  state.counters["faults_with"] = with_faults / steps;
  state.counters["faults_without"] = without_faults / steps;
  state.counters["workspace_MB"] = double(ws.bytes()) / 1e6;
}

BENCHMARK_TEMPLATE(BM_TrainingStepWorkspace, kattn::bf16)
    ->ArgNames({"N", "D", "heads"})
    ->Args({512, 128, 8})
    ->Args({2048, 128, 8})
    ->Iterations(8)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// A score variant's cost in the backward, paired in one run (float, B = 1, 8 heads, the default dq
// strategy): each iteration times the backward without the variant (A) and with it (B);
// ratio_median is the median of time(B) / time(A). Variant 0: ALiBi (the paper's slopes), A plain;
// 1: a float bias [1, 8, N, N], A plain; 2: that bias's gradient (dbias [1, 8, N, N], written in
// place), A the backward with the bias; 3: the gradient of a broadcast bias [1, 1, N, N] (summed
// over the heads from a workspace), A the backward with that bias.
void BM_ScoreVariantBackwardCost(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), d = static_cast<int>(state.range(1)),
            variant = static_cast<int>(state.range(3));
  constexpr int H = 8;
  kattn::Options plain;
  plain.causal = state.range(2) != 0;
  View4<float> q("q", 1, n, H, d), k("k", 1, n, H, d), v("v", 1, n, H, d), dout("do", 1, n, H, d);
  View4<float> oa("o", 1, n, H, d), ob("o", 1, n, H, d), dq("dq", 1, n, H, d), dk("dk", 1, n, H, d),
      dv("dv", 1, n, H, d);
  View3<float> la("lse", 1, H, n), lb("lse", 1, H, n);
  Kokkos::Random_XorShift64_Pool<> pool(7);
  for (const auto& x : {q, k, v, dout}) Kokkos::fill_random(x, pool, -1.0f, 1.0f);
  const int bias_heads = variant == 3 ? 1 : H;
  View4<float> bias("bias", 1, variant >= 1 ? bias_heads : 0, n, n), dbias("dbias", 1, variant >= 2 ? bias_heads : 0, n, n);
  kattn::Options with = plain;
  if (variant == 0) with.alibi_slopes = kattn::alibi_standard_slopes(H);
  if (variant >= 1) {
    Kokkos::fill_random(bias, pool, -2.0f, 2.0f);
    with.bias = kattn::score_bias(bias);
  }
  kattn::BackwardOptions gradient;
  if (variant >= 2) {
    gradient.dbias = kattn::score_bias_gradient(dbias);
    plain = with;  // A: the same backward without the bias's gradient
  }
  const Kokkos::DefaultExecutionSpace space;
  kattn::attention(space, q, kattn::kv::dense(k, v), oa, la, plain);
  kattn::attention(space, q, kattn::kv::dense(k, v), ob, lb, with);
  const kattn::perf::Paired r = kattn::perf::paired(
      state,
      [&] { kattn::attention_backward(space, q, kattn::kv::dense(k, v), oa, la, dout, dq, dk, dv, plain); },
      [&] { kattn::attention_backward(space, q, kattn::kv::dense(k, v), ob, lb, dout, dq, dk, dv, with, gradient); });
  state.counters["ratio_median"] = r.median_ratio();
  state.counters["ratio_min"] = r.ratio.front();
  state.counters["ratio_max"] = r.ratio.back();
}
BENCHMARK(BM_ScoreVariantBackwardCost)
    ->ArgsProduct({{1024}, {64, 128}, {0, 1}, {0, 1, 2, 3}})
    ->ArgNames({"N", "D", "causal", "variant"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(7);

}  // namespace
