// Forward kernels against the float64 reference: fresh random inputs per seed, outputs
// poisoned with NaN first, causal and not, GQA 1/4/8, lengths that are not tile
// multiples, Nq > Nk (rows that see no key), Nk = 0, one-token queries, strided layouts.
// Runs the sm80 kernel on every device (cc >= 8.0) and the sm90 kernel (all variants)
// on compute capability 9.0.
#include <kattn/cuda/forward.hpp>

#include <memory>
#include <string>

#include "common.hpp"

using namespace kattn::cuda;

namespace {

struct Case {
  int b, nq, nk, hq, hkv, d;
  bool causal;
  DType dt;
  bool strided;
};

std::string name(const Case& c) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "B=%d Nq=%d Nk=%d Hq=%d Hkv=%d D=%d %s %s%s", c.b, c.nq, c.nk, c.hq, c.hkv, c.d,
                c.causal ? "causal" : "full", kt::dtype_name(c.dt), c.strided ? " strided" : "");
  return buf;
}

struct Backend {
  ForwardBackend be;
  int variant;
  const char* label;
};

// One case's inputs on the device and its float64 reference.
struct Prepared {
  Case c;
  uint64_t seed;
  ForwardParams p;
  std::vector<double> ref_o, ref_lse;
  std::unique_ptr<kt::DevBuf<uint16_t>> dq, dk, dv, dout;
  std::unique_ptr<kt::DevBuf<float>> dlse;
};

Prepared prepare(const Case& c, uint64_t seed) {
  Prepared pr;
  pr.c = c;
  pr.seed = seed;
  std::mt19937_64 rng(seed);
  ForwardParams& p = pr.p;
  p.dtype = c.dt;
  p.batch = c.b;
  p.seqlen_q = c.nq;
  p.seqlen_k = c.nk;
  p.heads_q = c.hq;
  p.heads_kv = c.hkv;
  p.head_dim = c.d;
  p.causal = c.causal;
  p.set_contiguous_strides();
  if (c.strided) {  // padded heads, rows and batches (all multiples of 8 elements)
    p.q_head_stride = p.o_head_stride = c.d + 8;
    p.q_seq_stride = p.o_seq_stride = int64_t(c.hq) * (c.d + 8) + 16;
    p.q_batch_stride = p.o_batch_stride = p.q_seq_stride * c.nq + 32;
    p.k_head_stride = p.v_head_stride = c.d + 16;
    p.k_seq_stride = p.v_seq_stride = int64_t(c.hkv) * (c.d + 16) + 8;
    p.k_batch_stride = p.v_batch_stride = p.k_seq_stride * c.nk + 64;
  }
  const size_t nq_el = size_t(p.q_batch_stride) * c.b, nk_el = size_t(p.k_batch_stride) * c.b;
  std::vector<uint16_t> qb(nq_el), kb(nk_el), vb(nk_el);
  std::vector<float> qf(nq_el), kf(nk_el), vf(nk_el);
  kt::random_fill(rng, c.dt, qb, qf);
  kt::random_fill(rng, c.dt, kb, kf);
  kt::random_fill(rng, c.dt, vb, vf);

  // float64 reference, logical elements only
  const double scale = 1.0 / std::sqrt(double(c.d));
  const int g = c.hq / c.hkv;
  pr.ref_o.assign(size_t(c.b) * c.nq * c.hq * c.d, 0.0);
  pr.ref_lse.assign(size_t(c.b) * c.hq * c.nq, 0.0);
  for (int b = 0; b < c.b; ++b)
    for (int h = 0; h < c.hq; ++h)
      for (int i = 0; i < c.nq; ++i) {
        std::vector<const float*> ks, vs;
        for (int j = 0; j < c.nk; ++j) {
          if (c.causal && j > i + c.nk - c.nq) break;
          ks.push_back(&kf[size_t(b * p.k_batch_stride + j * p.k_seq_stride + (h / g) * p.k_head_stride)]);
          vs.push_back(&vf[size_t(b * p.v_batch_stride + j * p.v_seq_stride + (h / g) * p.v_head_stride)]);
        }
        const float* q = &qf[size_t(b * p.q_batch_stride + i * p.q_seq_stride + h * p.q_head_stride)];
        pr.ref_lse[(size_t(b) * c.hq + h) * c.nq + i] =
            kt::ref_row(q, ks, vs, c.d, scale, &pr.ref_o[((size_t(b) * c.nq + i) * c.hq + h) * c.d]);
      }

  pr.dq = std::make_unique<kt::DevBuf<uint16_t>>(nq_el);
  pr.dk = std::make_unique<kt::DevBuf<uint16_t>>(nk_el);
  pr.dv = std::make_unique<kt::DevBuf<uint16_t>>(nk_el);
  pr.dout = std::make_unique<kt::DevBuf<uint16_t>>(nq_el);
  pr.dlse = std::make_unique<kt::DevBuf<float>>(size_t(c.b) * c.hq * c.nq);
  pr.dq->upload(qb);
  pr.dk->upload(kb);
  pr.dv->upload(vb);
  p.q = pr.dq->ptr;
  p.k = pr.dk->ptr;
  p.v = pr.dv->ptr;
  p.o = pr.dout->ptr;
  p.lse = pr.dlse->ptr;
  return pr;
}

