// Tiled forward against the textbook reference (S and P materialised), B = 1, one head:
// GFLOP/s (4 N^2 D, halved for causal), the fraction of this core's FMA peak measured in the
// same run, and the extra memory each needs beyond its inputs and outputs.
#include <Kokkos_Core.hpp>
#include <Kokkos_Random.hpp>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/core/alibi.hpp"
#include "kattn/score_bias.hpp"
#include "kattn/reference.hpp"
#include "machine.hpp"
#include "paired.hpp"
#include "random_view.hpp"

namespace {

using kattn::perf::paired;
using kattn::perf::Paired;
using kattn::perf::random_view;
using kattn::perf::View3;
using kattn::perf::View4;

template <class T>
double fma_peak() {
  static const double peak = std::is_same<T, float>::value ? kattn::perf::fma_peak_gflops_float()
                                                          : kattn::perf::fma_peak_gflops_double();
  return peak;
}

enum class Algo { tiled, reference };

template <class T, Algo algo>
void BM_Attention(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), d = static_cast<int>(state.range(1));
  kattn::Options opt;
  opt.causal = state.range(2) != 0;
  opt.splits = 1;  // the tiled forward, no merge
  const double peak = fma_peak<T>();  // measured before the timed region, once per type
  auto q = random_view<T>("q", n, d, 1), k = random_view<T>("k", n, d, 2), v = random_view<T>("v", n, d, 3);
  View4<T> o("o", 1, n, 1, d);
  View3<T> lse("lse", 1, 1, n);
  const Kokkos::DefaultExecutionSpace space;
  const std::size_t base = kattn::perf::reset_peak_memory();
  kattn::perf::LoopTimer timer;
  timer.start();
  for (auto _ : state) {
    if (algo == Algo::tiled)
      kattn::attention(space, q, kattn::kv::dense(k, v), o, lse, opt);
    else
      kattn::reference(space, q, k, v, o, lse, opt);
    space.fence();
  }
  const double flops = 4.0 * n * double(n) * d * (opt.causal ? 0.5 : 1.0);
  const double gflops = flops / timer.seconds(state.iterations()) / 1e9;
  state.counters["GFLOP/s"] = gflops;
  state.counters["fma_peak"] = peak;
  state.counters["frac_peak"] = gflops / peak;
  state.counters["extra_MB"] = kattn::perf::extra_memory_mb(base);
}

void shapes(benchmark::internal::Benchmark* b, int max_n) {
  for (int causal : {0, 1})
    for (int d : {64, 128})
      for (int n = 512; n <= max_n; n *= 2) b->Args({n, d, causal});
  b->ArgNames({"N", "D", "causal"})->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.3);
}

// The reference materialises N x N scores: 16384^2 in double is 2 GB and takes minutes.
BENCHMARK_TEMPLATE(BM_Attention, float, Algo::tiled)->Apply([](auto* b) { shapes(b, 16384); });
BENCHMARK_TEMPLATE(BM_Attention, float, Algo::reference)->Apply([](auto* b) { shapes(b, 16384); });
BENCHMARK_TEMPLATE(BM_Attention, double, Algo::tiled)->Apply([](auto* b) { shapes(b, 16384); });
BENCHMARK_TEMPLATE(BM_Attention, double, Algo::reference)->Apply([](auto* b) { shapes(b, 16384); });

