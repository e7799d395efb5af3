// The baseline a user would pick instead of kattn: textbook attention with every product on an
// optimised BLAS (OpenBLAS through cblas), B = 1, one head, non-causal, [N, D] row-major.
//   forward   S = scale Q K^T (gemm), row softmax in place (max, exp, sum, times 1/sum), O = P V (gemm)
//   backward  S and P recomputed from Q, K and the forward's lse, as FlashAttention's backward (and
//             kattn's) also recomputes them; dV = P^T dO, dP = dO V^T, D = rowsum(dO * O),
//             dS = P * (dP - D) * scale, dQ = dS K, dK = dS^T Q: five gemms of 2 N^2 D each.
// GFLOP/s counts as bench_forward and bench_backward do (4 N^2 D forward, 2.5x that backward).
// The row loops run on Kokkos' host space (its thread count: --kokkos-num-threads or
// OMP_NUM_THREADS), OpenBLAS on its own threads (OPENBLAS_NUM_THREADS, else OMP_NUM_THREADS);
// the label names the kernels OpenBLAS picked (OPENBLAS_CORETYPE overrides its detection).
// vexp = 1 takes the softmax's exp2 from kattn's vector polynomial, so that the baseline loses
// nothing to a scalar libm exp; vexp = 0 is the C library's exp2, the textbook as written.
// TiledOverTextbookBlas times kattn's tiled pass and this one alternately on the same inputs and
// reports the median of the per-iteration ratios, which noise on a shared machine mostly cancels.
#include <Kokkos_Core.hpp>
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/backward.hpp"
#include "kattn/detail/exp2.hpp"
#include "machine.hpp"
#include "random_view.hpp"

namespace {

using Host = Kokkos::DefaultHostExecutionSpace;
template <class T>
using HostView4 = kattn::perf::View4<T, Kokkos::HostSpace>;  // where BLAS reads them
template <class T>
using HostView3 = kattn::perf::View3<T, Kokkos::HostSpace>;

constexpr double kLog2e = 1.4426950408889634074;
constexpr double kLn2 = 0.69314718055994530942;

template <class T>
struct Inputs {
  int n, d;
  T scale;
  HostView4<T> q, k, v, dout;
  Inputs(int n_, int d_)
      : n(n_),
        d(d_),
        scale(T(1) / std::sqrt(T(d_))),
        q(kattn::perf::random_view<T, Kokkos::HostSpace>("q", n_, d_, 1)),
        k(kattn::perf::random_view<T, Kokkos::HostSpace>("k", n_, d_, 2)),
        v(kattn::perf::random_view<T, Kokkos::HostSpace>("v", n_, d_, 3)),
        dout(kattn::perf::random_view<T, Kokkos::HostSpace>("do", n_, d_, 4)) {}
};

// The forward writes o and lse (natural log), which the backward reads; the backward writes dq, dk, dv.
template <class T>
struct Outputs {
  HostView4<T> o, dq, dk, dv;
  HostView3<T> lse;
  Outputs(int n, int d)
      : o("o", 1, n, 1, d), dq("dq", 1, n, 1, d), dk("dk", 1, n, 1, d), dv("dv", 1, n, 1, d), lse("lse", 1, 1, n) {}
};

// C = alpha op(A) op(B), row-major.
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc);
}
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, double alpha, const double* a, int lda,
          const double* b, int ldb, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, 0.0, c, ldc);
}

// f(i) for every row i on the host space's threads.
template <class F>
void for_each_row(int n, const F& f) {
  const Host host;
  Kokkos::parallel_for("textbook_blas_rows", Kokkos::RangePolicy<Host, Kokkos::IndexType<int>>(host, 0, n), f);
  host.fence();
}

