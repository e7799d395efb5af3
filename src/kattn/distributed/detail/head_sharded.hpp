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
#include <optional>
#include <type_traits>
#include <vector>

#include "kattn/backward_params.hpp"
#include "kattn/core/score_bias.hpp"
#include "kattn/detail/bias_gradient.hpp"
#include "kattn/core/attention_params.hpp"
#include "kattn/distributed/detail/buffer_memory.hpp"
#include "kattn/distributed/options.hpp"
#include "kattn/distributed/detail/failure_latch.hpp"
#include "kattn/distributed/detail/head_exchange.hpp"
#include "kattn/distributed/detail/head_split.hpp"
#include "kattn/distributed/layout.hpp"
#include "kattn/distributed/detail/pack.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace dist {
namespace detail {

// The inner attention of one HeadBlock: the whole sequences (lengths of the layouts) of its heads,
// the first of them global query head `first_head` (per-head options follow it: heads_of). It runs
// its work through the call's FailureLatch (guard for local compute, capture for an inner
// distributed call), so that a failure leaves the exchanges' schedule intact.
template <class T>
using ForwardInner = std::function<void(const AttentionParams<T>&, int first_head, DistStats&)>;
template <class T>
using BackwardInner = std::function<void(const BackwardParams<T>&, int first_head, DistStats&)>;

// The options of a head block's inner call: its query heads' ALiBi slopes, [first, first + count)
// of the call's. The sinks stay whole: the door merges them into the gathered rows.
inline Options heads_of(const Options& opt, int first, int count) {
  Options o = opt;
  if (!o.alibi_slopes.empty())
    o.alibi_slopes.assign(opt.alibi_slopes.begin() + first, opt.alibi_slopes.begin() + first + count);
  return o;
}

// Heads [first, first + count) of a bias or its gradient (Options::bias, BackwardOptions::dbias)
// whose head dim counts from the rank's first query head; a head dim of 1 is broadcast and stays.
template <class Bias>
Bias bias_heads(Bias s, int first, int count) {
  if (!s.active() || s.heads == 1) return s;
  s.dispatch([&](auto tag) {
    using B = decltype(tag);
    s.data = static_cast<const B*>(s.data) + first * s.stride_head;
  });
  s.heads = count;
  return s;
}

// ulysses' and hybrid's dbias over the blocks of the rank's heads (head_split): each block writes
// its heads' rows of it. A dbias broadcast over heads is the sum over all the rank's heads, which one block's
// backward cannot form when the heads take several blocks: then the blocks write their heads of the
// full-head sum in the accumulation type T, a BiasGradient over every head of the rank (created with
// the first block, inside its guarded step, memory checked), which finish() sums over heads in order
// into dbias after the last block, as one call over every head would.
template <class ExecSpace, class T>
class HeadsBiasGradient {
 public:
  HeadsBiasGradient(const ExecSpace& space, const ScoreBiasGradient& dbias, int heads, Workspace* ws)
      : space_(space), dbias_(dbias), heads_(heads), ws_(ws) {}
  int heads() const { return heads_; }

  // Whether the blocks write the full-head sum (a dbias broadcast over several blocks' heads).
  bool summed(int count) const { return dbias_.active() && dbias_.heads == 1 && count != heads_; }

  // The bias the block of heads [first, first + count) reads: its heads, or (summed) the one head
  // repeated over them (stride 0), the shape of its gradient's target.
  ScoreBias bias(ScoreBias s, int first, int count) const {
    if (!summed(count)) return bias_heads(s, first, count);
    s.heads = count, s.stride_head = 0;
    return s;
  }

  // Where the block of heads [first, first + count) writes its gradient.
  ScoreBiasGradient block(int first, int count) {
    if (!summed(count)) return bias_heads(dbias_, first, count);
    if (!sum_) sum_.emplace(space_, dbias_, dbias_.batch, heads_, ws_);
    return bias_heads(sum_->target(), first, count);
  }

  // dbias from the full-head sum, once every block has written its heads (nothing without one).
  void finish() const {
    if (!sum_) return;
    sum_->finish();
    space_.fence();
  }

