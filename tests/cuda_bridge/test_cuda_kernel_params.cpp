// How kattn::attention hands a problem to the hand-written CUDA kernels (detail/cuda/kernel_params.hpp,
// detail/cuda/kernel_rule.hpp): the kernels' params built from the library's AttentionParams and
// Options, and what stays on the portable kernel. Host code: no GPU, no Kokkos.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kattn/detail/cuda/kernel_params.hpp"
#include "kattn/detail/cuda/kernel_rule.hpp"

namespace {

using namespace kattn::cuda;

// Forward params from the library's (the front door's way in): a dense causal GQA problem as
// kattn::attention describes it, and what stays on the portable kernel
TEST(CudaKernelParams, ForwardParamsFromTheLibrarys) {
  using S = std::uint16_t;  // any 16-bit storage type
  alignas(16) static S buf[64];
  alignas(16) static float lse[64];
  kattn::AttentionParams<S, float> a;
  a.batch = 2, a.q_len = 100, a.kv_len = 300, a.heads_q = 8, a.heads_kv = 2, a.head_dim = 128;
  a.q.data = a.k.data = a.v.data = buf;
  a.o.data = buf;
  a.lse.data = lse;
  a.q.stride_head = a.o.stride_head = 128, a.q.stride_seq = a.o.stride_seq = 8 * 128;
  a.q.stride_batch = a.o.stride_batch = 100 * 8 * 128;
  a.k.stride_head = a.v.stride_head = 128, a.k.stride_seq = a.v.stride_seq = 2 * 128;
  a.k.stride_batch = a.v.stride_batch = 300 * 2 * 128;
  a.lse.stride_seq = 1, a.lse.stride_head = 100, a.lse.stride_batch = 800;
  kattn::Options opt;
  opt.causal = true;
  opt.scale = 0.25;
  ForwardParams f;
  const char* r = forward_params(a, opt, DType::kFP16, f);
  EXPECT_TRUE(r == nullptr) << std::string("forward_params: dense causal GQA taken: ") + (r ? r : "null");
  EXPECT_TRUE(f.dtype == DType::kFP16 && f.batch == 2 && f.seqlen_q == 100 && f.seqlen_k == 300 && f.heads_q == 8 &&
              f.heads_kv == 2 && f.head_dim == 128 && f.causal && f.scale == 0.25f && f.lse == lse)
      << "forward_params: shape, dtype, mask, scale and lse carried over";
  EXPECT_TRUE(f.q_seq_stride == 1024 && f.k_seq_stride == 256 && f.v_batch_stride == 300 * 256 &&
              f.o_batch_stride == 100 * 1024)
      << "forward_params: strides carried over";
  EXPECT_TRUE(forward_check(f) == nullptr) << "forward_params: the result passes forward_check";
  const auto refused = [&](kattn::AttentionParams<S, float> b, kattn::Options o, const char* word) {
    ForwardParams g;
    const char* why = forward_params(b, o, DType::kBF16, g);
    EXPECT_TRUE(why && std::string(why).find(word) != std::string::npos)
        << std::string("forward_params refuses (") + word + "): " + (why ? why : "null");
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
  strided.lse.stride_seq = 8, strided.lse.stride_head = 1;  // [B, Nq, Hq]
  refused(strided, opt, "lse");
  kattn::Options full;
  EXPECT_TRUE((forward_params(a, full, DType::kBF16, f) == nullptr && !f.causal))
      << "forward_params: the full mask taken";
}

// The front door's rule (kernel_rule.hpp): kattn's own 16-bit types, dtype from the type,
// asked-for splits and progress stay portable, and the kernels' own checks apply
TEST(CudaKernelParams, TheFrontDoorsRule) {
  alignas(16) static kattn::fp16 buf[64];
  alignas(16) static float lse[64];
  kattn::AttentionParams<kattn::fp16> a;  // lse and accumulation in float
  a.batch = 1, a.q_len = 64, a.kv_len = 64, a.heads_q = 4, a.heads_kv = 4, a.head_dim = 64;
  a.q.data = a.k.data = a.v.data = buf;
  a.o.data = buf;
  a.lse.data = lse;
  a.q.stride_head = a.o.stride_head = a.k.stride_head = a.v.stride_head = 64;
  a.q.stride_seq = a.o.stride_seq = a.k.stride_seq = a.v.stride_seq = 256;
  a.q.stride_batch = a.o.stride_batch = a.k.stride_batch = a.v.stride_batch = 64 * 256;
  a.lse.stride_seq = 1, a.lse.stride_head = 64, a.lse.stride_batch = 256;
  kattn::Options opt;
  ForwardParams f;
  const char* why = dispatch_params(a, opt, f);
  EXPECT_TRUE(why == nullptr && f.dtype == DType::kFP16)
      << std::string("dispatch: fp16 dense taken as kFP16: ") + (why ? why : "null");
  EXPECT_TRUE(dtype_of<kattn::bf16>() == DType::kBF16) << "dispatch: kattn::bf16 is kBF16";
  const auto refused = [&](kattn::AttentionParams<kattn::fp16> b, kattn::Options o, const char* word) {
    ForwardParams g;
    const char* r = dispatch_params(b, o, g);
    EXPECT_TRUE(r && std::string(r).find(word) != std::string::npos)
        << std::string("dispatch refuses (") + word + "): " + (r ? r : "null");
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

// The paged decode from the library's params (decode_params, dispatch_decode_params): a decode
// step over a paged cache as kattn::attention describes it (ragged q, one query per sequence,
// int64 page table on the device), what the CUDA decode is given, and what stays portable
TEST(CudaKernelParams, PagedDecodeParamsFromTheLibrarys) {
  alignas(16) static kattn::bf16 buf[64];
  alignas(16) static float lse[64];
  static const std::int64_t table64[8] = {};  // device pointers to the rule: never read
  kattn::AttentionParams<kattn::bf16> a;
  a.batch = 3, a.heads_q = 8, a.heads_kv = 2, a.head_dim = 128, a.page_size = 16, a.num_pages = 40;
  a.q_len = 1, a.kv_len = 33, a.q_total = 3;
  a.q.data = a.k.data = a.v.data = buf;
  a.o.data = buf;
  a.lse.data = lse;
  a.q.stride_seq = a.o.stride_seq = 8 * 128, a.q.stride_head = a.o.stride_head = 128;  // [3, 8, 128]
  a.k.stride_batch = a.v.stride_batch = 16 * 2 * 128, a.k.stride_seq = a.v.stride_seq = 2 * 128;
  a.k.stride_head = a.v.stride_head = 128;
  a.lse.stride_seq = 8, a.lse.stride_head = 1;  // [3, 8]
  a.q_indptr = a.kv_page_indptr = a.kv_page_indices = a.kv_last_page_len = table64;
  const std::vector<std::int64_t> q_len{1, 1, 1}, kv_len{33, 0, 16};
  kattn::Options opt;
  opt.causal = true;  // a sequence's last query sees all its keys: the full mask
  opt.scale = 0.125;
  opt.splits = 3;
  DecodeParams d;
  DecodePageTable table;
  const char* r = decode_params(a, opt, q_len, kv_len, DType::kBF16, d, table);
  EXPECT_TRUE(r == nullptr) << std::string("decode_params: causal GQA decode taken: ") + (r ? r : "null");
  EXPECT_TRUE(d.dtype == DType::kBF16 && d.batch == 3 && d.heads_q == 8 && d.heads_kv == 2 && d.head_dim == 128 &&
              d.page_size == 16 && d.scale == 0.125f && d.num_splits == 3 && d.max_seqlen_hint == 33 && d.lse == lse)
      << "decode_params: shape, dtype, scale, splits and lse carried over";
  EXPECT_TRUE(d.q_batch_stride == 1024 && d.q_head_stride == 128 && d.o_batch_stride == 1024 && d.o_head_stride == 128)
      << "decode_params: q and o rows are the sequences (the ragged q's row stride)";
  EXPECT_TRUE(d.k_page_stride == 4096 && d.k_token_stride == 256 && d.k_head_stride == 128 && d.v_page_stride == 4096 &&
              d.v_token_stride == 256 && d.v_head_stride == 128)
      << "decode_params: the cache's page, token and head strides carried over";
  EXPECT_TRUE((table.indptr == std::vector<std::int32_t>{0, 3, 3, 4} &&
               table.last_page_len == std::vector<std::int32_t>{1, 0, 16} && table.entries() == 4))
      << "decode_params: int32 page table from the lengths (33 keys: 3 pages, the last holding 1; none; 1 full)";
  EXPECT_TRUE(d.kv_page_indptr == nullptr && d.workspace == nullptr)
      << "decode_params: device tables left to the caller";
  opt.splits = 0;
  EXPECT_TRUE((decode_params(a, opt, q_len, kv_len, DType::kBF16, d, table) == nullptr && d.num_splits == 0))
      << "decode_params: splits 0 leaves the split count to the decode's planner";
  kattn::Options unlimited;
  unlimited.window_right = 4;  // right windows see every key of the last query too
  EXPECT_TRUE(
      (decode_params(a, unlimited, q_len, kv_len, DType::kFP16, d, table) == nullptr && d.dtype == DType::kFP16))
      << "decode_params: a right window taken, fp16";
  const auto refused = [&](kattn::AttentionParams<kattn::bf16> b, kattn::Options o, std::vector<std::int64_t> ql,
                           std::vector<std::int64_t> kl, const char* word) {
    DecodeParams g;
    DecodePageTable tb;
    const char* why = dispatch_decode_params(b, o, ql, kl, g, tb);
    EXPECT_TRUE(why && std::string(why).find(word) != std::string::npos)
        << std::string("decode dispatch refuses (") + word + "): " + (why ? why : "null");
  };
  const char* taken = dispatch_decode_params(a, opt, q_len, kv_len, d, table);
  EXPECT_TRUE(taken == nullptr) << std::string("decode dispatch: taken, decode_check passes: ") +
                                       (taken ? taken : "null");
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
  strided.lse.stride_seq = 1, strided.lse.stride_head = 3;  // [Hq, B]
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
  odd.k.stride_seq = 2 * 128 + 4;  // the decode loads 8 elements at a time
  refused(odd, opt, q_len, kv_len, "strides");
}

}  // namespace
