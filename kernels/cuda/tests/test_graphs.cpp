// CUDA-graph decode ladder: replay (inputs copied into the captured buffers, batch padded
// to the next captured size) must equal an eager decode() with the same split count
// bitwise, for several batch sizes and contexts; and it must match the float64 reference.
#include <kattn/cuda/decode.hpp>
#include <kattn/cuda/graphs.hpp>

#include <algorithm>
#include <numeric>
#include <string>

#include "common.hpp"

using namespace kattn::cuda;

int main() {
  kt::require_device();
  kt::Tally tally;
  std::random_device rd;
  std::mt19937_64 rng((uint64_t(rd()) << 32) ^ rd());
  const DType dt = DType::kBF16;
  const int hq = 16, hkv = 4, d = 128, ps = 16, max_batch = 8, max_seqlen = 4096;
  const int num_pages = max_batch * max_seqlen / ps + 8;
  const size_t cache_el = size_t(num_pages) * ps * hkv * d;
  std::vector<uint16_t> kb(cache_el), vb(cache_el);
  std::vector<float> kf(cache_el), vf(cache_el);
  kt::random_fill(rng, dt, kb, kf);
  kt::random_fill(rng, dt, vb, vf);
  kt::DevBuf<uint16_t> dk(cache_el), dv(cache_el);
  dk.upload(kb);
  dv.upload(vb);

  DecodeGraphConfig cfg;
  cfg.dtype = dt;
  cfg.heads_q = hq;
  cfg.heads_kv = hkv;
  cfg.head_dim = d;
  cfg.page_size = ps;
  cfg.k_cache = dk.ptr;
  cfg.v_cache = dv.ptr;
  cfg.k_head_stride = cfg.v_head_stride = d;
  cfg.k_token_stride = cfg.v_token_stride = int64_t(hkv) * d;
  cfg.k_page_stride = cfg.v_page_stride = cfg.k_token_stride * ps;
  cfg.max_batch = max_batch;
  cfg.max_pages = num_pages;
  cfg.max_seqlen = max_seqlen;
  cudaStream_t stream;
  KT_CUDA(cudaStreamCreate(&stream));
  DecodeGraphLadder ladder;
  KT_CUDA(ladder.init(cfg, stream));
  std::string sizes;
  for (int s : ladder.ladder()) sizes += std::to_string(s) + "(splits " + std::to_string(ladder.num_splits(s)) + ") ";
  std::printf("ladder: %s\n", sizes.c_str());

  for (int batch : {1, 3, 5, 8, 2, 3}) {
    // fresh step inputs: lengths, shuffled pages, queries
    std::vector<int> lens(batch);
    std::uniform_int_distribution<int> ld(0, max_seqlen);
    for (int& l : lens) l = ld(rng);
    lens[0] = std::max(lens[0], 1);
    std::vector<int32_t> perm(num_pages);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int32_t> indptr(batch + 1, 0), last(batch), indices;
    for (int b = 0; b < batch; ++b) {
      const int np = (lens[b] + ps - 1) / ps;
      indptr[b + 1] = indptr[b] + np;
      last[b] = np ? lens[b] - (np - 1) * ps : 0;
    }
    indices.assign(perm.begin(), perm.begin() + indptr[batch]);
    const size_t q_el = size_t(batch) * hq * d;
    std::vector<uint16_t> qb(q_el);
    std::vector<float> qf(q_el);
    kt::random_fill(rng, dt, qb, qf);
    kt::DevBuf<uint16_t> dq(q_el), o_graph(q_el), o_eager(q_el);
    kt::DevBuf<float> lse_graph(size_t(batch) * hq), lse_eager(size_t(batch) * hq);
    kt::DevBuf<int32_t> dindptr(batch + 1), dindices(std::max<size_t>(indices.size(), 1)), dlast(batch);
    dq.upload(qb);
    dindptr.upload(indptr);
    if (!indices.empty()) dindices.upload(indices);
    dlast.upload(last);

    o_graph.poison();
    lse_graph.poison();
    DecodeStepInputs in;
    in.batch = batch;
    in.q = dq.ptr;
    in.kv_page_indptr = dindptr.ptr;
    in.kv_page_indices = dindices.ptr;
    in.nnz_pages = int(indices.size());
    in.kv_last_page_len = dlast.ptr;
    KT_CUDA(ladder.step(in, o_graph.ptr, lse_graph.ptr, stream));
    KT_CUDA(cudaStreamSynchronize(stream));

    // eager decode with the split count of the padded size
    const int padded = ladder.padded_batch(batch);
    DecodeParams p;
    p.dtype = dt;
    p.batch = batch;
    p.heads_q = hq;
    p.heads_kv = hkv;
    p.head_dim = d;
    p.page_size = ps;
    p.set_contiguous_strides();
    p.q = dq.ptr;
    p.k_cache = dk.ptr;
    p.v_cache = dv.ptr;
    p.kv_page_indptr = dindptr.ptr;
    p.kv_page_indices = dindices.ptr;
    p.kv_last_page_len = dlast.ptr;
    p.o = o_eager.ptr;
    p.lse = lse_eager.ptr;
    p.num_splits = ladder.num_splits(padded);
    kt::DevBuf<uint8_t> ws(decode_workspace_bytes(p, p.num_splits));
    p.workspace = ws.ptr;
    p.workspace_bytes = ws.n;
    o_eager.poison();
    lse_eager.poison();
    KT_CUDA(decode(p, stream));
    KT_CUDA(cudaStreamSynchronize(stream));

    const auto og = o_graph.download(), oe = o_eager.download();
    const auto lg = lse_graph.download(), le = lse_eager.download();
    const bool bitwise = std::memcmp(og.data(), oe.data(), og.size() * 2) == 0 &&
                         std::memcmp(lg.data(), le.data(), lg.size() * 4) == 0;
    // and against the reference
    const int g = hq / hkv;
    std::vector<double> ref(q_el), ref_lse(size_t(batch) * hq), out(q_el);
    for (int b = 0; b < batch; ++b)
      for (int h = 0; h < hq; ++h) {
        std::vector<const float*> ks, vs;
        for (int j = 0; j < lens[b]; ++j) {
          const size_t off = size_t(indices[indptr[b] + j / ps]) * cfg.k_page_stride + size_t(j % ps) * cfg.k_token_stride +
                             size_t(h / g) * d;
          ks.push_back(&kf[off]);
          vs.push_back(&vf[off]);
        }
        ref_lse[size_t(b) * hq + h] =
            kt::ref_row(&qf[(size_t(b) * hq + h) * d], ks, vs, d, 1.0 / std::sqrt(double(d)), &ref[(size_t(b) * hq + h) * d]);
      }
    kt::ErrStats st;
    for (size_t i = 0; i < q_el; ++i) out[i] = kt::from_bits(og[i], dt);
    st.rel_l2 = kt::rel_l2(out, ref, &st.bad);
    kt::compare_lse(lg, ref_lse, st);
    char buf[200];
    std::snprintf(buf, sizeof buf, "graph replay batch %d (padded %d, splits %d): bitwise==eager %s, rel_l2 %.3e lse_err %.3e",
                  batch, padded, p.num_splits, bitwise ? "yes" : "NO", st.rel_l2, st.lse_max);
    tally.check(bitwise && st.bad == 0 && st.rel_l2 <= kt::out_bound(dt) && st.lse_max <= kt::kLseBound, buf);
  }
  ladder.release();
  KT_CUDA(cudaStreamDestroy(stream));
  return tally.finish();
}