 private:
  ExecSpace space_;
  ScoreBiasGradient dbias_;
  int heads_ = 0;
  Workspace* ws_ = nullptr;
  std::optional<kattn::detail::BiasGradient<ExecSpace, T>> sum_;
};

// A dense whole-sequence buffer [B][N][heads][dim] from head `first` on.
template <class U>
Operand<U> whole_from_head(U* base, std::int64_t N, int heads, int dim, int first) {
  return dense_operand(base ? base + std::int64_t(first) * dim : nullptr, N, heads, dim);
}

// Points a (forward) problem at whole-sequence buffers of this rank's heads for one block:
// q, o [B][Nq][hq][D], k, v [B][Nk][hkv][D], lse [B][Nq][hq].
template <class T>
AttentionParams<T> block_params(AttentionParams<T> a, const HeadSplit& hs, const HeadBlock& blk, std::int64_t Nq,
                                std::int64_t Nk, const T* q, const T* k, const T* v, T* o, accumulate_t<T>* lse) {
  const int D = a.head_dim, hq = hs.q.count, hkv = hs.kv.count;
  a.q = whole_from_head(q, Nq, hq, D, blk.q.first), a.o = whole_from_head(o, Nq, hq, D, blk.q.first);
  a.k = whole_from_head(k, Nk, hkv, D, blk.kv.first), a.v = whole_from_head(v, Nk, hkv, D, blk.kv.first);
  a.lse = whole_from_head(lse, Nq, hq, 1, blk.q.first);
  a.heads_q = blk.q.count, a.heads_kv = blk.kv.count;
  a.q_len = Nq, a.kv_len = Nk, a.q_total = std::int64_t(a.batch) * Nq;
  return a;
}

// Forward: o (and lse when p.lse is set; every rank alike) of this rank's positions. q, k, v and o
// travel in their storage type T (16 bits for bf16 / fp16), lse in the accumulation type.
template <class ExecSpace, class T>
void head_sharded_forward(MPI_Comm comm, const ExecSpace& space, const AttentionParams<T>& p,
                          const SequenceLayout& q_layout, const SequenceLayout& kv_layout, DistStats& stats,
                          FailureLatch& latch, Workspace* ws, const ForwardInner<T>& inner) {
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
  // the exchanges' buffers at the call's peak (those are allocated as each exchange is posted, each
  // in a collective step of its own: HeadExchange).
  Buffer o;
  MessageBuffer<Acc, typename ExecSpace::memory_space> lse;
  latch.check([&] {
    const std::uint64_t B = p.batch, nq = q_layout.local_length(rank), nk = kv_layout.local_length(rank);
    const std::uint64_t lse_width = sizeof(Acc) / sizeof(T);  // an lse value in values of T
    const std::uint64_t results = B * Nq * hs.q.count * (D + lse_width),
                        wholes = B * Nq * hs.q.count * D + 2 * B * Nk * hs.kv.count * D,
                        outs = B * nq * p.heads_q * D + 2 * B * nk * p.heads_kv * D, in = B * nq * p.heads_q * D;
    require_buffers<typename ExecSpace::memory_space>(ws, "kattn::dist: head sharding",
                                                      results + wholes + std::max(outs, in), sizeof(T));
    o = Buffer(ws, "kattn::dist::heads::o", std::int64_t(p.batch) * Nq * hs.q.count * D, stats.staged);
    lse = MessageBuffer<Acc, typename ExecSpace::memory_space>(ws, "kattn::dist::heads::lse",
                                                               std::int64_t(p.batch) * Nq * hs.q.count, stats.staged);
  });
  HeadExchange<ExecSpace> ex(comm, space, p.batch, stats, latch, ws);
  // The three gathers in flight together.
  auto pq = ex.post_gather(p.q, q_layout, qh, D, "kattn::dist::heads::q");
  auto pk = ex.post_gather(p.k, kv_layout, kvh, D, "kattn::dist::heads::k");
  auto pv = ex.post_gather(p.v, kv_layout, kvh, D, "kattn::dist::heads::v");
  const Buffer q = ex.wait(pq), k = ex.wait(pk), v = ex.wait(pv);
  for (const HeadBlock& blk : hs.blocks)
    inner(block_params(p, hs, blk, Nq, Nk, q.device(), k.device(), v.device(), o.device(), lse.device()),
          hs.q.first + blk.q.first, stats);
  ex.scatter(o, q_layout, qh, D, p.o, false);
  if (p.lse) ex.scatter(lse, q_layout, qh, 1, p.lse, false);
}

// Backward: dq of this rank's query positions, dk and dv of its key positions (a KV head computed
// in parts on several ranks summed in rank order). q, k, v, o and dout travel in their storage type
// T, lse in the accumulation type Acc; the inner backward runs in Acc (16-bit wholes widened after
// the gathers) and each gradient is rounded to T once: dq and unshared dk, dv before they travel
// back (in T), shared dk, dv after their parts are summed (they travel in Acc).
template <class ExecSpace, class T>
void head_sharded_backward(MPI_Comm comm, const ExecSpace& space, const BackwardParams<T>& p,
                           const SequenceLayout& q_layout, const SequenceLayout& kv_layout, DistStats& stats,
                           FailureLatch& latch, Workspace* ws, const BackwardInner<accumulate_t<T>>& inner) {
  using Acc = accumulate_t<T>;
  using Mem = typename ExecSpace::memory_space;
  using Buffer = MessageBuffer<T, Mem>;
  using AccBuffer = MessageBuffer<Acc, Mem>;
  constexpr bool widened = !std::is_same_v<T, Acc>;
  int rank = 0, P = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &P);
  const AttentionParams<T>& f = p.fwd;
  const int B = f.batch, D = f.head_dim;
  const HeadSplit hs = head_split(f.heads_q, f.heads_kv, P, rank);
  const auto qh = q_ranges(f.heads_q, f.heads_kv, P), kvh = kv_ranges(f.heads_q, f.heads_kv, P);
  const bool shared = kv_heads_shared(kvh);
  const std::int64_t Nq = q_layout.length(), Nk = kv_layout.length(), nk = kv_layout.local_length(rank);
  const std::int64_t q_whole = std::int64_t(B) * Nq * hs.q.count * D, kv_whole = std::int64_t(B) * Nk * hs.kv.count * D;
  // The gradients' buffers (in Acc) and the widened copies before the first transfer, in one
  // collective step, memory-checked with the exchanges' buffers at the call's peak (those are
  // allocated as each exchange is posted), counted in values of T.
  AccBuffer dq, dk, dv;
  Kokkos::View<Acc*, Mem> wide;  // widened q, o, dout, k, v wholes, one after the other
  Kokkos::View<Acc*, Mem> sums;  // shared 16-bit dk, dv: this rank's positions, summed in Acc
  latch.check([&] {
    const std::uint64_t w = sizeof(Acc) / sizeof(T), nq = q_layout.local_length(rank);
    const std::uint64_t q_out = std::uint64_t(B) * nq * f.heads_q * D, kv_out = std::uint64_t(B) * nk * f.heads_kv * D;
    const std::uint64_t copies = widened ? 3 * q_whole + 2 * kv_whole : 0,
                        sum_values = widened && shared ? 2 * kv_out : 0;
    const std::uint64_t results = (q_whole + 2 * kv_whole + copies + sum_values) * w,
                        wholes = 3 * q_whole + std::uint64_t(B) * Nq * hs.q.count * w + 2 * kv_whole,
                        outs = 3 * q_out + std::uint64_t(B) * nq * f.heads_q * w + 2 * kv_out,
                        in = std::max(q_out, kv_out) * w;
    require_buffers<Mem>(ws, "kattn::dist: head sharding", results + wholes + std::max(outs, in), sizeof(T));
    dq = AccBuffer(ws, "kattn::dist::heads::dq", q_whole, stats.staged);
    dk = AccBuffer(ws, "kattn::dist::heads::dk", kv_whole, stats.staged);
    dv = AccBuffer(ws, "kattn::dist::heads::dv", kv_whole, stats.staged);
    if (widened) wide = take_buffer<Acc, Mem>(ws, space, "kattn::dist::heads::widened", copies);
    if (sum_values) {
      sums = take_buffer<Acc, Mem>(ws, space, "kattn::dist::heads::dkv_sums", sum_values);
      Kokkos::deep_copy(space, sums, Acc(0));
    }
  });
  HeadExchange<ExecSpace> ex(comm, space, B, stats, latch, ws);
  // The six gathers in flight together.
  auto pq = ex.post_gather(f.q, q_layout, qh, D, "kattn::dist::heads::q");
  auto pk = ex.post_gather(f.k, kv_layout, kvh, D, "kattn::dist::heads::k");
  auto pv = ex.post_gather(f.v, kv_layout, kvh, D, "kattn::dist::heads::v");
  auto po = ex.post_gather(Operand<const T>(f.o), q_layout, qh, D, "kattn::dist::heads::o");
  auto pl = ex.post_gather(Operand<const Acc>(f.lse), q_layout, qh, 1, "kattn::dist::heads::lse");
  auto pd = ex.post_gather(p.dout, q_layout, qh, D, "kattn::dist::heads::dout");
  const Buffer q = ex.wait(pq), k = ex.wait(pk), v = ex.wait(pv), o = ex.wait(po), dout = ex.wait(pd);
  const AccBuffer lse = ex.wait(pl);
  // The wholes in Acc: as received, or widened.
  const Acc *q_acc, *do_acc, *k_acc, *v_acc;
  Acc* o_acc;  // read only (AttentionParams holds o as written)
  if constexpr (widened) {
    const auto widen_whole = [&](const T* from, std::int64_t at, std::int64_t N, int heads) {
      copy_rows(space, dense_operand(from, N, heads, D), 0, dense_operand(wide.data() + at, N, heads, D), B, N, heads,
                D);
      return wide.data() + at;
    };
    q_acc = widen_whole(q.device(), 0, Nq, hs.q.count);
    o_acc = widen_whole(o.device(), q_whole, Nq, hs.q.count);
    do_acc = widen_whole(dout.device(), 2 * q_whole, Nq, hs.q.count);
    k_acc = widen_whole(k.device(), 3 * q_whole, Nk, hs.kv.count);
    v_acc = widen_whole(v.device(), 3 * q_whole + kv_whole, Nk, hs.kv.count);
    space.fence();
  } else {
    q_acc = q.device(), o_acc = o.device(), do_acc = dout.device(), k_acc = k.device(), v_acc = v.device();
  }
  AttentionParams<Acc> shape;  // what block_params does not set
  shape.batch = B, shape.head_dim = D;
  const int hq = hs.q.count, hkv = hs.kv.count;
  for (const HeadBlock& blk : hs.blocks) {
    BackwardParams<Acc> b;
    b.fwd = block_params(shape, hs, blk, Nq, Nk, q_acc, k_acc, v_acc, o_acc, lse.device());
    b.dout = whole_from_head(do_acc, Nq, hq, D, blk.q.first);
    b.dq = whole_from_head(dq.device(), Nq, hq, D, blk.q.first);
    b.dk = whole_from_head(dk.device(), Nk, hkv, D, blk.kv.first);
    b.dv = whole_from_head(dv.device(), Nk, hkv, D, blk.kv.first);
    inner(b, hs.q.first + blk.q.first, stats);
  }
  const Operand<T> dq_out = p.dq, dk_out = p.dk, dv_out = p.dv;
  if constexpr (widened) {
    // Rounded once into the gathers' 16-bit buffers (free now), and sent in 16 bits.
    const auto round_whole = [&](const AccBuffer& from, const Buffer& into, std::int64_t N, int heads) {
      copy_rows(space, Operand<const Acc>(dense_operand(from.device(), N, heads, D)), 0,
                dense_operand(into.device(), N, heads, D), B, N, heads, D);
      space.fence();
      return into;
    };
    ex.scatter(round_whole(dq, q, Nq, hs.q.count), q_layout, qh, D, dq_out, false);
    if (!shared) {
      ex.scatter(round_whole(dk, k, Nk, hs.kv.count), kv_layout, kvh, D, dk_out, false);
      ex.scatter(round_whole(dv, v, Nk, hs.kv.count), kv_layout, kvh, D, dv_out, false);
    } else {
      // Parts summed in Acc at their destination, then rounded once.
      const std::int64_t kv_out = std::int64_t(B) * nk * f.heads_kv * D;
      const Operand<Acc> dk_sum = dense_operand(sums.data(), nk, f.heads_kv, D),
                         dv_sum = dense_operand(sums.data() + kv_out, nk, f.heads_kv, D);
      ex.scatter(dk, kv_layout, kvh, D, dk_sum, true);
      ex.scatter(dv, kv_layout, kvh, D, dv_sum, true);
      copy_rows(space, Operand<const Acc>(dk_sum), 0, dk_out, B, nk, f.heads_kv, D);
      copy_rows(space, Operand<const Acc>(dv_sum), 0, dv_out, B, nk, f.heads_kv, D);
      space.fence();
    }
  } else {
    ex.scatter(dq, q_layout, qh, D, dq_out, false);
    zero_rows(space, dk_out, B, f.kv_len, f.heads_kv, D);
    zero_rows(space, dv_out, B, f.kv_len, f.heads_kv, D);
    ex.scatter(dk, kv_layout, kvh, D, dk_out, true);
    ex.scatter(dv, kv_layout, kvh, D, dv_out, true);
  }
}

}  // namespace detail
}  // namespace dist
}  // namespace kattn