template <class T>
T row_max(const T* x, int n) {
  T m = -std::numeric_limits<T>::infinity();
  int j = 0;
#if KATTN_HOST_SIMD
  namespace simd = kattn::detail::simd;
  constexpr int W = simd::width<T>();
  simd::vec<T> acc = simd::splat(m);
  for (; j + W <= n; j += W) {
    const simd::vec<T> x_j = simd::load(x + j);
    acc = x_j > acc ? x_j : acc;
  }
  for (int l = 0; l < W; ++l) m = std::max(m, acc[l]);
#endif
  for (; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

// x[j] = 2^(x[j] - shift) in place; returns the sum. GCC vectorises no libm call without
// -ffast-math, hence kattn's polynomial for vector_exp (libm where there is no host SIMD).
template <class T>
T exp2_shifted(T* x, int n, T shift, [[maybe_unused]] bool vector_exp) {
  T sum = 0;
  int j = 0;
#if KATTN_HOST_SIMD
  if (vector_exp) {
    namespace simd = kattn::detail::simd;
    constexpr int W = simd::width<T>();
    simd::vec<T> acc = simd::splat(T(0));
    for (; j + W <= n; j += W) {
      const simd::vec<T> e = kattn::detail::exp2<T>(simd::load(x + j) - shift);
      simd::store(x + j, e);
      acc += e;
    }
    for (int l = 0; l < W; ++l) sum += acc[l];
    for (; j < n; ++j) sum += x[j] = kattn::detail::exp2_scalar(x[j] - shift);
    return sum;
  }
#endif
  for (; j < n; ++j) sum += x[j] = std::exp2(x[j] - shift);
  return sum;
}

// The textbook passes with their N x N arrays, allocated (and touched) once, outside the timing.
template <class T>
class TextbookBlas {
 public:
  TextbookBlas(int n, bool backward)
      : probabilities_(std::size_t(n) * n), score_grads_(backward ? std::size_t(n) * n : 0), row_dots_(n) {}

  void forward(const Inputs<T>& in, const Outputs<T>& out, bool vector_exp) {
    const int n = in.n, d = in.d;
    T* p = probabilities_.data();
    T* lse = out.lse.data();
    // Base 2 throughout: log2(e) folds into the gemm's alpha.
    gemm(CblasNoTrans, CblasTrans, n, n, d, T(in.scale * kLog2e), in.q.data(), d, in.k.data(), d, p, n);
    for_each_row(n, [=](const int i) {
      T* row = p + std::size_t(i) * n;
      const T m = row_max(row, n);
      const T l = exp2_shifted(row, n, m, vector_exp);
      const T inv_l = T(1) / l;
      for (int j = 0; j < n; ++j) row[j] *= inv_l;
      lse[i] = T((m + std::log2(l)) * kLn2);
    });
    gemm(CblasNoTrans, CblasNoTrans, n, d, n, T(1), p, n, in.v.data(), d, out.o.data(), d);
  }

  // Reads out.o and out.lse (a forward's), writes out.dq, out.dk, out.dv.
  void backward(const Inputs<T>& in, const Outputs<T>& out, bool vector_exp) {
    const int n = in.n, d = in.d;
    const T scale = in.scale;
    T* p = probabilities_.data();
    T* ds = score_grads_.data();
    T* row_dots = row_dots_.data();
    const T *o = out.o.data(), *dout = in.dout.data(), *lse = out.lse.data();
    gemm(CblasNoTrans, CblasTrans, n, n, d, T(scale * kLog2e), in.q.data(), d, in.k.data(), d, p, n);
    for_each_row(n, [=](const int i) {
      exp2_shifted(p + std::size_t(i) * n, n, T(lse[i] * kLog2e), vector_exp);  // P = exp(S - lse)
      T dot = 0;
      for (int c = 0; c < d; ++c) dot += dout[std::size_t(i) * d + c] * o[std::size_t(i) * d + c];
      row_dots[i] = dot;
    });
    gemm(CblasTrans, CblasNoTrans, n, d, n, T(1), p, n, dout, d, out.dv.data(), d);  // dV = P^T dO
    gemm(CblasNoTrans, CblasTrans, n, n, d, T(1), dout, d, in.v.data(), d, ds, n);   // dP = dO V^T
    for_each_row(n, [=](const int i) {
      const T* p_i = p + std::size_t(i) * n;
      T* ds_i = ds + std::size_t(i) * n;
      const T row_dot = row_dots[i];  // hoisted: ds_i might alias it as far as the compiler knows
      for (int j = 0; j < n; ++j) ds_i[j] = p_i[j] * (ds_i[j] - row_dot) * scale;  // dS over dP
    });
    gemm(CblasNoTrans, CblasNoTrans, n, d, n, T(1), ds, n, in.k.data(), d, out.dq.data(), d);  // dQ = dS K
    gemm(CblasTrans, CblasNoTrans, n, d, n, T(1), ds, n, in.q.data(), d, out.dk.data(), d);    // dK = dS^T Q
  }

  double workspace_mb() const {
    return double((probabilities_.size() + score_grads_.size() + row_dots_.size()) * sizeof(T)) / 1e6;
  }

 private:
  std::vector<T> probabilities_, score_grads_, row_dots_;
};

// Largest |x - ref| over the largest |ref|, accumulated over the arrays of one comparison.
class RelativeError {
 public:
  void add(const std::vector<double>& ref, const std::vector<double>& x) {
    double diff = 0, mag = 0;
    for (std::size_t i = 0; i < ref.size(); ++i) {
      const double e = std::abs(x[i] - ref[i]);
      if (!(e <= diff)) diff = e;  // a NaN sticks (std::max would drop it)
      mag = std::max(mag, std::abs(ref[i]));
    }
    const double relative = diff / (mag > 0 ? mag : 1);
    if (!(relative <= worst_)) worst_ = relative;
  }
  double worst() const { return worst_; }

 private:
  double worst_ = 0;
};

template <class View>
std::vector<double> row_of(const View& v, int i, int d) {
  return std::vector<double>(v.data() + std::size_t(i) * d, v.data() + std::size_t(i + 1) * d);
}

// Checks the textbook pass in double precision, one query row at a time: O, lse and dQ of `rows`;
// dK and dV too when `rows` are all rows (each row adds its share to them).
template <class T>
double error_against_double(const Inputs<T>& in, const Outputs<T>& out, const std::vector<int>& rows, bool backward) {
  const int n = in.n, d = in.d;
  const double scale = in.scale;
  const auto at = [d](const HostView4<T>& x, int i, int c) { return double(x.data()[std::size_t(i) * d + c]); };
  std::vector<double> o_ref, o, lse_ref, lse, dq_ref, dq, dk_ref(std::size_t(n) * d), dv_ref(std::size_t(n) * d);
  std::vector<double> p(n), ds(n);
  for (const int i : rows) {
    double m = -std::numeric_limits<double>::infinity(), l = 0;
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int c = 0; c < d; ++c) s += at(in.q, i, c) * at(in.k, j, c);
      m = std::max(m, p[j] = scale * s);
    }
    for (int j = 0; j < n; ++j) l += p[j] = std::exp(p[j] - m);
    std::vector<double> o_i(d, 0.0), dq_i(d, 0.0);
    for (int j = 0; j < n; ++j) {
      p[j] /= l;
      for (int c = 0; c < d; ++c) o_i[c] += p[j] * at(in.v, j, c);
    }
    o_ref.insert(o_ref.end(), o_i.begin(), o_i.end());
    const auto o_row = row_of(out.o, i, d);
    o.insert(o.end(), o_row.begin(), o_row.end());
    lse_ref.push_back(m + std::log(l));
    lse.push_back(out.lse.data()[i]);
    if (!backward) continue;
    double row_dot = 0;
    for (int c = 0; c < d; ++c) row_dot += at(in.dout, i, c) * o_i[c];
    for (int j = 0; j < n; ++j) {
      double dp = 0;
      for (int c = 0; c < d; ++c) dp += at(in.dout, i, c) * at(in.v, j, c);
      ds[j] = p[j] * (dp - row_dot) * scale;
      for (int c = 0; c < d; ++c) {
        dq_i[c] += ds[j] * at(in.k, j, c);
        dk_ref[std::size_t(j) * d + c] += ds[j] * at(in.q, i, c);
        dv_ref[std::size_t(j) * d + c] += p[j] * at(in.dout, i, c);
      }
    }
    dq_ref.insert(dq_ref.end(), dq_i.begin(), dq_i.end());
    const auto dq_row = row_of(out.dq, i, d);
    dq.insert(dq.end(), dq_row.begin(), dq_row.end());
  }
  RelativeError error;
  error.add(o_ref, o);
  error.add(lse_ref, lse);
  if (backward) {
    error.add(dq_ref, dq);
    if (int(rows.size()) == n) {
      error.add(dk_ref, std::vector<double>(out.dk.data(), out.dk.data() + out.dk.span()));
      error.add(dv_ref, std::vector<double>(out.dv.data(), out.dv.data() + out.dv.span()));
    }
  }
  return error.worst();
}

