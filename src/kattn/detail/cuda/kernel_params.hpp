// The hand-written kernels' params built from the library's (kattn/core/attention_params.hpp and
// kattn/options.hpp): how kattn::attention on a CUDA space hands a problem to them, the dense
// forward (forward_params) and the paged decode (decode_params). On the library's side of the
// bridge, so that the kernels know the core alone. Each builder returns null and fills `out`, or
// says why the kernels do not take the problem (then the portable Kokkos kernel runs it). Host
// code, no Kokkos, no CUDA compiler needed.
#pragma once

#include <kattn/cuda/params.hpp>

#include <climits>
#include <cstdint>
#include <utility>
#include <vector>

#include "kattn/core/attention_params.hpp"
#include "kattn/core/key_window.hpp"
#include "kattn/options.hpp"

namespace kattn::cuda {

// The forward kernels take dense [B, N, H, D] q, k, v, o of one 16-bit type (S, named by dtype),
// lse [B, Hq, Nq] float contiguous or none, the full or the causal mask, no softcap, block mask or
// shifted diagonal. Shapes the kernels refuse for other reasons (head dims, alignment) are told by
// forward_check on the result.
template <class S>
const char* forward_params(const AttentionParams<S, float>& p, const Options& opt, DType dtype, ForwardParams& out) {
  static_assert(sizeof(S) == 2, "the CUDA kernels store q, k, v and o in 16 bits (bf16 or fp16)");
  if (p.q_indptr || p.kv_indptr) return "kv: ragged batches run on the portable kernel";
  if (p.kv_page_indptr) return "kv: paged caches run on the portable kernel (the CUDA decode takes them)";
  if (p.requests.active()) return "kv: a cascade's prefix pass with ALiBi or a bias runs on the portable kernel";
  if (opt.block_mask) return "block_mask: runs on the portable kernel";
  if (opt.softcap != 0.0) return "softcap: runs on the portable kernel";
  if (!opt.alibi_slopes.empty()) return "alibi_slopes: runs on the portable kernel";
  if (opt.bias.active()) return "bias: runs on the portable kernel";
  const KeyWindow w = KeyWindow::from(opt);
  if (w.shift != 0) return "diagonal_shift: runs on the portable kernel";
  if (w.left >= 0 || w.right > 0) return "window: only the full and the causal mask run on CUDA";
  if (p.q_len > INT_MAX || p.kv_len > INT_MAX) return "seq_len: more than 2^31 - 1 positions";
  if (p.lse && (p.lse.stride_seq != 1 || p.lse.stride_head != p.q_len ||
                p.lse.stride_batch != std::int64_t(p.heads_q) * p.q_len))
    return "lse: the CUDA kernels write [B, Hq, Nq] contiguous";
  ForwardParams f;
  f.dtype = dtype;
  f.q = p.q.data;
  f.k = p.k.data;
  f.v = p.v.data;
  f.o = p.o.data;
  f.lse = p.lse.data;
  f.batch = p.batch;
  f.seqlen_q = static_cast<int>(p.q_len);
  f.seqlen_k = static_cast<int>(p.kv_len);
  f.heads_q = p.heads_q;
  f.heads_kv = p.heads_kv;
  f.head_dim = p.head_dim;
  f.q_batch_stride = p.q.stride_batch, f.q_seq_stride = p.q.stride_seq, f.q_head_stride = p.q.stride_head;
  f.k_batch_stride = p.k.stride_batch, f.k_seq_stride = p.k.stride_seq, f.k_head_stride = p.k.stride_head;
  f.v_batch_stride = p.v.stride_batch, f.v_seq_stride = p.v.stride_seq, f.v_head_stride = p.v.stride_head;
  f.o_batch_stride = p.o.stride_batch, f.o_seq_stride = p.o.stride_seq, f.o_head_stride = p.o.stride_head;
  f.scale = static_cast<float>(opt.scale);
  f.causal = w.right == 0;
  out = f;
  return nullptr;
}

// The CUDA decode's page table: int32 offsets [B + 1] and last-page lengths [B]. They follow from
// the sequences' key counts and the page size (the library's int64 table holds the same values);
// the page indices themselves are converted on the device, in the table's order.
struct DecodePageTable {
  std::vector<std::int32_t> indptr, last_page_len;
  std::int64_t entries() const { return indptr.empty() ? 0 : indptr.back(); }
};

// The split-KV paged decode takes a paged cache (kv::paged) of q, k, v, o in one 16-bit type (S,
// named by dtype) with one query per sequence (q_len[b] == 1 for every b, so the ragged q
// [total_q, Hq, D] is q [B, Hq, D]), lse [B, Hq] float contiguous or none, no softcap, left window
// or shifted diagonal (causal and right windows see every key of a sequence's last query), no
// fixed-size key chunks (split_chunk; Options::splits gives the decode's split count, 0: its
// planner), page indices, page offsets and sequences' keys that fit in int32 (its page table and
// key counters). Returns null and fills `out` (but its page table pointers and workspace) and
// `table`, or says why not. Head dims, batch, alignment and strides: decode_check on the result.
template <class S>
const char* decode_params(const AttentionParams<S, float>& p, const Options& opt, const std::vector<std::int64_t>& q_len,
                          const std::vector<std::int64_t>& kv_len, DType dtype, DecodeParams& out,
                          DecodePageTable& table) {
  static_assert(sizeof(S) == 2, "the CUDA decode stores q, k, v and o in 16 bits (bf16 or fp16)");
  if (!p.kv_page_indptr) return "kv: the CUDA decode reads paged caches only";
  if (q_len.size() != std::size_t(p.batch) || kv_len.size() != std::size_t(p.batch))
    return "q_indptr: the lengths of every sequence are needed";
  for (std::int64_t n : q_len)
    if (n != 1) return "q_indptr: the CUDA decode takes one query per sequence";
  if (opt.block_mask) return "block_mask: runs on the portable kernel";
  if (opt.softcap != 0.0) return "softcap: runs on the portable kernel";
  if (!opt.alibi_slopes.empty()) return "alibi_slopes: runs on the portable kernel";
  if (opt.bias.active()) return "bias: runs on the portable kernel";
  if (opt.split_chunk > 0) return "split_chunk: fixed-size key chunks run on the portable kernel";
  const KeyWindow w = KeyWindow::from(opt);
  if (w.shift != 0) return "diagonal_shift: runs on the portable kernel";
  if (w.left >= 0) return "window: a left window runs on the portable kernel";
  if (p.kv_len > INT_MAX) return "kv_len: a sequence of more than 2^31 - 1 keys";
  if (p.num_pages > INT_MAX || p.page_size > INT_MAX) return "k: more than 2^31 - 1 pages or keys per page";
  if (p.lse && (p.lse.stride_seq != p.heads_q || p.lse.stride_head != 1))
    return "lse: the CUDA decode writes [B, Hq] contiguous";
  DecodePageTable t;
  t.indptr.assign(1, 0);
  std::int64_t entries = 0;
  for (std::int64_t n : kv_len) {
    const std::int64_t pages = (n + p.page_size - 1) / p.page_size;
    entries += pages;
    if (entries > INT_MAX) return "kv_page_indices: more than 2^31 - 1 entries";
    t.indptr.push_back(static_cast<std::int32_t>(entries));
    t.last_page_len.push_back(static_cast<std::int32_t>(pages == 0 ? 0 : n - (pages - 1) * p.page_size));
  }
  DecodeParams d;
  d.dtype = dtype;
  d.q = p.q.data;  // row b of q, o and lse is sequence b's one query
  d.q_batch_stride = p.q.stride_seq, d.q_head_stride = p.q.stride_head;
  d.k_cache = p.k.data;
  d.k_page_stride = p.k.stride_batch, d.k_token_stride = p.k.stride_seq, d.k_head_stride = p.k.stride_head;
  d.v_cache = p.v.data;
  d.v_page_stride = p.v.stride_batch, d.v_token_stride = p.v.stride_seq, d.v_head_stride = p.v.stride_head;
  d.o = p.o.data;
  d.o_batch_stride = p.o.stride_seq, d.o_head_stride = p.o.stride_head;
  d.lse = p.lse.data;
  d.batch = p.batch;
  d.heads_q = p.heads_q;
  d.heads_kv = p.heads_kv;
  d.head_dim = p.head_dim;
  d.page_size = static_cast<int>(p.page_size);
  d.scale = static_cast<float>(opt.scale);
  d.num_splits = opt.splits;
  d.max_seqlen_hint = static_cast<int>(p.kv_len);
  out = d;
  table = std::move(t);
  return nullptr;
}

}  // namespace kattn::cuda
