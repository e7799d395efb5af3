// Timing driver for kattn's Kokkos kernels on the default execution space (a GPU when Kokkos has
// one), without Google Benchmark, for perf/gpu/device_check.sh:
//   copy   device-to-device copy bandwidth (Kokkos::deep_copy, bytes read + written): the ceiling
//          the decode is measured against
//   fwd    kattn::attention (one split), float32 and float64, B=1 H=16 N=16384 D=128, non-causal
//   decode kattn::attention (planned split), float32 and float64, batch 1, 32 query heads, 8 KV heads, 128K keys
//   bwd    kattn::attention_backward (deterministic: query-pass dQ), float32 and float64, B=1 H=16 N=4096
//          D=128, non-causal; its spot check is an identity of dV (below)
// Each case: one warm-up call, then the median of timed calls (fence before and after each), as
// many as fit the per-case time budget (at least 1, at most --reps); random inputs, outputs
// poisoned with NaN first, and a spot check of some rows against a float64 host reference
// (max abs error; NaN = an unwritten row). One JSON line per case ("JSON {...}").
//
//   sweep  (only with --only sweep) forward and backward at N = 4096: the automatic tiles (level-0
//          scratch), the halving rule's smaller ones, and larger tiles in level 1 (global memory),
//          for the GPU tiles of tile_search.hpp
//
//   bench_kokkos_gpu [--quick] [--reps N] [--budget SECONDS] [--only fwd|bwd|decode|copy|sweep]
#include <Kokkos_Core.hpp>
#include <Kokkos_Random.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/backward.hpp"
#include "kattn/detail/tile_sizes.hpp"
#include "kattn/errors.hpp"

namespace {

using Space = Kokkos::DefaultExecutionSpace;
template <class T>
using View4 = Kokkos::View<T****, Kokkos::LayoutRight, Space::memory_space>;
template <class T>
using View3 = Kokkos::View<T***, Kokkos::LayoutRight, Space::memory_space>;

struct Config {
  bool quick = false;
  int reps = 10;
  double budget = 20.0;  // seconds of timed calls per case
  std::string only;
};

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  return xs[xs.size() / 2];
}

// Seconds per call of fn: `inner` back-to-back calls per sample, the median of the samples.
template <class Fn>
double time_calls(const Config& cfg, Fn&& fn, int inner = 1) {
  Space space;
  Kokkos::Timer t;
  fn();  // warm-up: allocations, module load
  space.fence();
  t.reset();
  fn();
  space.fence();
  const double first = t.seconds();  // one call
  if (first * inner * 2 > cfg.budget) return first;  // slow: the one timed call is all the budget allows
  const int reps = std::max(1, std::min(cfg.reps, static_cast<int>(cfg.budget / std::max(first * inner, 1e-9))));
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    space.fence();
    t.reset();
    for (int i = 0; i < inner; ++i) fn();
    space.fence();
    samples.push_back(t.seconds() / inner);
  }
  return median(samples);
}

template <class View>
void fill_random(const View& v, std::uint64_t seed) {
  Kokkos::Random_XorShift64_Pool<Space> pool(seed);
  auto flat = Kokkos::View<typename View::value_type*, Space::memory_space, Kokkos::MemoryUnmanaged>(v.data(), v.span());
  Kokkos::fill_random(flat, pool, typename View::value_type(-1), typename View::value_type(1));
}

template <class View>
void poison(const View& v) {
  Kokkos::deep_copy(v, std::numeric_limits<typename View::value_type>::quiet_NaN());
}

// Max abs difference between rows `rows` (query positions) of o and the float64 softmax(q k^T s) v
// computed on the host; head h of query position i reads KV head h / (Hq / Hkv).
template <class T>
double spot_check(const View4<T>& q, const View4<T>& k, const View4<T>& v, const View4<T>& o,
                  const std::vector<std::int64_t>& rows) {
  auto hq = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), q);
  auto hk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), k);
  auto hv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o);
  const std::int64_t Nk = k.extent(1);
  const int Hq = q.extent(2), Hkv = k.extent(2), D = q.extent(3), G = Hq / Hkv;
  const double scale = 1.0 / std::sqrt(double(D));
  double err = 0;
  std::vector<double> s(Nk), acc(D);
  for (const std::int64_t i : rows) {
    for (int h : {0, Hq - 1}) {
      const int kvh = h / G;
      double m = -std::numeric_limits<double>::infinity();
      for (std::int64_t j = 0; j < Nk; ++j) {
        double d = 0;
        for (int c = 0; c < D; ++c) d += double(hq(0, i, h, c)) * double(hk(0, j, kvh, c));
        s[j] = d * scale;
        m = std::max(m, s[j]);
      }
      double l = 0;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (std::int64_t j = 0; j < Nk; ++j) {
        const double p = std::exp(s[j] - m);
        l += p;
        for (int c = 0; c < D; ++c) acc[c] += p * double(hv(0, j, kvh, c));
      }
      for (int c = 0; c < D; ++c) {
        const double d = std::abs(double(ho(0, i, h, c)) - acc[c] / l);
        err = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(err, d);
      }
    }
  }
  return err;
}

