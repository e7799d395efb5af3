// Host-only checks (no device needed): the split planner's rule and the launchers'
// parameter validation (refused before any CUDA call, with a reason).
#include <kattn/cuda/decode.hpp>
#include <kattn/cuda/forward.hpp>
#include <kattn/cuda/library_dispatch.hpp>
#include <kattn/cuda/library_params.hpp>
#include <kattn/cuda/split_planner.hpp>

#include <cstdint>
#include <string>

#include "common.hpp"

using namespace kattn::cuda;

int main() {
  kt::Tally t;
  // planner
  t.check(plan_num_splits(1, 8, 32768, 132) == 16, "planner: batch 1 x 8 KV heads x 32K on 132 SMs -> 16 splits");
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

  return t.finish();
}
