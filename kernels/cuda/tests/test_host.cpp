// Host-only checks (no device needed): the split planner's rule and the launchers'
// parameter validation (refused before any CUDA call, with a reason).
#include <kattn/cuda/decode.hpp>
#include <kattn/cuda/forward.hpp>
#include <kattn/cuda/library_dispatch.hpp>
#include <kattn/cuda/library_params.hpp>
#include <kattn/cuda/split_planner.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "common.hpp"

using namespace kattn::cuda;

int main() {
  kt::Tally t;
  // planner
  t.check(plan_num_splits(1, 8, 32768, 132) == 16, "planner: batch 1 x 8 KV heads x 32K on 132 SMs -> 16 splits");
  t.check(plan_num_splits(1, 8, 32768, 132, 2) == 32, "planner: the same with 2 CTAs per SM -> 32 splits");
  t.check(plan_num_splits(16, 8, 32768, 132, 2) == 2, "planner: batch 16 x 8 heads, 2 CTAs per SM -> 2 splits");
  t.check(plan_num_splits(64, 8, 32768, 132, 2) == 1, "planner: batch 64 x 8 heads fills 2 CTAs per SM -> 1 split");
  t.check(decode_ctas_per_sm(4) == 2 && decode_ctas_per_sm(8) == 1, "two CTAs per SM up to 4 packed heads, one at 8");
  t.check(plan_num_splits(1, 8, 131072, 132) == 16, "planner: 128K context -> 16 splits (one wave)");
  t.check(plan_num_splits(1, 8, 300, 132) == 1, "planner: short context -> 1 split");
  t.check(plan_num_splits(1, 8, 2048, 132) == 8, "planner: 2K keys -> 8 splits of 256");
  t.check(plan_num_splits(64, 8, 32768, 132) == 1, "planner: batch 64 x 8 heads fills the GPU -> 1 split");
  t.check(plan_num_splits(4, 8, 32768, 132) == 4, "planner: batch 4 x 8 heads -> 4 splits");
  t.check(plan_num_splits(1, 1, 1 << 20, 132) == kMaxSplits, "planner: capped at kMaxSplits");
  t.check(plan_num_splits(0, 8, 100, 132) == 1 && plan_num_splits(1, 8, 0, 132) == 1, "planner: degenerate inputs -> 1");

  // forward validation
  ForwardParams p;
  p.batch = 1;
  p.seqlen_q = p.seqlen_k = 128;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.head_dim = 96;
  p.set_contiguous_strides();
  alignas(16) static char dummy[64];
  p.q = p.k = p.v = dummy;
  p.o = dummy;
  const char* why = forward_check(p);
  t.check(why && std::string(why).find("head_dim") != std::string::npos, std::string("forward_check head_dim 96: ") + (why ? why : "null"));
  t.check(forward(p, nullptr) == cudaErrorInvalidValue, "forward refuses head_dim 96 with cudaErrorInvalidValue");
  p.head_dim = 128;
  p.set_contiguous_strides();
  p.heads_kv = 3;
  why = forward_check(p);
  t.check(why && std::string(why).find("heads_kv") != std::string::npos, std::string("forward_check Hq % Hkv: ") + (why ? why : "null"));
  p.heads_kv = 2;
  p.scale = -1.f;
  t.check(forward_check(p) != nullptr, "forward_check refuses a negative scale");
  p.scale = 0.f;
  p.q_seq_stride += 3;
  t.check(forward_check(p) != nullptr, "forward_check refuses a stride that is not a multiple of 8");
  p.set_contiguous_strides();
  t.check(forward_check(p) == nullptr, "forward_check accepts a valid bf16 D=128 GQA shape");
  p.q = dummy + 2;
  t.check(forward_check(p) != nullptr, "forward_check refuses a misaligned pointer");

  // decode validation
  DecodeParams d;
  d.batch = 2;
  d.heads_q = 8;
  d.heads_kv = 8;
  d.head_dim = 100;
  d.page_size = 16;
  why = decode_check(d);
  t.check(why && std::string(why).find("head_dim") != std::string::npos, std::string("decode_check head_dim 100: ") + (why ? why : "null"));
  d.head_dim = 128;
  d.page_size = 0;
  t.check(decode_check(d) != nullptr && decode(d, nullptr) == cudaErrorInvalidValue, "decode refuses page_size 0");
  d.page_size = 16;
  d.num_splits = 4;
  t.check(decode_workspace_bytes(d, 4) >= size_t(4) * 2 * 8 * 129 * 4, "decode workspace covers splits x B x Hq x (D + 1) floats");
  t.check(decode_workspace_bytes(d, 1) == 0, "one split needs no workspace");
  // forward params from the library's (the front door's way in): a dense causal GQA problem as
  // kattn::attention describes it, and what stays on the portable kernel
  {
    using S = std::uint16_t;  // any 16-bit storage type
    alignas(16) static S buf[64];
    alignas(16) static float lse[64];
    kattn::AttentionParams<S, float> a;
    a.batch = 2, a.q_len = 100, a.kv_len = 300, a.heads_q = 8, a.heads_kv = 2, a.head_dim = 128;
    a.q = a.k = a.v = buf;
    a.o = buf;
    a.lse = lse;
    a.q_stride_head = a.o_stride_head = 128, a.q_stride_seq = a.o_stride_seq = 8 * 128;
    a.q_stride_batch = a.o_stride_batch = 100 * 8 * 128;
    a.k_stride_head = a.v_stride_head = 128, a.k_stride_seq = a.v_stride_seq = 2 * 128;
    a.k_stride_batch = a.v_stride_batch = 300 * 2 * 128;
    a.lse_stride_seq = 1, a.lse_stride_head = 100, a.lse_stride_batch = 800;
    kattn::Options opt;
    opt.causal = true;
    opt.scale = 0.25;
    ForwardParams f;
    const char* r = forward_params(a, opt, DType::kFP16, f);
    t.check(r == nullptr, std::string("forward_params: dense causal GQA taken: ") + (r ? r : "null"));
    t.check(f.dtype == DType::kFP16 && f.batch == 2 && f.seqlen_q == 100 && f.seqlen_k == 300 && f.heads_q == 8 &&
                f.heads_kv == 2 && f.head_dim == 128 && f.causal && f.scale == 0.25f && f.lse == lse,
            "forward_params: shape, dtype, mask, scale and lse carried over");
    t.check(f.q_seq_stride == 1024 && f.k_seq_stride == 256 && f.v_batch_stride == 300 * 256 &&
                f.o_batch_stride == 100 * 1024,
            "forward_params: strides carried over");
    t.check(forward_check(f) == nullptr, "forward_params: the result passes forward_check");
    const auto refused = [&](kattn::AttentionParams<S, float> b, kattn::Options o, const char* word) {
      ForwardParams g;
      const char* why = forward_params(b, o, DType::kBF16, g);
      t.check(why && std::string(why).find(word) != std::string::npos,
              std::string("forward_params refuses (") + word + "): " + (why ? why : "null"));
    };
    kattn::Options w = opt;
    w.window_left = 16;
    refused(a, w, "window");
    kattn::Options c = opt;
    c.softcap = 30.0;
    refused(a, c, "softcap");
    kattn::Options d = opt;
    d.diagonal_shift = 5;
    refused(a, d, "diagonal_shift");
    kattn::AttentionParams<S, float> rag = a;
    static const std::int64_t indptr[3] = {0, 50, 100};
    rag.q_indptr = rag.kv_indptr = indptr;
    refused(rag, opt, "ragged");
    kattn::AttentionParams<S, float> strided = a;
    strided.lse_stride_seq = 8, strided.lse_stride_head = 1;  // [B, Nq, Hq]
    refused(strided, opt, "lse");
    kattn::Options full;
    t.check(forward_params(a, full, DType::kBF16, f) == nullptr && !f.causal, "forward_params: the full mask taken");
  }
  // the front door's rule (library_dispatch.hpp): kattn's own 16-bit types, dtype from the type,
  // asked-for splits and progress stay portable, and the kernels' own checks apply
  {
    alignas(16) static kattn::fp16 buf[64];
    alignas(16) static float lse[64];
    kattn::AttentionParams<kattn::fp16> a;  // lse and accumulation in float
    a.batch = 1, a.q_len = 64, a.kv_len = 64, a.heads_q = 4, a.heads_kv = 4, a.head_dim = 64;
    a.q = a.k = a.v = buf;
    a.o = buf;
    a.lse = lse;
    a.q_stride_head = a.o_stride_head = a.k_stride_head = a.v_stride_head = 64;
    a.q_stride_seq = a.o_stride_seq = a.k_stride_seq = a.v_stride_seq = 256;
    a.q_stride_batch = a.o_stride_batch = a.k_stride_batch = a.v_stride_batch = 64 * 256;
    a.lse_stride_seq = 1, a.lse_stride_head = 64, a.lse_stride_batch = 256;
    kattn::Options opt;
    ForwardParams f;
    const char* why = dispatch_params(a, opt, f);
    t.check(why == nullptr && f.dtype == DType::kFP16, std::string("dispatch: fp16 dense taken as kFP16: ") + (why ? why : "null"));
    t.check(dtype_of<kattn::bf16>() == DType::kBF16, "dispatch: kattn::bf16 is kBF16");
    const auto refused = [&](kattn::AttentionParams<kattn::fp16> b, kattn::Options o, const char* word) {
      ForwardParams g;
      const char* r = dispatch_params(b, o, g);
      t.check(r && std::string(r).find(word) != std::string::npos,
              std::string("dispatch refuses (") + word + "): " + (r ? r : "null"));
    };
    kattn::Options split = opt;
    split.splits = 4;
    refused(a, split, "split");
    kattn::Options chunk = opt;
    chunk.split_chunk = 256;
    refused(a, chunk, "split");
    kattn::Options progress = opt;
    progress.progress = [](double) { return true; };
    refused(a, progress, "progress");
    kattn::Options negative = opt;
    negative.scale = -0.5;
    refused(a, negative, "scale");
    kattn::AttentionParams<kattn::fp16> d96 = a;
    d96.head_dim = 96;
    refused(d96, opt, "head_dim");
  }
  // the paged decode from the library's params (decode_params, dispatch_decode_params): a decode
  // step over a paged cache as kattn::attention describes it (ragged q, one query per sequence,
  // int64 page table on the device), what the CUDA decode is given, and what stays portable
  {
    alignas(16) static kattn::bf16 buf[64];
    alignas(16) static float lse[64];
    static const std::int64_t table64[8] = {};  // device pointers to the rule: never read
    kattn::AttentionParams<kattn::bf16> a;
    a.batch = 3, a.heads_q = 8, a.heads_kv = 2, a.head_dim = 128, a.page_size = 16, a.num_pages = 40;
    a.q_len = 1, a.kv_len = 33, a.q_total = 3;
    a.q = a.k = a.v = buf;
    a.o = buf;
    a.lse = lse;
    a.q_stride_seq = a.o_stride_seq = 8 * 128, a.q_stride_head = a.o_stride_head = 128;  // [3, 8, 128]
    a.k_stride_batch = a.v_stride_batch = 16 * 2 * 128, a.k_stride_seq = a.v_stride_seq = 2 * 128;
    a.k_stride_head = a.v_stride_head = 128;
    a.lse_stride_seq = 8, a.lse_stride_head = 1;  // [3, 8]
    a.q_indptr = a.kv_page_indptr = a.kv_page_indices = a.kv_last_page_len = table64;
    const std::vector<std::int64_t> q_len{1, 1, 1}, kv_len{33, 0, 16};
    kattn::Options opt;
    opt.causal = true;  // a sequence's last query sees all its keys: the full mask
    opt.scale = 0.125;
    opt.splits = 3;
    DecodeParams d;
    DecodePageTable table;
    const char* r = decode_params(a, opt, q_len, kv_len, DType::kBF16, d, table);
    t.check(r == nullptr, std::string("decode_params: causal GQA decode taken: ") + (r ? r : "null"));
    t.check(d.dtype == DType::kBF16 && d.batch == 3 && d.heads_q == 8 && d.heads_kv == 2 && d.head_dim == 128 &&
                d.page_size == 16 && d.scale == 0.125f && d.num_splits == 3 && d.max_seqlen_hint == 33 && d.lse == lse,
            "decode_params: shape, dtype, scale, splits and lse carried over");
    t.check(d.q_batch_stride == 1024 && d.q_head_stride == 128 && d.o_batch_stride == 1024 && d.o_head_stride == 128,
            "decode_params: q and o rows are the sequences (the ragged q's row stride)");
    t.check(d.k_page_stride == 4096 && d.k_token_stride == 256 && d.k_head_stride == 128 && d.v_page_stride == 4096 &&
                d.v_token_stride == 256 && d.v_head_stride == 128,
            "decode_params: the cache's page, token and head strides carried over");
    t.check(table.indptr == std::vector<std::int32_t>{0, 3, 3, 4} &&
                table.last_page_len == std::vector<std::int32_t>{1, 0, 16} && table.entries() == 4,
            "decode_params: int32 page table from the lengths (33 keys: 3 pages, the last holding 1; none; 1 full)");
    t.check(d.kv_page_indptr == nullptr && d.workspace == nullptr, "decode_params: device tables left to the caller");
    opt.splits = 0;
    t.check(decode_params(a, opt, q_len, kv_len, DType::kBF16, d, table) == nullptr && d.num_splits == 0,
            "decode_params: splits 0 leaves the split count to the decode's planner");
    kattn::Options unlimited;
    unlimited.window_right = 4;  // right windows see every key of the last query too
    t.check(decode_params(a, unlimited, q_len, kv_len, DType::kFP16, d, table) == nullptr && d.dtype == DType::kFP16,
            "decode_params: a right window taken, fp16");
    const auto refused = [&](kattn::AttentionParams<kattn::bf16> b, kattn::Options o, std::vector<std::int64_t> ql,
                             std::vector<std::int64_t> kl, const char* word) {
      DecodeParams g;
      DecodePageTable tb;
      const char* why = dispatch_decode_params(b, o, ql, kl, g, tb);
      t.check(why && std::string(why).find(word) != std::string::npos,
              std::string("decode dispatch refuses (") + word + "): " + (why ? why : "null"));
    };
    const char* taken = dispatch_decode_params(a, opt, q_len, kv_len, d, table);
    t.check(taken == nullptr, std::string("decode dispatch: taken, decode_check passes: ") + (taken ? taken : "null"));
    refused(a, opt, {1, 2, 1}, kv_len, "one query per sequence");
    kattn::AttentionParams<kattn::bf16> dense = a;
    dense.kv_page_indptr = dense.kv_page_indices = dense.kv_last_page_len = nullptr;
    refused(dense, opt, q_len, kv_len, "paged");
    kattn::Options w = opt;
    w.window_left = 8;
    refused(a, w, q_len, kv_len, "window");
    kattn::Options c = opt;
    c.softcap = 30.0;
    refused(a, c, q_len, kv_len, "softcap");
    kattn::Options shifted = opt;
    shifted.diagonal_shift = 2;
    refused(a, shifted, q_len, kv_len, "diagonal_shift");
    kattn::Options chunk = opt;
    chunk.split_chunk = 256;
    refused(a, chunk, q_len, kv_len, "split_chunk");
    kattn::Options progress = opt;
    progress.progress = [](double) { return true; };
    refused(a, progress, q_len, kv_len, "progress");
    kattn::AttentionParams<kattn::bf16> strided = a;
    strided.lse_stride_seq = 1, strided.lse_stride_head = 3;  // [Hq, B]
    refused(strided, opt, q_len, kv_len, "lse");
    kattn::AttentionParams<kattn::bf16> many_pages = a;
    many_pages.num_pages = std::int64_t(1) << 31;
    refused(many_pages, opt, q_len, kv_len, "pages");
    kattn::AttentionParams<kattn::bf16> long_seq = a;
    long_seq.kv_len = std::int64_t(1) << 31;
    refused(long_seq, opt, q_len, {long_seq.kv_len, 0, 16}, "kv_len");
    kattn::AttentionParams<kattn::bf16> d96 = a;
    d96.head_dim = 96;
    refused(d96, opt, q_len, kv_len, "head_dim");
    kattn::AttentionParams<kattn::bf16> odd = a;
    odd.k_stride_seq = 2 * 128 + 4;  // the decode loads 8 elements at a time
    refused(odd, opt, q_len, kv_len, "strides");
  }

  return t.finish();
}