const char* type_name(float) { return "float32"; }
const char* type_name(double) { return "float64"; }

template <class T>
void bench_forward(const Config& cfg, std::int64_t N, int block_q = 0, int block_k = 0) {
  const int B = 1, H = 16, D = 128;
  Space space;
  View4<T> q("q", B, N, H, D), k("k", B, N, H, D), v("v", B, N, H, D), o("o", B, N, H, D);
  View3<T> lse("lse", B, H, N);
  fill_random(q, 1);
  fill_random(k, 2);
  fill_random(v, 3);
  poison(o);
  kattn::Options opt;
  opt.splits = 1;  // the tiled forward, no merge
  opt.block_q = block_q;
  opt.block_k = block_k;
  const kattn::TilePlan plan = kattn::plan_tiles<Space, T>(space, D, N, opt);
  const double s = time_calls(cfg, [&] { kattn::attention(space, q, kattn::kv::dense(k, v), o, lse, opt); });
  const double flops = 4.0 * B * H * double(N) * double(N) * D;
  const double err = spot_check(q, k, v, o, {0, N / 3, N - 1});
  std::printf(
      "JSON {\"bench\": \"kattn_forward\", \"dtype\": \"%s\", \"B\": %d, \"H\": %d, \"N\": %lld, \"D\": %d, "
      "\"causal\": false, \"ms\": %.4f, \"tflops\": %.4f, \"block_q\": %d, \"block_k\": %d, \"scratch_level\": %d, "
      "\"scratch_bytes\": %zu, \"tiles\": \"%s\", \"spot_max_abs_err\": %.3e}\n",
      type_name(T()), B, H, static_cast<long long>(N), D, s * 1e3, flops / s / 1e12, plan.geometry.block_q,
      plan.geometry.block_k, plan.scratch_level, plan.scratch_bytes, block_q ? "given" : "automatic", err);
  std::fflush(stdout);
}

// The backward, deterministic. Spot check without a host backward: with dO = 1 everywhere, each
// column of dV sums to N (the rows of P sum to 1); the relative error of that sum is reported.
template <class T>
void bench_backward(const Config& cfg, std::int64_t N, int block_q = 0, int block_k = 0) {
  const int B = 1, H = 16, D = 128;
  Space space;
  View4<T> q("q", B, N, H, D), k("k", B, N, H, D), v("v", B, N, H, D), o("o", B, N, H, D);
  View4<T> dout("dout", B, N, H, D), dq("dq", B, N, H, D), dk("dk", B, N, H, D), dv("dv", B, N, H, D);
  View3<T> lse("lse", B, H, N);
  fill_random(q, 8);
  fill_random(k, 9);
  fill_random(v, 10);
  Kokkos::deep_copy(dout, T(1));
  kattn::Options opt;
  opt.splits = 1;
  kattn::attention(space, q, kattn::kv::dense(k, v), o, lse, opt);
  opt.block_q = block_q;
  opt.block_k = block_k;
  kattn::BackwardOptions bopt;
  bopt.deterministic = true;
  poison(dv);
  kattn::BackwardInfo info;
  const double s = time_calls(
      cfg, [&] { info = kattn::attention_backward(space, q, kattn::kv::dense(k, v), o, lse, dout, dq, dk, dv, opt, bopt); });
  // Every row of P sums to 1, so with dO = 1 each column of dV sums to N over the keys (head 0).
  auto hdv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dv);
  double err = 0;
  for (int c = 0; c < D; ++c) {
    double sum = 0;
    for (std::int64_t j = 0; j < N; ++j) sum += double(hdv(0, j, 0, c));
    const double d = std::abs(sum - double(N)) / double(N);
    err = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(err, d);
  }
  const double flops = 10.0 * B * H * double(N) * double(N) * D;  // 5 products of N x N x D
  std::printf(
      "JSON {\"bench\": \"kattn_backward\", \"dtype\": \"%s\", \"B\": %d, \"H\": %d, \"N\": %lld, \"D\": %d, "
      "\"causal\": false, \"ms\": %.4f, \"tflops\": %.4f, \"block_q\": %d, \"block_k\": %d, \"tiles\": \"%s\", "
      "\"workspace_bytes\": %zu, \"spot_dv_sum_rel_err\": %.3e}\n",
      type_name(T()), B, H, static_cast<long long>(N), D, s * 1e3, flops / s / 1e12, info.block_q, info.block_k,
      block_q ? "given" : "automatic", info.workspace_bytes, err);
  std::fflush(stdout);
}

