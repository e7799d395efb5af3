// Attention sharded over heads (DeepSpeed-Ulysses), forward and backward, around an inner
// attention: an all-to-all gives each rank the whole sequence of its heads (head_split.hpp), the
// inner call runs on it once per HeadBlock, and an all-to-all brings the results back to the
// sequence shards. The inner call is kattn's local attention (dist::ulysses_attention) or ring
// attention over the groups of a 2-D grid (dist::hybrid_attention). Internal.
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <functional>

#include "kattn/backward_params.hpp"
#include "kattn/core/attention_params.hpp"
#include "kattn/dist/buffer_memory.hpp"
#include "kattn/dist/dist_options.hpp"
#include "kattn/dist/failure_latch.hpp"
#include "kattn/dist/head_exchange.hpp"
#include "kattn/dist/head_split.hpp"
#include "kattn/dist/layout.hpp"
#include "kattn/dist/pack.hpp"

namespace kattn {
namespace dist {
namespace detail {

// The inner attention of one HeadBlock: the whole sequences (lengths of the layouts) of its heads.
// It runs its work through the call's FailureLatch (guard for local compute, capture for an inner
// distributed call), so that a failure leaves the exchanges' schedule intact.
template <class T>
using ForwardInner = std::function<void(const AttentionParams<T>&, DistStats&)>;
template <class T>
using BackwardInner = std::function<void(const BackwardParams<T>&, DistStats&)>;

// Dense whole-sequence addressing [B][N][heads][dim], starting at head `first`.
struct WholeStrides {
  std::int64_t batch, seq, head;
  static WholeStrides of(std::int64_t N, int heads, int dim) {
    return {N * heads * dim, std::int64_t(heads) * dim, std::int64_t(dim)};
  }
};

template <class U>
Strided<const U> strided_in(const U* base, std::int64_t sb, std::int64_t sj, std::int64_t sh) {
  return Strided<const U>{base, sb, sj, sh};
}

// Points a (forward) problem at whole-sequence buffers of this rank's heads for one block:
// q, o [B][Nq][hq][D], k, v [B][Nk][hkv][D], lse [B][Nq][hq].
template <class T>
AttentionParams<T> block_params(AttentionParams<T> a, const HeadSplit& hs, const HeadBlock& blk, std::int64_t Nq,
                                std::int64_t Nk, const T* q, const T* k, const T* v, T* o, accumulate_t<T>* lse) {
  const int D = a.head_dim, hq = hs.q.count, hkv = hs.kv.count;
  const WholeStrides sq = WholeStrides::of(Nq, hq, D), skv = WholeStrides::of(Nk, hkv, D),
                     sl = WholeStrides::of(Nq, hq, 1);
  a.q = q + blk.q.first * D, a.q_stride_batch = sq.batch, a.q_stride_seq = sq.seq, a.q_stride_head = sq.head;
  a.o = o + blk.q.first * D, a.o_stride_batch = sq.batch, a.o_stride_seq = sq.seq, a.o_stride_head = sq.head;
  a.k = k + blk.kv.first * D, a.k_stride_batch = skv.batch, a.k_stride_seq = skv.seq, a.k_stride_head = skv.head;
  a.v = v + blk.kv.first * D, a.v_stride_batch = skv.batch, a.v_stride_seq = skv.seq, a.v_stride_head = skv.head;
  a.lse = lse ? lse + blk.q.first : nullptr;
  a.lse_stride_batch = sl.batch, a.lse_stride_seq = sl.seq, a.lse_stride_head = sl.head;
  a.heads_q = blk.q.count, a.heads_kv = blk.kv.count;
  a.q_len = Nq, a.kv_len = Nk, a.q_total = std::int64_t(a.batch) * Nq;
  return a;
}

// Forward: o (and lse when p.lse is set; every rank alike) of this rank's positions. q, k, v and o
// travel in their storage type T (16 bits for bf16 / fp16), lse in the accumulation type.
template <class ExecSpace, class T>
void head_sharded_forward(MPI_Comm comm, const ExecSpace& space, const AttentionParams<T>& p,
                          const SequenceLayout& q_layout, const SequenceLayout& kv_layout, DistStats& stats,
                          FailureLatch& latch, const ForwardInner<T>& inner) {
  using Acc = accumulate_t<T>;
  using Buffer = MessageBuffer<T, typename ExecSpace::memory_space>;
  int rank = 0, P = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &P);
  const int D = p.head_dim;
  const HeadSplit hs = head_split(p.heads_q, p.heads_kv, P, rank);
  const auto qh = q_ranges(p.heads_q, p.heads_kv, P), kvh = kv_ranges(p.heads_q, p.heads_kv, P);
  const std::int64_t Nq = q_layout.length(), Nk = kv_layout.length();
  // The results' buffers before the first transfer, in one collective step, memory-checked with
  // the exchanges' buffers at the call's peak (those are allocated as each exchange is posted).
  Buffer o;
  MessageBuffer<Acc, typename ExecSpace::memory_space> lse;
  latch.check([&] {
    const std::uint64_t B = p.batch, nq = q_layout.local_length(rank), nk = kv_layout.local_length(rank);
    const std::uint64_t lse_width = sizeof(Acc) / sizeof(T);  // an lse value in values of T
    const std::uint64_t results = B * Nq * hs.q.count * (D + lse_width),
                        wholes = B * Nq * hs.q.count * D + 2 * B * Nk * hs.kv.count * D,
                        outs = B * nq * p.heads_q * D + 2 * B * nk * p.heads_kv * D, in = B * nq * p.heads_q * D;
    require_buffers<typename ExecSpace::memory_space>("kattn::dist: head sharding",
                                                      results + wholes + std::max(outs, in), sizeof(T));
    o = Buffer("kattn::dist::heads::o", std::int64_t(p.batch) * Nq * hs.q.count * D, stats.staged);
    lse = MessageBuffer<Acc, typename ExecSpace::memory_space>("kattn::dist::heads::lse", std::int64_t(p.batch) * Nq * hs.q.count, stats.staged);
  });
  HeadExchange<ExecSpace> ex(comm, space, p.batch, stats);
  // The three gathers in flight together.
  auto pq = ex.post_gather(strided_in(p.q, p.q_stride_batch, p.q_stride_seq, p.q_stride_head), q_layout, qh, D,
                           "kattn::dist::heads::q");
  auto pk = ex.post_gather(strided_in(p.k, p.k_stride_batch, p.k_stride_seq, p.k_stride_head), kv_layout, kvh, D,
                           "kattn::dist::heads::k");
  auto pv = ex.post_gather(strided_in(p.v, p.v_stride_batch, p.v_stride_seq, p.v_stride_head), kv_layout, kvh, D,
                           "kattn::dist::heads::v");
  const Buffer q = ex.wait(pq), k = ex.wait(pk), v = ex.wait(pv);
  for (const HeadBlock& blk : hs.blocks)
    inner(block_params(p, hs, blk, Nq, Nk, q.device(), k.device(), v.device(), o.device(), lse.device()), stats);
  ex.scatter(o, q_layout, qh, D, Strided<T>{p.o, p.o_stride_batch, p.o_stride_seq, p.o_stride_head}, false);
  if (p.lse)
    ex.scatter(lse, q_layout, qh, 1, Strided<Acc>{p.lse, p.lse_stride_batch, p.lse_stride_seq, p.lse_stride_head}, false);
}

// Backward: dq of this rank's query positions, dk and dv of its key positions (a KV head computed
// in parts on several ranks summed in rank order).
template <class ExecSpace, class T>
void head_sharded_backward(MPI_Comm comm, const ExecSpace& space, const BackwardParams<T>& p,
                           const SequenceLayout& q_layout, const SequenceLayout& kv_layout, DistStats& stats,
                           FailureLatch& latch, const BackwardInner<T>& inner) {
  using Buffer = MessageBuffer<T, typename ExecSpace::memory_space>;
  int rank = 0, P = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &P);
  const AttentionParams<T>& f = p.fwd;
  const int D = f.head_dim;
  const HeadSplit hs = head_split(f.heads_q, f.heads_kv, P, rank);
  const auto qh = q_ranges(f.heads_q, f.heads_kv, P), kvh = kv_ranges(f.heads_q, f.heads_kv, P);
  const std::int64_t Nq = q_layout.length(), Nk = kv_layout.length();
  // The gradients' buffers before the first transfer, in one collective step, memory-checked with
  // the exchanges' buffers at the call's peak (those are allocated as each exchange is posted).
  Buffer dq, dk, dv;
  latch.check([&] {
    const std::uint64_t B = f.batch, nq = q_layout.local_length(rank), nk = kv_layout.local_length(rank);
    const std::uint64_t q_whole = B * Nq * hs.q.count * D, kv_whole = B * Nk * hs.kv.count * D,
                        q_out = B * nq * f.heads_q * D, kv_out = B * nk * f.heads_kv * D;
    const std::uint64_t results = q_whole + 2 * kv_whole, wholes = 3 * q_whole + B * Nq * hs.q.count + 2 * kv_whole,
                        outs = 3 * q_out + B * nq * f.heads_q + 2 * kv_out, in = std::max(q_out, kv_out);
    require_buffers<typename ExecSpace::memory_space>("kattn::dist: head sharding",
                                                      results + wholes + std::max(outs, in), sizeof(T));
    dq = Buffer("kattn::dist::heads::dq", std::int64_t(f.batch) * Nq * hs.q.count * D, stats.staged);
    dk = Buffer("kattn::dist::heads::dk", std::int64_t(f.batch) * Nk * hs.kv.count * D, stats.staged);
    dv = Buffer("kattn::dist::heads::dv", std::int64_t(f.batch) * Nk * hs.kv.count * D, stats.staged);
  });
  HeadExchange<ExecSpace> ex(comm, space, f.batch, stats);
  // The six gathers in flight together.
  auto pq = ex.post_gather(strided_in(f.q, f.q_stride_batch, f.q_stride_seq, f.q_stride_head), q_layout, qh, D,
                           "kattn::dist::heads::q");
  auto pk = ex.post_gather(strided_in(f.k, f.k_stride_batch, f.k_stride_seq, f.k_stride_head), kv_layout, kvh, D,
                           "kattn::dist::heads::k");
  auto pv = ex.post_gather(strided_in(f.v, f.v_stride_batch, f.v_stride_seq, f.v_stride_head), kv_layout, kvh, D,
                           "kattn::dist::heads::v");
  auto po = ex.post_gather(strided_in<T>(f.o, f.o_stride_batch, f.o_stride_seq, f.o_stride_head), q_layout, qh, D,
                           "kattn::dist::heads::o");
  auto pl = ex.post_gather(strided_in<T>(f.lse, f.lse_stride_batch, f.lse_stride_seq, f.lse_stride_head), q_layout, qh,
                           1, "kattn::dist::heads::lse");
  auto pd = ex.post_gather(strided_in(p.dout, p.do_stride_batch, p.do_stride_seq, p.do_stride_head), q_layout, qh, D,
                           "kattn::dist::heads::dout");
  const Buffer q = ex.wait(pq), k = ex.wait(pk), v = ex.wait(pv), o = ex.wait(po), lse = ex.wait(pl),
               dout = ex.wait(pd);
  const WholeStrides sq = WholeStrides::of(Nq, hs.q.count, D), skv = WholeStrides::of(Nk, hs.kv.count, D);
  for (const HeadBlock& blk : hs.blocks) {
    BackwardParams<T> b = p;
    b.fwd = block_params(f, hs, blk, Nq, Nk, q.device(), k.device(), v.device(), o.device(), lse.device());
    b.dout = dout.device() + blk.q.first * D;
    b.do_stride_batch = sq.batch, b.do_stride_seq = sq.seq, b.do_stride_head = sq.head;
    b.dq = dq.device() + blk.q.first * D;
    b.dq_stride_batch = sq.batch, b.dq_stride_seq = sq.seq, b.dq_stride_head = sq.head;
    b.dk = dk.device() + blk.kv.first * D;
    b.dv = dv.device() + blk.kv.first * D;
    b.dk_stride_batch = b.dv_stride_batch = skv.batch;
    b.dk_stride_seq = b.dv_stride_seq = skv.seq;
    b.dk_stride_head = b.dv_stride_head = skv.head;
    inner(b, stats);
  }
  ex.scatter(dq, q_layout, qh, D, Strided<T>{p.dq, p.dq_stride_batch, p.dq_stride_seq, p.dq_stride_head}, false);
  const Strided<T> dk_out{p.dk, p.dk_stride_batch, p.dk_stride_seq, p.dk_stride_head},
      dv_out{p.dv, p.dv_stride_batch, p.dv_stride_seq, p.dv_stride_head};
  zero_rows(space, dk_out, f.batch, f.kv_len, f.heads_kv, D);
  zero_rows(space, dv_out, f.batch, f.kv_len, f.heads_kv, D);
  ex.scatter(dk, kv_layout, kvh, D, dk_out, true);
  ex.scatter(dv, kv_layout, kvh, D, dv_out, true);
}

}  // namespace detail
}  // namespace dist
}  // namespace kattn
