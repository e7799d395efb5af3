// Split-KV paged decode and the merge kernel against the float64 reference: page sizes
// 1, 16 and odd, shuffled page tables with unused pages, empty and 1-token sequences,
// GQA 1/4/8 (and a group of 6: a partly filled packed group), split counts from 1 to more
// than the pages, planned splits, outputs poisoned first. Also merge_states directly.
#include <kattn/cuda/decode.hpp>
#include <kattn/cuda/split_planner.hpp>

#include <algorithm>
#include <numeric>
#include <string>

#include "common.hpp"

using namespace kattn::cuda;

namespace {

struct Case {
  std::vector<int> lens;
  int hq, hkv, d, page_size;
  DType dt;
  std::vector<int> splits;  // 0 = planned
};

void run_case(const Case& c, uint64_t seed, kt::Tally& tally) {
  std::mt19937_64 rng(seed);
  const int B = int(c.lens.size());
  std::vector<int> npages(B);
  int used = 0;
  for (int b = 0; b < B; ++b) used += npages[b] = (c.lens[b] + c.page_size - 1) / c.page_size;
  const int num_pages = used + 5;  // some pages belong to no sequence
  std::vector<int32_t> perm(num_pages);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int32_t> indptr(B + 1, 0), indices(std::max(used, 1)), last(B);
  for (int b = 0; b < B; ++b) {
    indptr[b + 1] = indptr[b] + npages[b];
    last[b] = npages[b] ? c.lens[b] - (npages[b] - 1) * c.page_size : 0;
  }
  for (int i = 0; i < used; ++i) indices[i] = perm[i];

  DecodeParams p;
  p.dtype = c.dt;
  p.batch = B;
  p.heads_q = c.hq;
  p.heads_kv = c.hkv;
  p.head_dim = c.d;
  p.page_size = c.page_size;
  p.set_contiguous_strides();
  const size_t cache_el = size_t(num_pages) * c.page_size * c.hkv * c.d;
  const size_t q_el = size_t(B) * c.hq * c.d;
  std::vector<uint16_t> qb(q_el), kb(cache_el), vb(cache_el);
  std::vector<float> qf(q_el), kf(cache_el), vf(cache_el);
  kt::random_fill(rng, c.dt, qb, qf);
  kt::random_fill(rng, c.dt, kb, kf);
  kt::random_fill(rng, c.dt, vb, vf);

  const double scale = 1.0 / std::sqrt(double(c.d));
  const int g = c.hq / c.hkv;
  std::vector<double> ref_o(q_el), ref_lse(size_t(B) * c.hq);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < c.hq; ++h) {
      std::vector<const float*> ks, vs;
      for (int j = 0; j < c.lens[b]; ++j) {
        const size_t page = size_t(indices[indptr[b] + j / c.page_size]);
        const size_t off = page * p.k_page_stride + size_t(j % c.page_size) * p.k_token_stride + size_t(h / g) * p.k_head_stride;
        ks.push_back(&kf[off]);
        vs.push_back(&vf[off]);
      }
      ref_lse[size_t(b) * c.hq + h] = kt::ref_row(&qf[(size_t(b) * c.hq + h) * c.d], ks, vs, c.d, scale,
                                                   &ref_o[(size_t(b) * c.hq + h) * c.d]);
    }

  kt::DevBuf<uint16_t> dq(q_el), dk(cache_el), dv(cache_el), dout(q_el);
  kt::DevBuf<float> dlse(size_t(B) * c.hq);
  kt::DevBuf<int32_t> dindptr(B + 1), dindices(indices.size()), dlast(B);
  dq.upload(qb);
  dk.upload(kb);
  dv.upload(vb);
  dindptr.upload(indptr);
  dindices.upload(indices);
  dlast.upload(last);
  p.q = dq.ptr;
  p.k_cache = dk.ptr;
  p.v_cache = dv.ptr;
  p.kv_page_indptr = dindptr.ptr;
  p.kv_page_indices = dindices.ptr;
  p.kv_last_page_len = dlast.ptr;
  p.o = dout.ptr;
  p.lse = dlse.ptr;
  p.max_seqlen_hint = *std::max_element(c.lens.begin(), c.lens.end());

  for (int splits : c.splits) {
    p.num_splits = splits;
    const int used_splits = decode_num_splits(p);
    const size_t ws_bytes = decode_workspace_bytes(p, used_splits);
    kt::DevBuf<uint8_t> ws(ws_bytes);
    ws.poison();
    p.workspace = ws.ptr;
    p.workspace_bytes = ws_bytes;
    char label[200];
    std::snprintf(label, sizeof label, "decode B=%d Hq=%d Hkv=%d D=%d page=%d %s splits=%d%s max_len=%d seed %llu", B,
                  c.hq, c.hkv, c.d, c.page_size, kt::dtype_name(c.dt), used_splits, splits == 0 ? " (planned)" : "",
                  p.max_seqlen_hint, (unsigned long long)seed);
    dout.poison();
    dlse.poison();
    cudaError_t err = decode(p, nullptr);
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    if (err != cudaSuccess) {
      tally.check(false, std::string(label) + ": " + cudaGetErrorString(err));
      if (err != cudaErrorInvalidValue) std::exit(1);
      continue;
    }
    const auto ob = dout.download();
    const auto lse = dlse.download();
    std::vector<double> out(q_el);
    kt::ErrStats st;
    for (size_t i = 0; i < q_el; ++i) {
      out[i] = kt::from_bits(ob[i], c.dt);
      if (std::isinf(ref_lse[i / c.d]) && out[i] != 0.0) ++st.bad;
    }
    st.rel_l2 = kt::rel_l2(out, ref_o, &st.bad);
    kt::compare_lse(lse, ref_lse, st);
    char buf[160];
    std::snprintf(buf, sizeof buf, ": rel_l2 %.3e (bound %.0e) lse_err %.3e bad %ld", st.rel_l2, kt::out_bound(c.dt),
                  st.lse_max, st.bad);
    tally.check(st.bad == 0 && st.rel_l2 <= kt::out_bound(c.dt) && st.lse_max <= kt::kLseBound,
                std::string(label) + buf);
  }
}