template <class T>
double tolerance() {
  return std::is_same<T, float>::value ? 1e-3 : 1e-9;
}

// The pass against double precision, outside the timing: every row of a pass of its own at
// N = 64 (dK, dV included), and three rows of the benchmark's `out`. False (and the benchmark
// skipped) on a mismatch.
template <class T>
bool passes_check(benchmark::State& state, const Inputs<T>& in, const Outputs<T>& out, bool backward, bool vector_exp) {
  const int small = 64;
  const Inputs<T> small_in(small, in.d);
  const Outputs<T> small_out(small, in.d);
  TextbookBlas<T> blas(small, backward);
  blas.forward(small_in, small_out, vector_exp);
  if (backward) blas.backward(small_in, small_out, vector_exp);
  std::vector<int> every_row(small);
  for (int i = 0; i < small; ++i) every_row[i] = i;
  const double worst = std::max(error_against_double(small_in, small_out, every_row, backward),
                                error_against_double(in, out, {0, in.n / 2, in.n - 1}, backward));
  state.counters["max_rel_err"] = worst;
  if (worst <= tolerance<T>()) return true;
  state.SkipWithError(("textbook pass disagrees with double precision: " + std::to_string(worst)).c_str());
  return false;
}

// The shared object that defines `symbol`'s address. A process that also loads the reference
// BLAS (Debian's Kokkos Kernels links libblas.so.3, which carries a cblas) binds cblas_sgemm to
// whichever library the dynamic linker meets first.
std::string library_of(const void* symbol) {
  Dl_info info;
  return dladdr(symbol, &info) != 0 && info.dli_fname ? info.dli_fname : "?";
}