// Many heads interleaved in one [1, N, H, D] tensor against the same heads as a batch of
// contiguous sequences ([H, N, 1, D]: the same flops, each head's rows contiguous), paired in one
// run: each iteration times the batch (A) then the interleaved heads (B); ratio_median is the
// median of time(A) / time(B), the interleaved heads' rate relative to the batch's (the target: at
// least 0.97). frac_peak: the interleaved run's GFLOP/s over the FMA peak. 7, 9 and 17 heads
// beside 8 and 16: a row stride of a power of two times 4 KB puts a tile's K and V rows in few
// cache sets.
template <class T>
void BM_InterleavedHeads(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), d = static_cast<int>(state.range(1));
  const int heads = static_cast<int>(state.range(2));
  kattn::Options opt;
  opt.splits = 1;
  const auto qa = random_view<T>("q", n, d, 1, heads), ka = random_view<T>("k", n, d, 2, heads),
             va = random_view<T>("v", n, d, 3, heads);
  const auto qb = random_view<T>("q", n, d, 1, 1, heads), kb = random_view<T>("k", n, d, 2, 1, heads),
             vb = random_view<T>("v", n, d, 3, 1, heads);
  View4<T> oa("o", heads, n, 1, d), ob("o", 1, n, heads, d);
  View3<T> lsea("lse", heads, 1, n), lseb("lse", 1, heads, n);
  const Kokkos::DefaultExecutionSpace space;
  const Paired r = paired(
      state, [&] { kattn::attention(space, qa, kattn::kv::dense(ka, va), oa, lsea, opt); },
      [&] { kattn::attention(space, qb, kattn::kv::dense(kb, vb), ob, lseb, opt); });
  std::vector<double> rate(r.ratio.size());  // time(A) / time(B)
  for (std::size_t i = 0; i < rate.size(); ++i) rate[i] = 1.0 / r.ratio[i];
  std::sort(rate.begin(), rate.end());
  const double flops = 4.0 * heads * n * double(n) * d;
  state.counters["ratio_median"] = rate[rate.size() / 2];
  state.counters["B_GFLOP/s"] = flops / r.tb[r.tb.size() / 2] / 1e9;
  state.counters["frac_peak"] = flops / r.tb[r.tb.size() / 2] / 1e9 / fma_peak<T>() / space.concurrency();
}

void head_shapes(benchmark::internal::Benchmark* b) {
  for (int heads : {7, 8, 9, 16, 17}) b->Args({2048, 128, heads});
  for (int heads : {8, 16}) b->Args({4096, 128, heads});  // the gate's length
  b->ArgNames({"N", "D", "H"})->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
}
BENCHMARK_TEMPLATE(BM_InterleavedHeads, float)->Apply(head_shapes);
BENCHMARK_TEMPLATE(BM_InterleavedHeads, double)->Apply(head_shapes);

// Many short sequences: a batch of B sequences of N tokens, 8 heads in [B, N, H, D], B N = 16384
// tokens in all, non-causal or causal. GFLOP/s and the fraction of the FMA peak, to read against
// BM_Attention's long sequence: a team's fixed work (Q in, O out, a short last key tile) weighs on
// a few tiles here.
template <class T>
void BM_ShortSequences(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), d = static_cast<int>(state.range(1));
  const int heads = 8, batch = 16384 / n;
  kattn::Options opt;
  opt.causal = state.range(2) != 0;
  const double peak = fma_peak<T>();
  const auto q = random_view<T>("q", n, d, 1, batch, heads), k = random_view<T>("k", n, d, 2, batch, heads),
             v = random_view<T>("v", n, d, 3, batch, heads);
  View4<T> o("o", batch, n, heads, d);
  View3<T> lse("lse", batch, heads, n);
  const Kokkos::DefaultExecutionSpace space;
  kattn::perf::LoopTimer timer;
  timer.start();
  for (auto _ : state) {
    kattn::attention(space, q, kattn::kv::dense(k, v), o, lse, opt);
    space.fence();
  }
  const double flops = 4.0 * batch * heads * n * double(n) * d * (opt.causal ? 0.5 : 1.0);
  const double gflops = flops / timer.seconds(state.iterations()) / 1e9;
  state.counters["GFLOP/s"] = gflops;
  state.counters["frac_peak"] = gflops / peak / space.concurrency();
}

void short_shapes(benchmark::internal::Benchmark* b) {
  for (int causal : {0, 1})
    for (int d : {64, 128})
      for (int n : {64, 128, 256, 512, 1024}) b->Args({n, d, causal});
  b->ArgNames({"N", "D", "causal"})->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.5);
}
BENCHMARK_TEMPLATE(BM_ShortSequences, float)->Apply(short_shapes);
BENCHMARK_TEMPLATE(BM_ShortSequences, double)->Apply(short_shapes);