// merge_states on random partial states, some splits empty (lse = -inf), one row all empty.
void run_merge(DType dt, int d, uint64_t seed, kt::Tally& tally) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int S = 9, B = 3, H = 5;
  const size_t rows = size_t(B) * H;
  std::vector<float> po(S * rows * d), pl(S * rows);
  for (auto& x : po) x = nd(rng);
  for (size_t i = 0; i < pl.size(); ++i) pl[i] = (i % 4 == 1) ? -INFINITY : 3.f * nd(rng);
  for (int s = 0; s < S; ++s) pl[s * rows + 7] = -INFINITY;  // row 7: every split empty
  std::vector<double> ref(rows * d), ref_lse(rows);
  for (size_t r = 0; r < rows; ++r) {
    double m = -INFINITY;
    for (int s = 0; s < S; ++s) m = std::max(m, double(pl[s * rows + r]));
    if (std::isinf(m)) {
      ref_lse[r] = -INFINITY;
      continue;
    }
    double l = 0;
    for (int s = 0; s < S; ++s) {
      const double w = std::exp(double(pl[s * rows + r]) - m);
      l += w;
      for (int x = 0; x < d; ++x) ref[r * d + x] += w * po[(s * rows + r) * d + x];
    }
    for (int x = 0; x < d; ++x) ref[r * d + x] /= l;
    ref_lse[r] = m + std::log(l);
  }
  kt::DevBuf<float> dpo(po.size()), dpl(pl.size()), dlse(rows);
  kt::DevBuf<uint16_t> dout(rows * d);
  dpo.upload(po);
  dpl.upload(pl);
  dout.poison();
  dlse.poison();
  MergeParams mp;
  mp.dtype = dt;
  mp.partial_o = dpo.ptr;
  mp.partial_lse = dpl.ptr;
  mp.num_splits = S;
  mp.batch = B;
  mp.heads = H;
  mp.head_dim = d;
  mp.o = dout.ptr;
  mp.o_batch_stride = int64_t(H) * d;
  mp.o_head_stride = d;
  mp.lse = dlse.ptr;
  cudaError_t err = merge_states(mp, nullptr);
  if (err == cudaSuccess) err = cudaDeviceSynchronize();
  const std::string what = std::string("merge_states ") + kt::dtype_name(dt) + " D=" + std::to_string(d);
  if (err != cudaSuccess) {
    tally.check(false, what + ": " + cudaGetErrorString(err));
    std::exit(1);
  }
  const auto ob = dout.download();
  const auto lse = dlse.download();
  std::vector<double> out(rows * d);
  kt::ErrStats st;
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = kt::from_bits(ob[i], dt);
    if (std::isinf(ref_lse[i / d]) && out[i] != 0.0) ++st.bad;
  }
  st.rel_l2 = kt::rel_l2(out, ref, &st.bad);
  kt::compare_lse(lse, ref_lse, st);
  char buf[120];
  std::snprintf(buf, sizeof buf, ": rel_l2 %.3e lse_err %.3e bad %ld", st.rel_l2, st.lse_max, st.bad);
  tally.check(st.bad == 0 && st.rel_l2 <= kt::out_bound(dt) && st.lse_max <= 1e-4, what + buf);
}

}  // namespace

int main(int argc, char** argv) {
  kt::require_device();
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const DType bf = DType::kBF16, hf = DType::kFP16;
  std::vector<Case> cases = {
      {{1, 0, 17, 300}, 8, 8, 128, 16, bf, {1, 2, 7, 64}},
      {{0}, 4, 1, 64, 16, bf, {1, 3}},
      {{1000, 33}, 32, 8, 128, 1, bf, {1, 5, 0}},
      {{129, 77, 5}, 8, 1, 256, 16, bf, {1, 4, 100}},
      {{513, 1, 260}, 12, 2, 64, 7, hf, {1, 3, 200}},
      {{400}, 16, 16, 128, 16, hf, {1, 2}},
  };
  if (!quick) {
    cases.push_back({{5000}, 32, 8, 128, 16, bf, {0, 1, 16}});
    cases.push_back({{3000, 2048, 1}, 64, 8, 128, 16, bf, {0, 3}});
    cases.push_back({{2500}, 8, 8, 64, 1, bf, {0, 13}});
  }
  kt::Tally tally;
  std::random_device rd;
  const uint64_t base = (uint64_t(rd()) << 32) ^ rd();
  const int seeds = quick ? 1 : 2;
  for (size_t i = 0; i < cases.size(); ++i)
    for (int s = 0; s < seeds; ++s) run_case(cases[i], base + 1000 * i + s, tally);
  for (int d : {64, 128, 256}) run_merge(bf, d, base + 77 + d, tally);
  run_merge(hf, 128, base + 99, tally);
  return tally.finish();
}