// True when the gemms run in OpenBLAS, else the benchmark is skipped naming the library they run in.
bool gemm_is_openblas(benchmark::State& state) {
  const std::string openblas = library_of(reinterpret_cast<const void*>(&openblas_get_corename));
  for (const void* gemm : {reinterpret_cast<const void*>(&cblas_sgemm), reinterpret_cast<const void*>(&cblas_dgemm)})
    if (library_of(gemm) != openblas) {
      state.SkipWithError(("cblas gemm binds to " + library_of(gemm) + ", not OpenBLAS (" + openblas + ")").c_str());
      return false;
    }
  return true;
}

void describe_threads(benchmark::State& state) {
  state.SetLabel(std::string("openblas ") + openblas_get_corename());
  state.counters["blas_threads"] = openblas_get_num_threads();
  state.counters["host_threads"] = Host().concurrency();
}

template <class T>
void BM_TextbookBlasForward(benchmark::State& state) {
  if (!gemm_is_openblas(state)) return;
  const int n = static_cast<int>(state.range(0)), d = static_cast<int>(state.range(1));
  const bool vector_exp = state.range(2) != 0;
  const Inputs<T> in(n, d);
  const Outputs<T> out(n, d);
  TextbookBlas<T> blas(n, false);
  blas.forward(in, out, vector_exp);  // warm-up: OpenBLAS starts its threads, pages are touched
  if (!passes_check(state, in, out, false, vector_exp)) return;
  const std::size_t base = kattn::perf::reset_peak_memory();
  kattn::perf::LoopTimer timer;
  timer.start();
  for (auto _ : state) blas.forward(in, out, vector_exp);
  const double flops = 4.0 * n * double(n) * d;
  state.counters["GFLOP/s"] = flops / timer.seconds(state.iterations()) / 1e9;
  state.counters["extra_MB"] = kattn::perf::extra_memory_mb(base);
  state.counters["workspace_MB"] = blas.workspace_mb();
  describe_threads(state);
}