template <class T>
void bench_decode(const Config& cfg) {
  const int B = 1, Hq = 32, Hkv = 8, D = 128;
  const std::int64_t ctx = cfg.quick ? 16384 : 131072;
  Space space;
  View4<T> q("q", B, 1, Hq, D), k("k", B, ctx, Hkv, D), v("v", B, ctx, Hkv, D), o("o", B, 1, Hq, D);
  View3<T> lse("lse", B, Hq, 1);
  fill_random(q, 4);
  fill_random(k, 5);
  fill_random(v, 6);
  poison(o);
  kattn::Options opt;
  kattn::SplitPlan plan;
  const double s = time_calls(cfg, [&] { plan = kattn::attention(space, q, kattn::kv::dense(k, v), o, lse, opt); }, 20);
  const double bytes = 2.0 * double(ctx) * Hkv * D * sizeof(T) + 2.0 * Hq * D * sizeof(T);
  const double err = spot_check(q, k, v, o, {0});
  std::printf(
      "JSON {\"bench\": \"kattn_decode\", \"dtype\": \"%s\", \"B\": %d, \"Hq\": %d, \"Hkv\": %d, \"ctx\": %lld, "
      "\"D\": %d, \"us\": %.3f, \"gbs\": %.2f, \"splits\": %d, \"units\": %lld, \"spot_max_abs_err\": %.3e}\n",
      type_name(T()), B, Hq, Hkv, static_cast<long long>(ctx), D, s * 1e6, bytes / s / 1e9, plan.splits,
      static_cast<long long>(plan.units), err);
  std::fflush(stdout);
}

void bench_copy(const Config& cfg) {
  const std::size_t n = cfg.quick ? (std::size_t(1) << 24) : (std::size_t(1) << 27);  // doubles: 1 GiB
  Kokkos::View<double*, Space::memory_space> a("a", n), b("b", n);
  fill_random(a, 7);
  const double s = time_calls(cfg, [&] { Kokkos::deep_copy(Space(), b, a); }, 5);
  std::printf("JSON {\"bench\": \"kokkos_copy\", \"bytes\": %zu, \"us\": %.3f, \"gbs\": %.2f}\n", 2 * n * sizeof(double),
              s * 1e6, 2.0 * n * sizeof(double) / s / 1e9);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char* argv[]) {
  Kokkos::ScopeGuard guard(argc, argv);
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      cfg.quick = true;
    } else if (a == "--reps" && i + 1 < argc) {
      cfg.reps = std::atoi(argv[++i]);
    } else if (a == "--budget" && i + 1 < argc) {
      cfg.budget = std::atof(argv[++i]);
    } else if (a == "--only" && i + 1 < argc) {
      cfg.only = argv[++i];
    } else {
      std::fprintf(stderr, "bench_kokkos_gpu: unknown argument '%s'\n", a.c_str());
      return 2;
    }
  }
  std::printf("bench_kokkos_gpu: Kokkos %d, execution space %s, concurrency %d\n", KOKKOS_VERSION, Space::name(),
              Space().concurrency());
  std::fflush(stdout);
  try {
    if (cfg.only.empty() || cfg.only == "copy") bench_copy(cfg);
    if (cfg.only.empty() || cfg.only == "decode") {
      bench_decode<double>(cfg);
      bench_decode<float>(cfg);
    }
    const std::int64_t N = cfg.quick ? 2048 : 16384;
    if (cfg.only.empty() || cfg.only == "fwd") {
      bench_forward<double>(cfg, N);
      bench_forward<float>(cfg, N);
    }
    const std::int64_t Nb = cfg.quick ? 1024 : 4096;
    if (cfg.only.empty() || cfg.only == "bwd") {
      bench_backward<double>(cfg, Nb);
      bench_backward<float>(cfg, Nb);
    }
    // Tile sizes for the GPU tiles (detail/tile_search.hpp): the automatic ones fit level-0 scratch
    // (20 x 16 float, 8 x 8 double forward at D = 128 under Kokkos 4.6); the halving rule's (16 x 16,
    // 8 x 8); larger ones go to level 1 (global memory). N = 4096 keeps the sweep short.
    if (cfg.only == "sweep") {
      const std::int64_t Ns = cfg.quick ? 1024 : 4096;
      bench_forward<float>(cfg, Ns);
      bench_forward<double>(cfg, Ns);
      for (const auto& [bq, bk] : std::vector<std::pair<int, int>>{{8, 8}, {16, 16}, {32, 32}, {64, 64}, {128, 64}}) {
        bench_forward<float>(cfg, Ns, bq, bk);
        bench_forward<double>(cfg, Ns, bq, bk);
      }
      for (const auto& [bq, bk] : std::vector<std::pair<int, int>>{{8, 8}, {16, 16}, {32, 32}, {64, 64}}) {
        bench_backward<float>(cfg, Ns, bq, bk);
        bench_backward<double>(cfg, Ns, bq, bk);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_kokkos_gpu: %s\n", e.what());
    return 1;
  }
  return 0;
}
