// Decode (one new query per sequence) against a long KV cache, D = 128: the figure of merit is
// GB/s of K and V read, against the streaming read bandwidth of the same threads measured right
// before each case (perf/bandwidth.hpp). BM_Decode: batch x context x GQA (8:1 and 1:1, 8 KV
// heads; and 1 KV head, where only splitting makes more than one unit of work) x split (none /
// planned) x cache (dense / paged with 16 keys per page, pages shuffled or in order).
// BM_DecodeKeyTile: keys per tile (the tuning's row_tile_kv_bytes picks 64 at 8 heads).
//
// The machine may be shared: each case reports the best and the median time of its iterations
// and the best of four stream trials, so that ratios compare like with like; `cpu_` counters use
// the process's CPU time per thread instead of the wall clock (what the threads reach while
// they run; on one thread the fairer measure when other jobs take the core part of the time).
#include <Kokkos_Core.hpp>
#include <Kokkos_Random.hpp>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bandwidth.hpp"
#include "kattn/decode.hpp"

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
  Kokkos::Random_XorShift64_Pool<typename View::execution_space> pool(seed);
  Kokkos::fill_random(v, pool, -1.0, 1.0);
}

Index index_view(const std::vector<std::int64_t>& values, const char* label) {
  Index v(std::string(label), values.size());
  std::copy(values.begin(), values.end(), v.data());
  return v;
}

template <class T>
void BM_Decode(benchmark::State& state) {
  const int B = static_cast<int>(state.range(0));
  const std::int64_t N = state.range(1);
  const int Hkv = static_cast<int>(state.range(2)), G = static_cast<int>(state.range(3));
  const bool split = state.range(4) != 0;
  const int page = static_cast<int>(state.range(5));
  const bool shuffled = state.range(6) != 0;
  const int block_k = static_cast<int>(state.range(7));
  const int Hq = Hkv * G, D = kHeadDim;
  const Kokkos::DefaultExecutionSpace space;
  kattn::Options opt;
  opt.splits = split ? 0 : 1;
  opt.block_k = block_k;

  View4<T> q("q", B, 1, Hq, D), o("o", B, 1, Hq, D);
  View3<T> lse("lse", B, Hq, 1);
  fill(q, 1);
  View4<T> k, v;
  kattn::PagedLayout<> layout;
  View3<T> q_r, o_r;
  View2<T> lse_r;
  if (page == 0) {
    k = View4<T>("k", B, N, Hkv, D);
    v = View4<T>("v", B, N, Hkv, D);
  } else {
    const std::int64_t per_seq = (N + page - 1) / page, pages = B * per_seq;
    k = View4<T>("k", pages, page, Hkv, D);
    v = View4<T>("v", pages, page, Hkv, D);
    std::vector<std::int64_t> perm(pages), q_indptr(B + 1), page_indptr(B + 1), last(B, N - (per_seq - 1) * page);
    std::iota(perm.begin(), perm.end(), 0);
    if (shuffled) std::shuffle(perm.begin(), perm.end(), std::mt19937_64(42));
    for (int b = 0; b <= B; ++b) q_indptr[b] = b, page_indptr[b] = b * per_seq;
    layout = kattn::make_paged_layout(index_view(q_indptr, "q_indptr"), index_view(page_indptr, "page_indptr"),
                                      index_view(perm, "page_indices"), index_view(last, "last_page_len"), page);
    q_r = View3<T>(q.data(), B, Hq, D);
    o_r = View3<T>(o.data(), B, Hq, D);
    lse_r = View2<T>("lse", B, Hq);
  }
  fill(k, 2);
  fill(v, 3);
  const auto run = [&]() {
    if (page == 0) return kattn::splitkv(space, q, k, v, o, lse, opt);
    return kattn::splitkv(space, q_r, k, v, o_r, lse_r, layout, opt);
  };
  const kattn::SplitPlan plan = run();  // warm-up
  space.fence();
  const kattn::perf::StreamRate stream = kattn::perf::stream_read_rate(space, std::size_t(256) << 20);

  std::vector<double> times, cpu_times;
  const int threads = space.concurrency();
  for (auto _ : state) {
    const double c0 = kattn::perf::process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    run();
    space.fence();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    cpu_times.push_back((kattn::perf::process_cpu_seconds() - c0) / threads);
  }
  std::sort(times.begin(), times.end());
  std::sort(cpu_times.begin(), cpu_times.end());
  const double bytes = 2.0 * B * N * Hkv * D * sizeof(T);
  const double best = bytes / times.front() / 1e9, median = bytes / times[times.size() / 2] / 1e9;
  const double best_cpu = bytes / cpu_times.front() / 1e9;
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

BENCHMARK_TEMPLATE(BM_Decode, float)->Apply(decode_cases);
template <class T>
void BM_DecodeKeyTile(benchmark::State& state) {
  BM_Decode<T>(state);
}

BENCHMARK_TEMPLATE(BM_DecodeKeyTile, float)->Apply(key_tiles);

}  // namespace