template <class T>
void BM_TextbookBlasBackward(benchmark::State& state) {
  if (!gemm_is_openblas(state)) return;
  const int n = static_cast<int>(state.range(0)), d = static_cast<int>(state.range(1));
  const bool vector_exp = state.range(2) != 0;
  const Inputs<T> in(n, d);
  const Outputs<T> out(n, d);
  TextbookBlas<T> blas(n, true);
  blas.forward(in, out, vector_exp);   // the o and lse the backward reads, untimed
  blas.backward(in, out, vector_exp);  // warm-up
  if (!passes_check(state, in, out, true, vector_exp)) return;
  const std::size_t base = kattn::perf::reset_peak_memory();
  kattn::perf::LoopTimer timer;
  timer.start();
  for (auto _ : state) blas.backward(in, out, vector_exp);
  const double flops = 2.5 * 4.0 * n * double(n) * d;
  state.counters["GFLOP/s"] = flops / timer.seconds(state.iterations()) / 1e9;
  state.counters["extra_MB"] = kattn::perf::extra_memory_mb(base);
  state.counters["workspace_MB"] = blas.workspace_mb();
  describe_threads(state);
}

enum class Pass { forward, backward };

double median(std::vector<double> x) {
  std::sort(x.begin(), x.end());
  return x[x.size() / 2];
}
double min(const std::vector<double>& x) { return *std::min_element(x.begin(), x.end()); }
double max(const std::vector<double>& x) { return *std::max_element(x.begin(), x.end()); }

// Largest difference between kattn's and the textbook's outputs of one pass, relative as above.
template <class T>
double difference(const Outputs<T>& a, const Outputs<T>& b, Pass pass) {
  const auto all = [](const auto& v) { return std::vector<double>(v.data(), v.data() + v.span()); };
  RelativeError error;
  if (pass == Pass::forward) {
    error.add(all(a.o), all(b.o));
    error.add(all(a.lse), all(b.lse));
  } else {
    error.add(all(a.dq), all(b.dq));
    error.add(all(a.dk), all(b.dk));
    error.add(all(a.dv), all(b.dv));
  }
  return error.worst();
}