// 16-bit storage against float, paired in one run (B = 1, one head, no split): each iteration times
// the float forward (A) and the forward in S (B); ratio_median is the median of time(B) / time(A)
// (the target: at most 1, 16-bit prefill at least as fast as float's).
template <class S>
void BM_PrefillStorage(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), d = static_cast<int>(state.range(1));
  kattn::Options opt;
  opt.causal = state.range(2) != 0;
  opt.splits = 1;
  const auto qa = random_view<float>("q", n, d, 1), ka = random_view<float>("k", n, d, 2),
             va = random_view<float>("v", n, d, 3);
  const auto qb = random_view<S>("q", n, d, 1), kb = random_view<S>("k", n, d, 2), vb = random_view<S>("v", n, d, 3);
  View4<float> oa("o", 1, n, 1, d);
  View4<S> ob("o", 1, n, 1, d);
  View3<float> lse("lse", 1, 1, n);
  const Kokkos::DefaultExecutionSpace space;
  const Paired r = paired(
      state, [&] { kattn::attention(space, qa, kattn::kv::dense(ka, va), oa, lse, opt); },
      [&] { kattn::attention(space, qb, kattn::kv::dense(kb, vb), ob, lse, opt); });
  const double flops = 4.0 * n * double(n) * d * (opt.causal ? 0.5 : 1.0);
  state.counters["ratio_median"] = r.median_ratio();
  state.counters["B_GFLOP/s"] = flops / r.tb[r.tb.size() / 2] / 1e9;
  state.counters["frac_peak"] = flops / r.tb[r.tb.size() / 2] / 1e9 / fma_peak<float>();
}

void storage_shapes(benchmark::internal::Benchmark* b) {
  for (int d : {64, 128})
    for (int causal : {0, 1}) b->Args({4096, d, causal});
  b->ArgNames({"N", "D", "causal"})->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
}
BENCHMARK_TEMPLATE(BM_PrefillStorage, kattn::bf16)->Apply(storage_shapes);
BENCHMARK_TEMPLATE(BM_PrefillStorage, kattn::fp16)->Apply(storage_shapes);

// A score variant's cost, paired in one run (float, B = 1, 8 heads, no split): each iteration
// times the plain forward (A) and the same with the variant (B); ratio_median is the median of
// time(B) / time(A) (the target: at most 1.05). Variant 0: ALiBi (the paper's slopes); 1: a float
// bias [1, 8, N, N]; 2: a bool mask [1, 1, N, N] (SDPA's broadcast boolean attn_mask).
void BM_ScoreVariantCost(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0)), d = static_cast<int>(state.range(1)), variant =
      static_cast<int>(state.range(3));
  constexpr int H = 8;
  kattn::Options plain;
  plain.causal = state.range(2) != 0;
  plain.splits = 1;
  View4<float> q("q", 1, n, H, d), k("k", 1, n, H, d), v("v", 1, n, H, d), o("o", 1, n, H, d);
  View3<float> lse("lse", 1, H, n);
  Kokkos::Random_XorShift64_Pool<> pool(7);
  Kokkos::fill_random(q, pool, -1.0f, 1.0f), Kokkos::fill_random(k, pool, -1.0f, 1.0f);
  Kokkos::fill_random(v, pool, -1.0f, 1.0f);
  View4<float> bias_f("bias", 1, variant == 1 ? H : 0, n, n);
  Kokkos::View<bool****, Kokkos::LayoutRight> bias_b("mask", 1, 1, variant == 2 ? n : 0, n);
  kattn::Options with = plain;
  if (variant == 0) with.alibi_slopes = kattn::alibi_standard_slopes(H);
  if (variant == 1) {
    Kokkos::fill_random(bias_f, pool, -2.0f, 2.0f);
    with.bias = kattn::score_bias(bias_f);
  }
  if (variant == 2) {
    Kokkos::deep_copy(bias_b, true);
    with.bias = kattn::score_bias(bias_b);
  }
  const Kokkos::DefaultExecutionSpace space;
  const Paired r = paired(
      state, [&] { kattn::attention(space, q, kattn::kv::dense(k, v), o, lse, plain); },
      [&] { kattn::attention(space, q, kattn::kv::dense(k, v), o, lse, with); });
  state.counters["ratio_median"] = r.median_ratio();
  state.counters["ratio_min"] = r.ratio.front();
  state.counters["ratio_max"] = r.ratio.back();
}
BENCHMARK(BM_ScoreVariantCost)
    ->ArgsProduct({{2048}, {64, 128}, {0, 1}, {0, 1, 2}})
    ->ArgNames({"N", "D", "causal", "variant"})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime()
    ->Iterations(9);

}  // namespace
