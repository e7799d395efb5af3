// Decode (one new query per sequence) against a long KV cache, D = 128: the figure of merit is
// GB/s of K and V read, against the streaming read bandwidth of the same threads measured right
// before each case (perf/bandwidth.hpp). BM_Decode: batch x context x GQA (8:1 and 1:1, 8 KV
// heads; and 1 KV head, where only splitting makes more than one unit of work) x split (none /
// planned) x cache (dense / paged with 16 keys per page, pages shuffled or in order).
// BM_DecodeKeyTile: keys per tile (the automatic choice: row_tile_kv_bytes, an eighth of L2).
// BM_DecodePageSize: keys per page, pages shuffled (what a jump between pages costs).
// BM_DecodePair: the targets as paired ratios (decode / stream, paged / dense, split /
// no split), robust to a machine whose bandwidth drifts; and decode / the same decode over a
// cache that stays in L2 (its compute rate, against the FMA peak measured in the same run), which
// says how much of a decode's time is the arithmetic and how much the memory.
// BM_DecodeStorage: a cache stored in bf16 or fp16 (under float or 16-bit queries) against the
// float cache and against a streaming read of the bytes it holds, paired in one run.
//
// The machine may be shared: each case reports the best and the median time of its iterations
// and the best of four stream trials, so that ratios compare like with like; `cpu_` counters use
// the process's CPU time per thread instead of the wall clock (what the threads reach while
// they run; on one thread the fairer measure when other jobs take the core part of the time).
#include <benchmark/benchmark.h>

#include <Kokkos_Core.hpp>
#include <Kokkos_Random.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bandwidth.hpp"
#include "kattn/attention.hpp"
#include "machine.hpp"