// kattn's tiled pass (as bench_forward / bench_backward call it) and the textbook one on the same
// inputs, alternating which goes first. ratio = kattn time / textbook time; speedup = its inverse.
template <class T, Pass pass>
void BM_TiledOverTextbookBlas(benchmark::State& state) {
  if (!gemm_is_openblas(state)) return;
  const int n = static_cast<int>(state.range(0)), d = static_cast<int>(state.range(1));
  const bool vector_exp = true;
  kattn::Options opt;
  opt.splits = 1;  // the tiled forward, no merge
  const Inputs<T> in(n, d);
  const Outputs<T> tiled(n, d), textbook(n, d);
  TextbookBlas<T> blas(n, pass == Pass::backward);
  const Host host;
  const auto run_tiled = [&] {
    if (pass == Pass::forward)
      kattn::attention(host, in.q, kattn::kv::dense(in.k, in.v), tiled.o, tiled.lse, opt);
    else
      kattn::attention_backward(host, in.q, kattn::kv::dense(in.k, in.v), tiled.o, tiled.lse, in.dout, tiled.dq,
                                tiled.dk, tiled.dv, opt);
    host.fence();
  };
  const auto run_textbook = [&] {
    if (pass == Pass::forward)
      blas.forward(in, textbook, vector_exp);
    else
      blas.backward(in, textbook, vector_exp);
  };
  // Both backwards read kattn's forward (o, lse).
  kattn::attention(host, in.q, kattn::kv::dense(in.k, in.v), tiled.o, tiled.lse, opt);
  host.fence();
  Kokkos::deep_copy(textbook.o, tiled.o);
  Kokkos::deep_copy(textbook.lse, tiled.lse);
  run_tiled();  // warm-up
  run_textbook();
  std::vector<double> tiled_s, textbook_s, ratio, speedup;
  const auto seconds = [](const auto& f) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  for (auto _ : state) {
    double t_tiled, t_textbook;
    if (tiled_s.size() % 2 == 0) {
      t_tiled = seconds(run_tiled);
      t_textbook = seconds(run_textbook);
    } else {
      t_textbook = seconds(run_textbook);
      t_tiled = seconds(run_tiled);
    }
    tiled_s.push_back(t_tiled), textbook_s.push_back(t_textbook);
    ratio.push_back(t_tiled / t_textbook), speedup.push_back(t_textbook / t_tiled);
  }
  const double diff = difference(tiled, textbook, pass);
  if (!(diff <= tolerance<T>())) {
    state.SkipWithError(("kattn and the textbook disagree: " + std::to_string(diff)).c_str());
    return;
  }
  const double flops = (pass == Pass::forward ? 1.0 : 2.5) * 4.0 * n * double(n) * d;
  state.counters["ratio_median"] = median(ratio);
  state.counters["speedup_median"] = median(speedup);
  state.counters["speedup_min_times"] = min(textbook_s) / min(tiled_s);  // fastest against fastest
  state.counters["speedup_lo"] = min(speedup);
  state.counters["speedup_hi"] = max(speedup);
  state.counters["tiled_ms_min"] = 1e3 * min(tiled_s);
  state.counters["blas_ms_min"] = 1e3 * min(textbook_s);
  state.counters["tiled_GFLOP/s_best"] = flops / min(tiled_s) / 1e9;
  state.counters["blas_GFLOP/s_best"] = flops / min(textbook_s) / 1e9;
  state.counters["max_rel_diff"] = diff;
  describe_threads(state);
}

void shapes(benchmark::internal::Benchmark* b) {
  b->ArgNames({"N", "D", "vexp"})->ArgsProduct({{1024, 2048, 4096}, {64, 128}, {1}})->Args({4096, 128, 0});
  b->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(0.3);
}
void paired(benchmark::internal::Benchmark* b) {
  b->ArgNames({"N", "D"})->Args({4096, 128})->Args({4096, 64})->Iterations(9);
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK_TEMPLATE(BM_TextbookBlasForward, float)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_TextbookBlasForward, double)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_TextbookBlasBackward, float)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_TextbookBlasBackward, double)->Apply(shapes);
BENCHMARK_TEMPLATE(BM_TiledOverTextbookBlas, float, Pass::forward)->Apply(paired);
BENCHMARK_TEMPLATE(BM_TiledOverTextbookBlas, float, Pass::backward)->Apply(paired);
BENCHMARK_TEMPLATE(BM_TiledOverTextbookBlas, double, Pass::forward)->Apply(paired);
BENCHMARK_TEMPLATE(BM_TiledOverTextbookBlas, double, Pass::backward)->Apply(paired);

}  // namespace
