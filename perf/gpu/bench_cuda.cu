// Timing program of the CUDA kernels (perf/gpu/device_check.sh runs it on the H200).
//   1. device-to-device copy bandwidth (bytes read + written): the decode ceiling
//   2. split-KV paged decode, bf16, batch 1, Hq=32, Hkv=8, D=128, page 16 (shuffled
//      pages), contexts 32K/64K/128K, planned splits: GB/s = K+V bytes / time; then (not with
//      --quick) the same at 8-128 splits, and batches 4, 16, 64 at 32K keys, planned and 1-8 splits
//   3. forward, bf16, B=1, H=16, N=16384, D=128, non-causal and causal: every sm90
//      variant and the sm80 kernel; TFLOP/s = 4*B*H*N^2*D (half of it when causal) / time
//   4. (not with --quick) the automatic forward at D = 64/128/256, N = 1K/4K/16K, B = 16K / N,
//      H = 2048 / D, causal and not
// Median of repeated runs, 3 input sets rotated (each larger than the 60 MB L2 or
// touching different lines), random N(0,1)-like data (never zeros). Each forward variant is
// also compared with the sm80 kernel's output (relative L2) as a sanity check at full size.
// Prints one JSON object per line (prefix "JSON ") and a table.
#include <cuda_runtime.h>

#include <kattn/cuda/decode.hpp>
#include <kattn/cuda/forward.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <cuda_bf16.h>

using namespace kattn::cuda;

#define CK(call)                                                                                            \
  do {                                                                                                      \
    cudaError_t e_ = (call);                                                                                \
    if (e_ != cudaSuccess) {                                                                                \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));   \
      std::exit(1);                                                                                         \
    }                                                                                                       \
  } while (0)

namespace {

// Sum of four hashed uniforms, centred and scaled: roughly N(0, 1), cheap on the device.
__global__ void fill_random(__nv_bfloat16* x, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t h = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    float s = 0.f;
    for (int k = 0; k < 4; ++k) {
      h ^= h >> 31;
      h *= 0xBF58476D1CE4E5B9ull;
      h ^= h >> 29;
      s += float(h >> 40) * (1.f / 16777216.f);
    }
    x[i] = __float2bfloat16((s - 2.f) * 1.7320508f);
  }
}