void run(Prepared& pr, const Backend& be, kt::Tally& tally) {
  const Case& c = pr.c;
  ForwardParams p = pr.p;
  p.backend = be.be;
  p.variant = be.variant;
  const std::string what = std::string(be.label) + " " + name(c) + " seed " + std::to_string(pr.seed);
  if (const char* why = forward_check(p)) {
    std::printf("skip %s: %s\n", what.c_str(), why);
    return;
  }
  pr.dout->poison();
  pr.dlse->poison();
  cudaError_t err = forward(p, nullptr);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  if (err != cudaSuccess) {
    tally.check(false, what + ": " + cudaGetErrorString(err));
    if (err != cudaErrorInvalidValue) {  // a sticky error poisons every later case
      tally.finish();
      std::exit(1);
    }
    return;
  }
  const std::vector<uint16_t> ob = pr.dout->download();
  const std::vector<float> lse = pr.dlse->download();
  std::vector<double> out(pr.ref_o.size());
  kt::ErrStats st;
  for (int b = 0; b < c.b; ++b)
    for (int i = 0; i < c.nq; ++i)
      for (int h = 0; h < c.hq; ++h) {
        const bool empty = std::isinf(pr.ref_lse[(size_t(b) * c.hq + h) * c.nq + i]);
        for (int x = 0; x < c.d; ++x) {
          const double v =
              kt::from_bits(ob[size_t(b * p.o_batch_stride + i * p.o_seq_stride + h * p.o_head_stride + x)], c.dt);
          out[((size_t(b) * c.nq + i) * c.hq + h) * c.d + x] = v;
          if (empty && v != 0.0) ++st.bad;
        }
      }
  st.rel_l2 = kt::rel_l2(out, pr.ref_o, &st.bad);
  kt::compare_lse(lse, pr.ref_lse, st);
  char buf[200];
  std::snprintf(buf, sizeof buf, ": rel_l2 %.3e (bound %.0e) lse_err %.3e (bound %.0e) bad %ld", st.rel_l2,
                kt::out_bound(c.dt), st.lse_max, kt::kLseBound, st.bad);
  tally.check(st.bad == 0 && st.rel_l2 <= kt::out_bound(c.dt) && st.lse_max <= kt::kLseBound, what + buf);
}

}  // namespace

int main(int argc, char** argv) {
  kt::require_device();
  bool quick = false;           // --quick: small shapes (for compute-sanitizer)
  std::string only;             // --backend sm80|sm90|sm90v1|sm90v2|auto: run one family
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") quick = true;
    if (a == "--backend" && i + 1 < argc) only = argv[++i];
  }
  const int cc = kt::device_cc();
  std::vector<Backend> backends;
  if (cc >= 80) backends.push_back({ForwardBackend::kSm80, 0, "sm80"});
  if (cc == 90) {
    backends.push_back({ForwardBackend::kSm90, 0, "sm90"});
    backends.push_back({ForwardBackend::kSm90, 2, "sm90v2"});
    backends.push_back({ForwardBackend::kSm90, 1, "sm90v1"});
  }
  backends.push_back({ForwardBackend::kAuto, 0, "auto"});
  if (!only.empty()) {
    std::vector<Backend> keep;
    for (const Backend& b : backends)
      if (only == b.label) keep.push_back(b);
    if (keep.empty()) {
      std::printf("SKIP: backend %s not available on compute capability %d\n", only.c_str(), cc);
      return 77;
    }
    backends = keep;
  }

  const DType bf = DType::kBF16, hf = DType::kFP16;
  std::vector<Case> cases = {
      {1, 1, 1, 1, 1, 64, false, bf, false},        {2, 77, 77, 4, 4, 64, true, bf, false},
      {1, 129, 300, 8, 2, 128, false, bf, false},   {1, 129, 300, 8, 2, 128, true, bf, false},
      {2, 200, 133, 8, 1, 128, true, bf, false},    {1, 64, 0, 2, 2, 64, false, bf, false},
      {1, 100, 190, 4, 4, 256, true, bf, false},    {1, 1, 500, 8, 8, 128, true, bf, false},
      {2, 150, 150, 4, 2, 128, true, bf, true},     {2, 77, 77, 4, 4, 64, false, hf, false},
      {1, 129, 300, 8, 2, 128, true, hf, false},    {1, 100, 190, 4, 4, 256, true, hf, false},
  };
  if (!quick) {
    cases.push_back({1, 257, 257, 16, 2, 128, true, bf, false});
    cases.push_back({1, 190, 100, 4, 2, 256, false, bf, false});
    cases.push_back({1, 1000, 1000, 2, 1, 128, false, bf, false});
    cases.push_back({1, 700, 1100, 2, 2, 64, true, bf, false});
    cases.push_back({2, 333, 333, 4, 1, 128, true, hf, true});
  }
  std::random_device rd;
  const uint64_t base = (uint64_t(rd()) << 32) ^ rd();  // fresh inputs every run; seeds are printed
  const int seeds = quick ? 1 : 2;
  std::vector<Prepared> prepared;
  for (const Case& c : cases)
    for (int s = 0; s < seeds; ++s) prepared.push_back(prepare(c, base + 7919 * s + uint64_t(c.nq) * 31 + c.nk));
  // Backends in the outer loop: a failure (or hang) of one family leaves the earlier
  // families' results in the log.
  kt::Tally tally;
  for (const Backend& be : backends)
    for (Prepared& pr : prepared) run(pr, be, tally);
  return tally.finish();
}
