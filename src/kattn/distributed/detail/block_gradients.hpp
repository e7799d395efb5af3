// The gradients of one block of a sharded sequence, (query rows) x (key rows), with the local
// backward kernels: dq into a [B][nq][Hq][D] workspace, dk and dv into [B][nk][Hkv][D] ones, from
// where the scheme adds them to its accumulators (or ships them as they are). The ring's and the
// grid's backward compute every block with it. Internal.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kattn/backward.hpp"
#include "kattn/detail/backends.hpp"
#include "kattn/distributed/detail/buffer_memory.hpp"
#include "kattn/distributed/detail/pack.hpp"
#include "kattn/distributed/detail/ragged_pieces.hpp"
#include "kattn/distributed/detail/shard_math.hpp"
#include "kattn/distributed/options.hpp"

namespace kattn {
namespace dist {
namespace detail {

// The kernels' options for a distributed backward's blocks: deterministic when the call is.
inline BackwardOptions deterministic_if(BackwardOptions b, const DistOptions& d) {
  if (d.deterministic) b.deterministic = true;
  return b;
}

// Where a block lies in the bias (Options::bias) and its gradient: at this rank's query row `row`
// and the sequence's key `key` (the ring's; the grid takes no bias).
struct BlockAt {
  std::int64_t row = 0, key = 0;
};

// T: q, o, dout, the gradients and the accumulation type; KV: the storage of K and V, widened to T
// (exactly) before the kernels read them.
template <class ExecSpace, class T, class KV = T>
class BlockGradients {
 public:
  using Mem = typename ExecSpace::memory_space;

  // shape: the problem's sizes and options (batch, heads, head_dim, scale, dout's type...): the
  // blocks take them and point at their own rows.
  BlockGradients(const ExecSpace& space, const BackwardParams<T>& shape, Workspace* ws, const BackwardOptions& bopt)
      : space_(space), shape_(shape), ws_(ws), bopt_(bopt) {}

  // The `n` dense K or V rows at src as the kernels read them: src itself, or their float copy in
  // workspace `slot` (a caller's numbering: one per buffer it keeps widened) when they are stored in
  // 16 bits. Widening is exact, so the kernels' arithmetic (products of the stored values,
  // accumulated in float) is that of one process.
  const T* widened(const KV* src, std::int64_t n, std::size_t slot) {
    if constexpr (std::is_same_v<KV, T>) {
      return src;
    } else {
      if (wide_.size() <= slot) wide_.resize(slot + 1);
      Kokkos::View<T*, Mem>& w = wide_[slot];
      const int Hkv = shape_.fwd.heads_kv, D = shape_.fwd.head_dim;
      if (w.extent(0) < std::size_t(kv_elems(n)))
        w = take_buffer<T, Mem>(ws_, space_, "kattn::dist::wide_kv", kv_elems(n));
      copy_rows(space_, dense_operand(src, n, Hkv, D), 0, dense_operand(w.data(), n, Hkv, D), shape_.fwd.batch, n, Hkv, D);
      return w.data();
    }
  }