void fill(void* p, size_t n, uint64_t seed) {
  fill_random<<<1024, 256>>>(static_cast<__nv_bfloat16*>(p), n, seed);
  CK(cudaGetLastError());
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Timer {
  cudaEvent_t a, b;
  Timer() {
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  template <class F>
  double ms(F&& f, int inner = 1) {  // device time of `inner` back-to-back calls, per call
    CK(cudaEventRecord(a));
    for (int i = 0; i < inner; ++i) f(i);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    return double(t) / inner;
  }
};

double rel_l2(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  auto f = [](uint16_t h) {
    uint32_t u = uint32_t(h) << 16;
    float x;
    std::memcpy(&x, &u, 4);
    return double(x);
  };
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = f(a[i]), y = f(b[i]);
    if (std::isnan(x)) return INFINITY;
    num += (x - y) * (x - y);
    den += y * y;
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// A dense bf16 forward of B x N tokens, H heads of D, contiguous [B, N, H, D]; pointers unset.
ForwardParams bf16_forward(int B, int N, int H, int D, bool causal) {
  ForwardParams p;
  p.dtype = DType::kBF16;
  p.batch = B;
  p.seqlen_q = p.seqlen_k = N;
  p.heads_q = p.heads_kv = H;
  p.head_dim = D;
  p.causal = causal;
  p.set_contiguous_strides();
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--quick") quick = true;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, cc %d.%d, %d SMs, L2 %d MB\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
              prop.l2CacheSize >> 20);
  Timer timer;
  const int reps = quick ? 5 : 15;

  // ---- 1. copy bandwidth
  double copy_gbs = 0;
  {
    const size_t bytes = size_t(1) << 30;
    void *src, *dst;
    CK(cudaMalloc(&src, bytes));
    CK(cudaMalloc(&dst, bytes));
    fill(src, bytes / 2, 1);
    std::vector<double> t;
    for (int r = 0; r < reps + 2; ++r) {
      const double ms = timer.ms([&](int) { CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); });
      if (r >= 2) t.push_back(ms);
    }
    copy_gbs = 2.0 * bytes / (median(t) * 1e-3) / 1e9;
    std::printf("JSON {\"bench\":\"copy\",\"bytes\":%zu,\"ms\":%.4f,\"gbs\":%.1f}\n", bytes, median(t), copy_gbs);
    CK(cudaFree(src));
    CK(cudaFree(dst));
  }

  struct FwdResult {
    std::string label;
    bool causal;
    double tflops;
    double ms;
    double rel_vs_sm80;
  };
  std::vector<FwdResult> fwd;
  // ---- 2. decode (before the forward: a forward failure must not hide it)
  struct DecResult {
    int ctx, splits;
    double us, gbs;
  };
  std::vector<DecResult> dec;
  {
    const int hq = 32, hkv = 8, D = 128, ps = 16, sets = 3;
    std::mt19937_64 rng(7);
    // One paged decode step of `batch` sequences of ctx keys each, splits = 0: the planner's.
    // Prints a JSON line tagged `tag` and returns the median.
    auto measure = [&](const char* tag, int batch, int ctx, int forced_splits) {
      const int pages_per_seq = ctx / ps, pages = batch * pages_per_seq;
      const size_t cache_el = size_t(pages) * ps * hkv * D;
      std::vector<void*> kc(sets), vc(sets);
      for (int s = 0; s < sets; ++s) {
        CK(cudaMalloc(&kc[s], cache_el * 2));
        CK(cudaMalloc(&vc[s], cache_el * 2));
        fill(kc[s], cache_el, 400 + s + ctx + batch);
        fill(vc[s], cache_el, 500 + s + ctx + batch);
      }
      std::vector<int32_t> idx(pages), indptr(batch + 1), last(batch, ps);
      std::iota(idx.begin(), idx.end(), 0);
      std::shuffle(idx.begin(), idx.end(), rng);
      for (int b = 0; b <= batch; ++b) indptr[b] = b * pages_per_seq;
      int32_t *d_idx, *d_indptr, *d_last;
      CK(cudaMalloc(&d_idx, pages * 4));
      CK(cudaMalloc(&d_indptr, (batch + 1) * 4));
      CK(cudaMalloc(&d_last, batch * 4));
      CK(cudaMemcpy(d_idx, idx.data(), pages * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(d_indptr, indptr.data(), (batch + 1) * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(d_last, last.data(), batch * 4, cudaMemcpyHostToDevice));
      void *q, *o;
      float* lse;
      const size_t rows = size_t(batch) * hq;
      CK(cudaMalloc(&q, rows * D * 2));
      CK(cudaMalloc(&o, rows * D * 2));
      CK(cudaMalloc(&lse, rows * 4));
      fill(q, rows * D, 600);
      DecodeParams p;
      p.dtype = DType::kBF16;
      p.batch = batch;
      p.heads_q = hq;
      p.heads_kv = hkv;
      p.head_dim = D;
      p.page_size = ps;
      p.set_contiguous_strides();
      p.q = q;
      p.kv_page_indptr = d_indptr;
      p.kv_page_indices = d_idx;
      p.kv_last_page_len = d_last;
      p.o = o;
      p.lse = lse;
      p.max_seqlen_hint = ctx;
      p.num_splits = forced_splits;
      const int splits = decode_num_splits(p);
      p.num_splits = splits;
      const size_t ws_bytes = decode_workspace_bytes(p, splits);
      void* ws = nullptr;
      if (ws_bytes) CK(cudaMalloc(&ws, ws_bytes));
      p.workspace = ws;
      p.workspace_bytes = ws_bytes;
      auto run = [&](int i) {
        p.k_cache = kc[i % sets];
        p.v_cache = vc[i % sets];
        CK(decode(p, nullptr));
      };
      for (int w = 0; w < 3; ++w) run(w);
      std::vector<uint16_t> oh(rows * D);
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(oh.data(), o, rows * D * 2, cudaMemcpyDeviceToHost));
      bool finite = true;
      for (uint16_t h : oh) finite &= ((h & 0x7f80) != 0x7f80);
      std::vector<double> t;
      const int inner = 20;  // back-to-back steps: launch gaps hidden behind device time
      for (int r = 0; r < reps; ++r) t.push_back(timer.ms([&](int i) { run(r + i); }, inner));
      const double ms = median(t);
      const double bytes = 2.0 * batch * double(ctx) * hkv * D * 2;
      const double gbs = bytes / (ms * 1e-3) / 1e9;
      std::printf(
          "JSON {\"bench\":\"%s\",\"ctx\":%d,\"B\":%d,\"Hq\":%d,\"Hkv\":%d,\"D\":%d,\"page\":%d,\"splits\":%d,"
          "\"us\":%.2f,\"gbs\":%.1f,\"frac_copy\":%.3f,\"finite\":%s}\n",
          tag, ctx, batch, hq, hkv, D, ps, splits, ms * 1e3, gbs, gbs / copy_gbs, finite ? "true" : "false");
      for (int s = 0; s < sets; ++s) {
        CK(cudaFree(kc[s]));
        CK(cudaFree(vc[s]));
      }
      CK(cudaFree(d_idx));
      CK(cudaFree(d_indptr));
      CK(cudaFree(d_last));
      CK(cudaFree(q));
      CK(cudaFree(o));
      CK(cudaFree(lse));
      if (ws) CK(cudaFree(ws));
      return DecResult{ctx, splits, ms * 1e3, gbs};
    };
    const std::vector<int> ctxs = quick ? std::vector<int>{32768} : std::vector<int>{32768, 65536, 131072};
    for (int ctx : ctxs) dec.push_back(measure("decode", 1, ctx, 0));
    // The split planner's ground truth: batch 1 at other split counts, and the planned split at
    // larger batches (the issue's batch 1-64).
    if (!quick) {
      for (int ctx : ctxs)
        for (int s : {8, 16, 32, 64, 128}) measure("decode_splits", 1, ctx, s);
      for (int batch : {4, 16, 64}) {
        measure("decode_batch", batch, 32768, 0);
        for (int s : {1, 2, 4, 8}) measure("decode_batch", batch, 32768, s);
      }
    }
  }

  // ---- 3. forward
  {
    const int B = 1, H = 16, N = quick ? 4096 : 16384, D = 128, sets = 3;
    const size_t el = size_t(B) * N * H * D;
    std::vector<void*> q(sets), k(sets), v(sets);
    for (int s = 0; s < sets; ++s) {
      CK(cudaMalloc(&q[s], el * 2));
      CK(cudaMalloc(&k[s], el * 2));
      CK(cudaMalloc(&v[s], el * 2));
      fill(q[s], el, 100 + s);
      fill(k[s], el, 200 + s);
      fill(v[s], el, 300 + s);
    }
    void *o, *o_ref;
    float* lse;
    CK(cudaMalloc(&o, el * 2));
    CK(cudaMalloc(&o_ref, el * 2));
    CK(cudaMalloc(&lse, size_t(B) * H * N * 4));
    struct Var {
      ForwardBackend be;
      int variant;
      const char* label;
    };
    const Var vars[] = {{ForwardBackend::kSm80, 0, "sm80"},
                        {ForwardBackend::kSm90, 0, "sm90"},
                        {ForwardBackend::kSm90, 1, "sm90-n176"},
                        {ForwardBackend::kSm90, 2, "sm90-nopp"}};
    for (bool causal : {false, true}) {
      std::vector<uint16_t> ref;
      for (const Var& var : vars) {
        ForwardParams p = bf16_forward(B, N, H, D, causal);
        p.backend = var.be;
        p.variant = var.variant;
        p.o = o;
        p.lse = lse;
        if (var.be == ForwardBackend::kSm90 && !(prop.major == 9 && prop.minor == 0)) continue;
        auto run = [&](int i) {
          p.q = q[i % sets];
          p.k = k[i % sets];
          p.v = v[i % sets];
          CK(forward(p, nullptr));
        };
        // correctness sanity on set 0 against the sm80 kernel
        CK(cudaMemset(o, 0xff, el * 2));
        run(0);
        CK(cudaDeviceSynchronize());
        std::vector<uint16_t> out(el);
        CK(cudaMemcpy(out.data(), o, el * 2, cudaMemcpyDeviceToHost));
        double rel = 0;
        if (var.be == ForwardBackend::kSm80)
          ref = out;
        else
          rel = rel_l2(out, ref);
        for (int w = 0; w < 3; ++w) run(w);
        std::vector<double> t;
        for (int r = 0; r < reps; ++r) t.push_back(timer.ms([&](int i) { run(r + i); }, 1));
        const double ms = median(t);
        const double flops = 4.0 * B * H * double(N) * N * D * (causal ? 0.5 : 1.0);
        const double tf = flops / (ms * 1e-3) / 1e12;
        fwd.push_back({var.label, causal, tf, ms, rel});
        std::printf(
            "JSON {\"bench\":\"forward\",\"kernel\":\"%s\",\"causal\":%s,\"B\":%d,\"H\":%d,\"N\":%d,\"D\":%d,"
            "\"ms\":%.4f,\"tflops\":%.1f,\"rel_l2_vs_sm80\":%.3e}\n",
            var.label, causal ? "true" : "false", B, H, N, D, ms, tf, rel);
      }
    }
    for (int s = 0; s < sets; ++s) {
      CK(cudaFree(q[s]));
      CK(cudaFree(k[s]));
      CK(cudaFree(v[s]));
    }
    CK(cudaFree(o));
    CK(cudaFree(o_ref));
    CK(cudaFree(lse));
  }

  // ---- 4. forward across shapes (not with --quick): the automatic backend at D = 64, 128, 256
  // and 1K-16K tokens, 16K tokens per batch and 2048 channels (B = 16384 / N, H = 2048 / D), as
  // FlashAttention's benchmarks; sdpa_bench.py times PyTorch on the same shapes.
  if (!quick) {
    for (int D : {64, 128, 256})
      for (int N : {1024, 4096, 16384}) {
        const int B = 16384 / N, H = 2048 / D;
        const size_t el = size_t(B) * N * H * D;
        void *q, *k, *v, *o;
        float* lse;
        CK(cudaMalloc(&q, el * 2));
        CK(cudaMalloc(&k, el * 2));
        CK(cudaMalloc(&v, el * 2));
        CK(cudaMalloc(&o, el * 2));
        CK(cudaMalloc(&lse, size_t(B) * H * N * 4));
        fill(q, el, 700 + N + D);
        fill(k, el, 800 + N + D);
        fill(v, el, 900 + N + D);
        for (bool causal : {false, true}) {
          ForwardParams p = bf16_forward(B, N, H, D, causal);
          p.q = q;
          p.k = k;
          p.v = v;
          p.o = o;
          p.lse = lse;
          for (int w = 0; w < 3; ++w) CK(forward(p, nullptr));
          std::vector<double> t;
          for (int r = 0; r < reps; ++r) t.push_back(timer.ms([&](int) { CK(forward(p, nullptr)); }, 1));
          const double ms = median(t);
          const double tf = 4.0 * B * H * double(N) * N * D * (causal ? 0.5 : 1.0) / (ms * 1e-3) / 1e12;
          std::printf(
              "JSON {\"bench\":\"forward_shapes\",\"causal\":%s,\"B\":%d,\"H\":%d,\"N\":%d,\"D\":%d,"
              "\"ms\":%.4f,\"tflops\":%.1f}\n",
              causal ? "true" : "false", B, H, N, D, ms, tf);
        }
        CK(cudaFree(q));
        CK(cudaFree(k));
        CK(cudaFree(v));
        CK(cudaFree(o));
        CK(cudaFree(lse));
      }
  }

  std::printf("\n%-34s %10s %10s %12s\n", "kattn (device events, median)", "ms/us", "rate", "check");
  std::printf("%-34s %10s %9.0f %12s\n", "copy D2D (read+write) GB/s", "", copy_gbs, "");
  for (const auto& r : fwd)
    std::printf("fwd %-10s %-19s %9.3f %7.0f TF %9.1e\n", r.label.c_str(), r.causal ? "causal" : "non-causal", r.ms,
                r.tflops, r.rel_vs_sm80);
  for (const auto& r : dec)
    std::printf("decode ctx %-7d splits %-3d %12.1f us %6.0f GB/s %5.1f%% copy\n", r.ctx, r.splits, r.us, r.gbs,
                100.0 * r.gbs / copy_gbs);
  return 0;
}