namespace {

constexpr int kHeadDim = 128;
constexpr double kMaxBytes = 2.2e9;  // K + V of one case: what this machine can hold twice over

template <class T>
using View4 = Kokkos::View<T****, Kokkos::LayoutRight>;
template <class T>
using View3 = Kokkos::View<T***, Kokkos::LayoutRight>;
template <class T>
using View2 = Kokkos::View<T**, Kokkos::LayoutRight>;
using Index = Kokkos::View<std::int64_t*, Kokkos::HostSpace>;

template <class View>
void fill(const View& v, std::uint64_t seed) {
  using S = typename View::non_const_value_type;
  if constexpr (kattn::is_16bit_v<S>) {  // fill_random knows only arithmetic types: drawn on the host
    auto h = Kokkos::create_mirror_view(v);
    std::mt19937_64 gen(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (std::size_t i = 0; i < h.span(); ++i) h.data()[i] = kattn::narrow<S>(u(gen));
    Kokkos::deep_copy(v, h);
  } else {
    Kokkos::Random_XorShift64_Pool<typename View::execution_space> pool(seed);
    Kokkos::fill_random(v, pool, -1.0, 1.0);
  }
}

Index index_view(const std::vector<std::int64_t>& values, const char* label) {
  Index v(std::string(label), values.size());
  std::copy(values.begin(), values.end(), v.data());
  return v;
}

// One decode problem: q [B, 1, Hq, D] (storage T) against a dense or paged (page > 0 keys per
// page, pages shuffled or in order) cache of N keys per sequence (storage KV). resident > 0 (paged
// only): the page table cycles over that many pages, so the same N keys are folded from a cache
// small enough to stay in L2.
template <class T, class KV = T>
struct DecodeCase {
  using Acc = kattn::accumulate_t<T>;
  kattn::Options opt;
  View4<T> q, o;
  View4<KV> k, v;
  View3<Acc> lse;
  kattn::PagedLayout<> layout;
  View3<T> q_r, o_r;
  View2<Acc> lse_r;
  int page = 0;
  double bytes = 0;  // K and V

  DecodeCase(int B, std::int64_t N, int Hkv, int G, int page_size, bool shuffled, int block_k = 0, int resident = 0)
      : page(page_size) {
    const int Hq = Hkv * G, D = kHeadDim;
    opt.block_k = block_k;
    q = View4<T>("q", B, 1, Hq, D);
    o = View4<T>("o", B, 1, Hq, D);
    lse = View3<Acc>("lse", B, Hq, 1);
    fill(q, 1);
    if (page == 0) {
      k = View4<KV>("k", B, N, Hkv, D);
      v = View4<KV>("v", B, N, Hkv, D);
    } else {
      const std::int64_t per_seq = (N + page - 1) / page, pages = B * per_seq;
      const std::int64_t stored = resident > 0 ? std::min<std::int64_t>(resident, pages) : pages;
      k = View4<KV>("k", stored, page, Hkv, D);
      v = View4<KV>("v", stored, page, Hkv, D);
      std::vector<std::int64_t> perm(pages), q_indptr(B + 1), page_indptr(B + 1), last(B, N - (per_seq - 1) * page);
      std::iota(perm.begin(), perm.end(), 0);
      if (shuffled) std::shuffle(perm.begin(), perm.end(), std::mt19937_64(42));
      for (std::int64_t& x : perm) x %= stored;
      for (int b = 0; b <= B; ++b) q_indptr[b] = b, page_indptr[b] = b * per_seq;
      layout = kattn::make_paged_layout(index_view(q_indptr, "q_indptr"), index_view(page_indptr, "page_indptr"),
                                        index_view(perm, "page_indices"), index_view(last, "last_page_len"), page);
      q_r = View3<T>(q.data(), B, Hq, D);
      o_r = View3<T>(o.data(), B, Hq, D);
      lse_r = View2<Acc>("lse", B, Hq);
    }
    fill(k, 2);
    fill(v, 3);
    bytes = 2.0 * B * N * Hkv * D * sizeof(KV);
  }
  // splits: 1 = none, 0 = planned.
  kattn::SplitPlan run(int splits) {
    const Kokkos::DefaultExecutionSpace space;
    opt.splits = splits;
    const kattn::SplitPlan plan =
        page == 0 ? kattn::attention(space, q, kattn::kv::dense(k, v), o, lse, opt) : kattn::attention(space, q_r, kattn::kv::paged(k, v, layout), o_r, lse_r, opt);
    space.fence();
    return plan;
  }
};

template <class T>
void BM_Decode(benchmark::State& state) {
  const int B = static_cast<int>(state.range(0));
  const std::int64_t N = state.range(1);
  const int Hkv = static_cast<int>(state.range(2)), G = static_cast<int>(state.range(3));
  const int splits = state.range(4) != 0 ? 0 : 1;
  const Kokkos::DefaultExecutionSpace space;
  DecodeCase<T> c(B, N, Hkv, G, static_cast<int>(state.range(5)), state.range(6) != 0, static_cast<int>(state.range(7)));
  // The stream first, then the warm-up: on a virtual machine the first pass over K and V after
  // other memory was touched can pay a hypervisor fault per 4 KB page (13x slower at 64K here).
  const kattn::perf::StreamRate stream = kattn::perf::stream_read_rate(space, std::size_t(256) << 20);
  const kattn::SplitPlan plan = c.run(splits);  // warm-up

  std::vector<double> times, cpu_times;
  const int threads = space.concurrency();
  for (auto _ : state) {
    const double c0 = kattn::perf::process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    c.run(splits);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    cpu_times.push_back((kattn::perf::process_cpu_seconds() - c0) / threads);
  }
  std::sort(times.begin(), times.end());
  std::sort(cpu_times.begin(), cpu_times.end());
  const double best = c.bytes / times.front() / 1e9, median = c.bytes / times[times.size() / 2] / 1e9;
  const double best_cpu = c.bytes / cpu_times.front() / 1e9;
  state.counters["GB/s"] = best;
  state.counters["GB/s_median"] = median;
  state.counters["stream_GB/s"] = stream.wall_gbs;
  state.counters["frac_stream"] = best / stream.wall_gbs;
  // The same per CPU second of the threads (what they reach while they run, on a shared machine).
  state.counters["cpu_GB/s"] = best_cpu;
  state.counters["cpu_frac_stream"] = best_cpu / stream.cpu_gbs;
  state.counters["splits"] = plan.splits;
  state.counters["threads"] = space.concurrency();
}

// Paired measurements for the targets, robust to a machine whose memory bandwidth drifts by a
// third from minute to minute: each iteration times A then B back to back, and the counters are
// the median and best of the per-pair ratios time(B) / time(A).
//   pair 0: A = decode (dense, no split unless the planner splits), B = one streaming read of a
//           buffer as large as K + V: ratio = fraction of the stream bandwidth;
//   pair 1: A = paged decode (16 keys per page, shuffled), B = dense decode: ratio = paged speed
//           relative to dense;
//   pair 2: A = planned split, B = no split: ratio = speed-up of splitting;
//   pair 3: A = paged decode (16 keys per page, in order: dense's addresses), B = the same over 4
//           pages cycled (K + V of 512 KB at 8 heads, in L2): ratio = the fraction of the kernel's
//           own compute rate that it keeps when streaming; B's rate is also given as a fraction of
//           the FMA peak (4 G D flops per key and KV head: S = Q K^T and P V).
enum Pair { kStream = 0, kPagedVsDense = 1, kSplitVsNone = 2, kResident = 3 };

template <class T>
void BM_DecodePair(benchmark::State& state) {
  const std::int64_t N = state.range(0);
  const int Hkv = static_cast<int>(state.range(1)), G = static_cast<int>(state.range(2));
  const Pair pair = static_cast<Pair>(state.range(3));
  const Kokkos::DefaultExecutionSpace space;
  DecodeCase<T> dense(1, N, Hkv, G, 0, false);
  std::unique_ptr<DecodeCase<T>> paged, resident;
  std::unique_ptr<kattn::perf::StreamBuffer<Kokkos::DefaultExecutionSpace>> stream;
  if (pair == kPagedVsDense) paged = std::make_unique<DecodeCase<T>>(1, N, Hkv, G, 16, true);
  if (pair == kResident) {
    paged = std::make_unique<DecodeCase<T>>(1, N, Hkv, G, 16, false);
    resident = std::make_unique<DecodeCase<T>>(1, N, Hkv, G, 16, false, 0, 4);
  }
  if (pair == kStream) stream = std::make_unique<kattn::perf::StreamBuffer<Kokkos::DefaultExecutionSpace>>(space, dense.bytes);
  const auto run_a = [&]() {
    if (pair == kPagedVsDense || pair == kResident) return paged->run(0).splits;
    return dense.run(0).splits;
  };
  const auto run_b = [&]() {
    if (pair == kStream)
      stream->pass();
    else if (pair == kResident)
      resident->run(0);
    else
      dense.run(pair == kSplitVsNone ? 1 : 0);
  };
  const auto seconds = [](const auto& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const int splits = run_a();  // warm-up, both
  run_b();
  std::vector<double> ratio, ta, tb;
  for (auto _ : state) {
    ta.push_back(seconds(run_a));
    tb.push_back(seconds(run_b));
    ratio.push_back(tb.back() / ta.back());
  }
  std::sort(ratio.begin(), ratio.end());
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  state.counters["ratio_median"] = ratio[ratio.size() / 2];
  state.counters["ratio_of_best"] = tb.front() / ta.front();
  state.counters["A_GB/s"] = dense.bytes / ta.front() / 1e9;
  state.counters["B_GB/s"] = dense.bytes / tb.front() / 1e9;
  if (pair == kResident) {
    const double flops = 4.0 * N * Hkv * G * kHeadDim;
    const double peak = kattn::perf::fma_peak_gflops_float() * space.concurrency();  // per core, one run
    state.counters["B_frac_fma_peak"] = flops / tb.front() / 1e9 / peak;
  }
  state.counters["splits"] = splits;
  state.counters["threads"] = space.concurrency();
}

void pair_cases(benchmark::internal::Benchmark* b) {
  for (int G : {1, 8}) {
    b->Args({65536, 8, G, kStream});
    b->Args({65536, 8, G, kPagedVsDense});
    b->Args({65536, 1, G, kSplitVsNone});
    b->Args({65536, 8, G, kResident});
  }
  b->ArgNames({"N", "Hkv", "G", "pair"})->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
}

bool fits(int B, std::int64_t N, int Hkv) { return 2.0 * B * N * Hkv * kHeadDim * sizeof(float) <= kMaxBytes; }

void decode_cases(benchmark::internal::Benchmark* b) {
  for (int B : {1, 8, 64})
    for (std::int64_t N : {1024, 4096, 16384, 65536, 131072})
      for (int G : {8, 1})
        if (fits(B, N, 8))
          for (int split : {0, 1})
            for (int page : {0, 16}) b->Args({B, N, 8, G, split, page, 1, 0});
  // Paged with the pages in order (the same addresses as dense, cut into pages).
  for (int G : {8, 1}) b->Args({1, 65536, 8, G, 0, 16, 0, 0});
  // Cache-resident (K + V of 512 KB): the kernel's compute rate, without the memory.
  for (int G : {8, 1}) b->Args({1, 64, 8, G, 0, 0, 0, 0});
  // One KV head: a single unit of work unless the keys are split (64K: 64 MB of K + V, and
  // 512K: 512 MB, far beyond the 32 MB last-level cache).
  for (std::int64_t N : {65536, 524288})
    for (int G : {8, 1})
      for (int split : {0, 1}) b->Args({1, N, 1, G, split, 0, 0, 0});
  b->ArgNames({"B", "N", "Hkv", "G", "split", "page", "shuffled", "block_k"})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->MinTime(0.5);
}

void key_tiles(benchmark::internal::Benchmark* b) {
  for (int G : {8, 1})
    for (int block_k : {16, 32, 64, 128, 256}) b->Args({1, 65536, 8, G, 0, 0, 0, block_k});
  b->ArgNames({"B", "N", "Hkv", "G", "split", "page", "shuffled", "block_k"})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->MinTime(0.5);
}

void page_sizes(benchmark::internal::Benchmark* b) {
  for (int G : {8, 1})
    for (int page : {1, 4, 16, 64, 256}) b->Args({1, 65536, 8, G, 0, page, 1, 0});
  b->ArgNames({"B", "N", "Hkv", "G", "split", "page", "shuffled", "block_k"})
      ->Unit(benchmark::kMillisecond)
      ->UseRealTime()
      ->MinTime(0.5);
}

BENCHMARK_TEMPLATE(BM_Decode, float)->Apply(decode_cases);
template <class T>
void BM_DecodeKeyTile(benchmark::State& state) {
  BM_Decode<T>(state);
}

BENCHMARK_TEMPLATE(BM_DecodeKeyTile, float)->Apply(key_tiles);
BENCHMARK_TEMPLATE(BM_DecodePair, float)->Apply(pair_cases);
template <class T>
void BM_DecodePageSize(benchmark::State& state) {
  BM_Decode<T>(state);
}

BENCHMARK_TEMPLATE(BM_DecodePageSize, float)->Apply(page_sizes);

// 16-bit storage, paired in one run: each iteration times the float cache (A), the cache stored in
// KV under queries in Q (B), and a streaming read of B's bytes (C). ratio_median: the median of
// time(B) / time(A) (the target: at most 0.55 for a bf16 cache); frac_stream_median: the median
// of time(C) / time(B), B's bandwidth on the bytes it reads as a fraction of the stream's (the
// target: at least 0.85). Dense cache, one sequence, no split unless the planner splits.
template <class Q, class KV>
void BM_DecodeStorage(benchmark::State& state) {
  const std::int64_t N = state.range(0);
  const int Hkv = static_cast<int>(state.range(1)), G = static_cast<int>(state.range(2));
  const Kokkos::DefaultExecutionSpace space;
  DecodeCase<float> a(1, N, Hkv, G, 0, false);
  DecodeCase<Q, KV> b(1, N, Hkv, G, 0, false);
  kattn::perf::StreamBuffer<Kokkos::DefaultExecutionSpace> stream(space, b.bytes);
  const auto seconds = [](const auto& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  a.run(0), b.run(0), stream.pass();  // warm-up
  std::vector<double> ratio, frac, ta, tb;
  for (auto _ : state) {
    ta.push_back(seconds([&] { a.run(0); }));
    tb.push_back(seconds([&] { b.run(0); }));
    const double tc = seconds([&] { stream.pass(); });
    ratio.push_back(tb.back() / ta.back());
    frac.push_back(tc / tb.back());
  }
  const auto median = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x[x.size() / 2];
  };
  state.counters["ratio_median"] = median(ratio);
  state.counters["frac_stream_median"] = median(frac);
  state.counters["A_GB/s"] = a.bytes / median(ta) / 1e9;
  state.counters["B_GB/s"] = b.bytes / median(tb) / 1e9;
  state.counters["threads"] = space.concurrency();
}

void storage_cases(benchmark::internal::Benchmark* b) {
  for (int G : {1, 8}) b->Args({65536, 8, G});
  b->ArgNames({"N", "Hkv", "G"})->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(2.0);
}
BENCHMARK_TEMPLATE(BM_DecodeStorage, float, kattn::bf16)->Apply(storage_cases);
BENCHMARK_TEMPLATE(BM_DecodeStorage, kattn::bf16, kattn::bf16)->Apply(storage_cases);
BENCHMARK_TEMPLATE(BM_DecodeStorage, float, kattn::fp16)->Apply(storage_cases);
BENCHMARK_TEMPLATE(BM_DecodeStorage, kattn::fp16, kattn::fp16)->Apply(storage_cases);

}  // namespace