  // The gradients of the nq query rows of `rows` (its q, o, lse and dout point at the block's first
  // row, with their strides) against keys [kj, kj + nk) of dense K/V buffers (in T) holding `held`
  // positions per sequence, on the launches pp gives (ragged: its pieces' runs). The bias and its
  // gradient are read and written at the block's place `at` in them. False, nothing written, when
  // the block has no visible pair. Adds its flops to `flops`.
  bool compute(const BackwardParams<T>& rows, std::int64_t nq, const T* k, const T* v, std::int64_t held,
               std::int64_t kj, std::int64_t nk, const PiecePair& pp, const RaggedPieces<Mem>* ragged, BlockAt at,
               double& flops) {
    if (pp.runs.empty()) return false;
    const AttentionParams<T>& f = shape_.fwd;
    const int H = f.heads_q, Hkv = f.heads_kv, D = f.head_dim;
    ensure_workspace(nq, nk);
    BackwardParams<T> b = rows;
    AttentionParams<T>& a = b.fwd;
    a.q_len = nq;
    a.q_total = std::int64_t(f.batch) * nq;
    a.k = dense_operand(k, held, Hkv, D).from_row(kj);
    a.v = dense_operand(v, held, Hkv, D).from_row(kj);
    a.kv_len = nk;
    b.dq = dq_rows(nq);
    b.dk = kv_rows(dk_.data(), nk);
    b.dv = kv_rows(dv_.data(), nk);
    flops += 10.0 * D * pp.pairs * f.batch * H;  // 5 tile products of 2 D flops per pair
    // The sequences of a ragged block that see none of it get zero gradients from it.
    if (!pp.covers_all) {
      zero_rows(space_, dq_rows(nq), f.batch, nq, H, D);
      zero_rows(space_, kv_rows(dk_.data(), nk), f.batch, nk, Hkv, D);
      zero_rows(space_, kv_rows(dv_.data(), nk), f.batch, nk, Hkv, D);
    }
    BackwardOptions bopt = bopt_;
    bopt.dbias = bopt_.dbias.block(at.row, at.key, nq, nk);
    for (const PieceRun& r : pp.runs) {
      BackwardParams<T> run = b;
      if (ragged) ragged->use_run(run.fwd, r);
      kattn::detail::backward_impl(space_, run, with_block_bias(r.opt, at.row, at.key, nq, nk), bopt);
    }
    return true;
  }

  // Rows [qi, qi + nq) of dq += the last block's dq.
  void add_dq(const Operand<T>& dq, std::int64_t qi, std::int64_t nq) const {
    const AttentionParams<T>& f = shape_.fwd;
    add_rows(space_, Operand<const T>(dq_rows(nq)), dq, qi, f.batch, nq, f.heads_q, f.head_dim);
  }
  // Rows [kj, kj + nk) of dk, dv += the last block's dk, dv.
  void add_dkv(const Operand<T>& dk, const Operand<T>& dv, std::int64_t kj, std::int64_t nk) const {
    const AttentionParams<T>& f = shape_.fwd;
    add_rows(space_, Operand<const T>(kv_rows(dk_.data(), nk)), dk, kj, f.batch, nk, f.heads_kv, f.head_dim);
    add_rows(space_, Operand<const T>(kv_rows(dv_.data(), nk)), dv, kj, f.batch, nk, f.heads_kv, f.head_dim);
  }

  // The last block's gradients, dense: [B][nq][Hq][D] and [B][nk][Hkv][D].
  const T* dq() const { return dq_.data(); }
  const T* dk() const { return dk_.data(); }
  const T* dv() const { return dv_.data(); }

 private:
  std::int64_t kv_elems(std::int64_t n) const {
    return std::int64_t(shape_.fwd.batch) * n * shape_.fwd.heads_kv * shape_.fwd.head_dim;
  }
  Operand<T> dq_rows(std::int64_t nq) const {
    return dense_operand(dq_.data(), nq, shape_.fwd.heads_q, shape_.fwd.head_dim);
  }
  Operand<T> kv_rows(T* base, std::int64_t nk) const {
    return dense_operand(base, nk, shape_.fwd.heads_kv, shape_.fwd.head_dim);
  }

  void ensure_workspace(std::int64_t nq, std::int64_t nk) {
    const AttentionParams<T>& f = shape_.fwd;
    const std::size_t q = std::size_t(f.batch) * nq * f.heads_q * f.head_dim, k = std::size_t(kv_elems(nk));
    if (dq_.extent(0) < q) dq_ = take_buffer<T, Mem>(ws_, space_, "kattn::dist::block_dq", q);
    if (dk_.extent(0) < k) {
      dk_ = take_buffer<T, Mem>(ws_, space_, "kattn::dist::block_dk", k);
      dv_ = take_buffer<T, Mem>(ws_, space_, "kattn::dist::block_dv", k);
    }
  }

  ExecSpace space_;
  BackwardParams<T> shape_;
  Workspace* ws_;
  BackwardOptions bopt_;
  Kokkos::View<T*, Mem> dq_, dk_, dv_;
  std::vector<Kokkos::View<T*, Mem>> wide_;  // the float K/V the kernels read when stored in 16 bits
};

}  // namespace detail
}  // namespace dist
}  // namespace kattn
