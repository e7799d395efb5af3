// The grid scheme's backward (schemes.hpp, grid_plan.hpp): rank (g, c) of the rows x cols grid
// receives, as in the forward, the keys of its row that its column's queries see, and for each
// query shard of its column that sees them the shard's rows (q, o, dout and lse). It computes
// every such (query shard, key piece) block with the local backward kernels (block_gradients.hpp)
// and sends dQ back along the column to the query shard's owner and dK/dV back along the row to
// the keys' owner. Every receive and the rows' and keys' sends are posted before the first kernel.
//
// Default mode: each rank sums its blocks' dQ per query shard and dK/dV per key piece where it
// computes them; the owner adds its own sum first, then the others' in grid-row (dQ) or
// grid-column (dK/dV) order. Deterministic mode: the blocks are the ring tour's (query chunk, key
// chunk) pairs and travel as they are, in streams ordered as their owner adds them: every dQ row
// its key chunks in ascending order, every dK/dV row its query chunks in descending order, as the
// tour adds them: the bits are those of one rank.
//
// A ragged batch: the dense grid on each sequence in turn (ragged_sequences.hpp).
#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "kattn/backward.hpp"
#include "kattn/compat.hpp"
#include "kattn/detail/backends.hpp"
#include "kattn/distributed/detail/agreement.hpp"
#include "kattn/distributed/detail/block_gradients.hpp"
#include "kattn/distributed/detail/buffer_memory.hpp"
#include "kattn/distributed/detail/clock.hpp"
#include "kattn/distributed/detail/failure_latch.hpp"
#include "kattn/distributed/detail/grid_keys.hpp"
#include "kattn/distributed/detail/grid_plan.hpp"
#include "kattn/distributed/detail/pack.hpp"
#include "kattn/distributed/detail/ragged_sequences.hpp"
#include "kattn/distributed/detail/schemes.hpp"
#include "kattn/distributed/detail/transport.hpp"

namespace kattn {
namespace dist {
namespace detail {

namespace {

// Tags of the grid backward's messages (kattn's own communicator; one message kind per tag).
enum GridBackwardTag : int { kRows = 51, kKeys = 52, kValues = 53, kDq = 54, kDkv = 55 };

// A block of the deterministic backward with where its gradients go: dQ at dq_at of the stream to
// its query shard's owner, dK then dV at dkv_at of the stream to its keys' owner (column kcol).
struct PlacedBlock {
  GridBlock block;
  std::int64_t dq_at = 0, dkv_at = 0;
  int kcol = 0;
};

template <class ExecSpace, class T, class KV>
class GridBackwardRunner {
 public:
  using Mem = typename ExecSpace::memory_space;
  using TBuf = MessageBuffer<T, Mem>;

  GridBackwardRunner(MPI_Comm comm, const ExecSpace& space, const BackwardParams<T>& p, const KV* k, const KV* v,
                     const Options& opt, const DistOptions& d, const BackwardOptions& bopt, const GridPlan& plan,
                     FailureLatch& latch)
      : comm_(comm),
        space_(space),
        p_(p),
        k_(k),
        v_(v),
        opt_(opt),
        d_(d),
        plan_(plan),
        latch_(latch),
        rank_(rank_in(comm)),
        g_(plan.row_of(rank_)),
        c_(plan.col_of(rank_)),
        keys_(plan, rank_, p.fwd.batch, p.fwd.heads_kv, p.fwd.head_dim, p.fwd.kv_len),
        blocks_(space, p, opt.workspace, deterministic_if(bopt, d)) {
    stats_.staged = needs_staging<Mem>(d.staging);
  }

  DistStats run() {
    const double t0 = now();
    const int R = plan_.rows(), C = plan_.cols();
    const bool det = d_.deterministic, staged = stats_.staged;
    const std::int64_t n_own = f().q_len;
    zero_rows(space_, p_.dq, f().batch, n_own, f().heads_q, f().head_dim);
    zero_rows(space_, p_.dk, f().batch, f().kv_len, f().heads_kv, f().head_dim);
    zero_rows(space_, p_.dv, f().batch, f().kv_len, f().heads_kv, f().head_dim);
    // The query shards this rank computes (of its column, seeing keys of its row), the grid rows
    // that compute its own, and the row ranks whose keys its column sees / that see its keys.
    for (int r = 0; r < R; ++r) {
      if (plan_.sees(plan_.at(r, c_), g_)) computes_.push_back(r);
      if (plan_.sees(rank_, r)) merges_.push_back(r);
    }
    for (int c = 0; c < C; ++c)
      if (c != c_) {
        if (!keys_.in(c).empty()) sends_dkv_.push_back(c);
        if (!plan_.pieces(rank_, c).empty()) gets_dkv_.push_back(c);
      }
    if (det) place_blocks();

    // Every buffer in one collective step: what does not fit fails on every rank before the first transfer.
    rows_in_.resize(R), dq_part_.resize(R), dq_in_.resize(R), dkv_part_.resize(C), dkv_in_.resize(C);
    collective_check(comm_, [&] {
      std::uint64_t values = rows_values(n_own);
      for (int r : computes_) values += (r != g_ ? rows_values(q_len(r)) : 0) + dq_values(r);
      for (int r : merges_)
        if (r != g_) values += dq_in_values(r);
      for (int c = 0; c < C; ++c) values += dkv_values(c) + dkv_in_values(c);
      require_buffers<Mem>(opt_.workspace, "kattn::dist::attention_backward (grid)", values, sizeof(T), keys_.values(),
                           sizeof(KV));
      own_rows_ = TBuf(opt_.workspace, "kattn::dist::grid_bw::own_rows", rows_values(n_own), staged);
      keys_.allocate(opt_.workspace, staged);
      for (int r : computes_) {
        if (r != g_) rows_in_[r] = TBuf(opt_.workspace, "kattn::dist::grid_bw::rows", rows_values(q_len(r)), staged);
        if (dq_values(r) > 0) dq_part_[r] = TBuf(opt_.workspace, "kattn::dist::grid_bw::dq", dq_values(r), staged);
      }
      for (int r : merges_)
        if (r != g_) dq_in_[r] = TBuf(opt_.workspace, "kattn::dist::grid_bw::dq_in", dq_in_values(r), staged);
      for (int c = 0; c < C; ++c) {
        if (dkv_values(c) > 0) dkv_part_[c] = TBuf(opt_.workspace, "kattn::dist::grid_bw::dkv", dkv_values(c), staged);
        if (dkv_in_values(c) > 0)
          dkv_in_[c] = TBuf(opt_.workspace, "kattn::dist::grid_bw::dkv_in", dkv_in_values(c), staged);
      }
    });

    pack_own_rows(n_own);
    keys_.pack(space_, same_layout(k_, f().k), same_layout(v_, f().v), f().heads_kv, f().head_dim);
    if (!det) {  // the sums' accumulators (the streams are written whole)
      for (int r : computes_) zero(dq_part_[r], dq_values(r));
      for (int c = 0; c < C; ++c) zero(dkv_part_[c], dkv_values(c));
    }

    // Every receive, and the sends of this rank's rows and keys.
    std::vector<std::vector<MPI_Request>> rows_reqs(R), dq_reqs(R), dkv_reqs(C);
    std::vector<MPI_Request> sends;
    const double tp0 = now();
    for (int r : computes_)
      if (r != g_) irecv(rows_in_[r].mpi(), rows_values(q_len(r)), plan_.at(r, c_), kRows, comm_, rows_reqs[r]);
    keys_.post(comm_, kKeys, kValues, sends, stats_);
    for (int r : merges_)
      if (r != g_) irecv(dq_in_[r].mpi(), dq_in_values(r), plan_.at(r, c_), kDq, comm_, dq_reqs[r]);
    for (int c : gets_dkv_) irecv(dkv_in_[c].mpi(), dkv_in_values(c), plan_.at(g_, c), kDkv, comm_, dkv_reqs[c]);
    for (int r : merges_)
      if (r != g_) isend(own_rows_.mpi(), rows_values(n_own), plan_.at(r, c_), kRows, comm_, sends, stats_);
    stats_.comm_seconds += now() - tp0;

    // Other ranks' query shards first (their dQ travels while this rank computes its own).
    std::vector<int> order;
    for (int r : computes_)
      if (r != g_) order.push_back(r);
    for (int r : computes_)
      if (r == g_) order.push_back(r);
    const int steps = static_cast<int>(order.size());
    for (int s = 0; s < steps; ++s) {
      const int r = order[s];
      const double tw0 = now();
      wait_all(rows_reqs[r]);
      if (r != g_) rows_in_[r].stage_in(space_, rows_values(q_len(r)));
      T* rows = r == g_ ? own_rows_.device() : rows_in_[r].device();
      const double tw1 = now(), cpu1 = cpu_now();
      stats_.comm_seconds += tw1 - tw0;
      latch_.guard([&] {
        if (det)
          compute_chunks(r, rows);
        else
          compute_sums(r, rows);
        space_.fence();
      });
      stats_.compute_seconds += now() - tw1;
      stats_.compute_cpu_seconds += cpu_now() - cpu1;
      ++stats_.steps;
      if (r != g_) {  // sent even when empty: its owner posted the receive
        dq_part_[r].stage_out(space_, dq_values(r));
        isend(dq_part_[r].mpi(), dq_values(r), plan_.at(r, c_), kDq, comm_, sends, stats_);
      }
      latch_.guard([&] {
        if (d_.progress) d_.progress(s + 1, steps);
      });
    }
    // dK/dV of the row's keys, complete once every query shard is done.
    for (int c : sends_dkv_) {
      dkv_part_[c].stage_out(space_, dkv_values(c));
      isend(dkv_part_[c].mpi(), dkv_values(c), plan_.at(g_, c), kDkv, comm_, sends, stats_);
    }
    keys_.wait();  // keys no block read (a window)

    // This rank's gradients: what the others computed for it, added in a fixed order.
    const double tm0 = now();
    for (int r : merges_)
      if (r != g_) {
        wait_all(dq_reqs[r]);
        dq_in_[r].stage_in(space_, dq_in_values(r));
      }
    for (int c : gets_dkv_) {
      wait_all(dkv_reqs[c]);
      dkv_in_[c].stage_in(space_, dkv_in_values(c));
    }
    stats_.comm_seconds += now() - tm0;
    const double tm1 = now();
    latch_.guard([&] {
      if (det)
        fold_chunks();
      else
        add_sums();
      space_.fence();
    });
    stats_.compute_seconds += now() - tm1;
    const double tw = now();
    wait_all(sends);
    stats_.comm_seconds += now() - tw;
    stats_.seconds = now() - t0;
    return stats_;
  }

 private:
  const AttentionParams<T>& f() const { return p_.fwd; }
  std::int64_t q_len(int r) const { return plan_.q_layout().local_length(plan_.at(r, c_)); }
  std::int64_t q_values(std::int64_t n) const { return std::int64_t(f().batch) * n * f().heads_q * f().head_dim; }
  std::int64_t kv_values(std::int64_t n) const { return std::int64_t(f().batch) * n * keys_.row(); }
  // A query shard's rows as they travel: q, o and dout ([B][n][Hq][D] each), then lse ([B][n][Hq]).
  std::int64_t rows_values(std::int64_t n) const { return 3 * q_values(n) + std::int64_t(f().batch) * n * f().heads_q; }
  Operand<T> dense_q(T* base, std::int64_t n) const { return dense_operand(base, n, f().heads_q, f().head_dim); }
  Operand<T> dense_kv(T* base, std::int64_t n) const { return dense_operand(base, n, f().heads_kv, f().head_dim); }
  void zero(const TBuf& buf, std::int64_t n) const {
    if (n > 0) Kokkos::deep_copy(space_, Kokkos::subview(buf.view(), std::pair<std::size_t, std::size_t>(0, n)), T{});
  }

  // The dQ this rank sends query shard (r, c_) (none for its own: summed in place by default) and
  // receives from grid row r; the dK/dV it sends column c's rank of its row and receives from it.
  std::int64_t dq_values(int r) const {
    if (d_.deterministic) return dq_stream_[r];
    return r == g_ || std::find(computes_.begin(), computes_.end(), r) == computes_.end() ? 0 : q_values(q_len(r));
  }
  std::int64_t dq_in_values(int r) const { return d_.deterministic ? dq_in_stream_[r] : q_values(f().q_len); }
  std::int64_t dkv_values(int c) const {
    if (d_.deterministic) return dkv_stream_[c];
    return c == c_ ? 0 : 2 * kv_values(total_length(keys_.in(c)));
  }
  std::int64_t dkv_in_values(int c) const {
    if (c == c_ || std::find(gets_dkv_.begin(), gets_dkv_.end(), c) == gets_dkv_.end()) return 0;
    return d_.deterministic ? dkv_in_stream_[c] : 2 * kv_values(total_length(plan_.pieces(rank_, c)));
  }

  void pack_own_rows(std::int64_t n) {
    const int B = f().batch, H = f().heads_q, D = f().head_dim;
    T* base = own_rows_.device();
    copy_rows(space_, f().q, 0, dense_q(base, n), B, n, H, D);
    copy_rows(space_, Operand<const T>(f().o), 0, dense_q(base + q_values(n), n), B, n, H, D);
    copy_rows(space_, p_.dout, 0, dense_q(base + 2 * q_values(n), n), B, n, H, D);
    copy_rows(space_, Operand<const T>(f().lse), 0, dense_operand(base + 3 * q_values(n), n, H, 1), B, n, H, 1);
    space_.fence();
    own_rows_.stage_out(space_, rows_values(n));
  }

  // The block rows from row qi on of a query shard of n rows packed as rows_values(n) at base.
  BackwardParams<T> rows_at(T* base, std::int64_t n, std::int64_t qi) const {
    const int H = f().heads_q;
    BackwardParams<T> b = p_;
    AttentionParams<T>& a = b.fwd;
    a.q = dense_q(base, n).from_row(qi);
    a.o = dense_q(base + q_values(n), n).from_row(qi);
    b.dout = dense_q(base + 2 * q_values(n), n).from_row(qi);
    a.lse = dense_operand(base + 3 * q_values(n), n, H, 1).from_row(qi);
    return b;
  }

  // The K/V buffer of key column `col` (h: a piece in it) as the kernels read it: widened once per
  // run when stored in 16 bits (each buffer holds the same keys all along).
  std::pair<const T*, const T*> widened_once(const typename GridKeys<ExecSpace, KV>::Held& h, int col) {
    if (wide_.size() < std::size_t(plan_.cols())) wide_.assign(plan_.cols(), {nullptr, nullptr});
    if (!wide_[col].first)
      wide_[col] = {blocks_.widened(h.k, h.held, 2 * col), blocks_.widened(h.v, h.held, 2 * col + 1)};
    return wide_[col];
  }

  // Default mode: query shard (r, c_) against every piece of this row's keys its queries see: dQ
  // summed into dq_part_[r] (or this rank's dq), dK/dV into dkv_part_ (or this rank's dk, dv).
  void compute_sums(int r, T* rows) {
    const int C = plan_.cols(), qrank = plan_.at(r, c_);
    const std::int64_t n = q_len(r);
    const Operand<T> dq = r == g_ ? p_.dq : dense_q(dq_part_[r].device(), n);
    const auto qsegs = plan_.q_layout().segments_of(qrank);
    for (int i = 0; i < C; ++i) {
      const int col = (c_ + i) % C, owner = plan_.at(g_, col);
      const std::int64_t held = col == c_ ? f().kv_len : total_length(keys_.in(col));
      const Operand<T> dk = col == c_ ? p_.dk : dense_kv(dkv_part_[col].device(), held);
      const Operand<T> dv = col == c_ ? p_.dv : dense_kv(dkv_part_[col].device() + kv_values(held), held);
      for (const Segment& piece : plan_.pieces(owner, c_)) {
        const auto h = keys_.held_of(space_, piece, stats_);
        const auto [k, v] = widened_once(h, col);
        for (const Segment& qs : qsegs) {
          const PiecePair pp =
              dense_pair(opt_, qs.global, qs.length, plan_.Nq(), piece.global, piece.length, plan_.Nk());
          if (!blocks_.compute(rows_at(rows, n, qs.local), qs.length, k, v, h.held, h.at, piece.length, pp, nullptr,
                               BlockAt{}, stats_.flops))
            continue;
          blocks_.add_dq(dq, qs.local, qs.length);
          blocks_.add_dkv(dk, dv, h.at, piece.length);
        }
        keys_.poke_all();
      }
    }
  }

  // Default mode: this rank's dq, dk, dv (its own blocks' sums already in) plus the other grid
  // rows' dQ in row order and the other columns' dK/dV in column order.
  void add_sums() {
    const int H = f().heads_q, Hkv = f().heads_kv, D = f().head_dim, B = f().batch;
    const std::int64_t n = f().q_len;
    for (int r : merges_)
      if (r != g_) add_rows(space_, Operand<const T>(dense_q(dq_in_[r].device(), n)), p_.dq, 0, B, n, H, D);
    for (int c : gets_dkv_) {
      const std::int64_t held = total_length(plan_.pieces(rank_, c));
      std::int64_t at = 0;
      for (const Segment& piece : plan_.pieces(rank_, c)) {
        const auto part = [&](std::int64_t off) {
          return Operand<const T>(dense_kv(dkv_in_[c].device() + off, held).from_row(at));
        };
        add_rows(space_, part(0), p_.dk, piece.local, B, piece.length, Hkv, D);
        add_rows(space_, part(kv_values(held)), p_.dv, piece.local, B, piece.length, Hkv, D);
        at += piece.length;
      }
    }
  }

  // Deterministic mode: where each block of this rank's goes (PlacedBlock), per query shard in the
  // order its stream holds them, and the lengths of the streams out and in (from each grid row's
  // rank of this column, dQ; from each column's rank of this row, dK/dV).
  void place_blocks() {
    const int R = plan_.rows(), C = plan_.cols();
    dq_stream_.assign(R, 0), dkv_stream_.assign(C, 0), dq_in_stream_.assign(R, 0), dkv_in_stream_.assign(C, 0);
    for (int other = 0; other < R * C; ++other) {
      for (const GridBlock& b : plan_.blocks(rank_, other)) dq_in_stream_[plan_.row_of(other)] += q_values(b.nq);
      for (const GridBlock& b : plan_.blocks(other, rank_)) dkv_in_stream_[plan_.col_of(other)] += 2 * kv_values(b.nk);
    }
    std::vector<std::map<std::pair<std::int64_t, std::int64_t>, std::int64_t>> dkv_at(C);
    for (int c = 0; c < C; ++c) {
      std::vector<GridBlock> to_owner;  // every block of this column against key shard (g_, c)
      for (int r : computes_)
        for (const GridBlock& b : plan_.blocks(plan_.at(r, c_), plan_.at(g_, c))) to_owner.push_back(b);
      std::sort(to_owner.begin(), to_owner.end(), dkv_order);
      for (const GridBlock& b : to_owner) {
        dkv_at[c][{b.q_global(), b.k_global()}] = dkv_stream_[c];
        dkv_stream_[c] += 2 * kv_values(b.nk);
      }
    }
    placed_.assign(R, {});
    for (int r : computes_) {
      std::vector<std::pair<GridBlock, int>> mine;  // query shard (r, c_) against this row's keys
      for (int c = 0; c < C; ++c)
        for (const GridBlock& b : plan_.blocks(plan_.at(r, c_), plan_.at(g_, c))) mine.push_back({b, c});
      std::sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) { return dq_order(a.first, b.first); });
      for (const auto& [b, c] : mine) {
        placed_[r].push_back(PlacedBlock{b, dq_stream_[r], dkv_at[c].at({b.q_global(), b.k_global()}), c});
        dq_stream_[r] += q_values(b.nq);
      }
    }
  }

  // Deterministic mode: the blocks of query shard (r, c_), each block's gradients copied to its
  // places in the streams.
  void compute_chunks(int r, T* rows) {
    const int H = f().heads_q, Hkv = f().heads_kv, D = f().head_dim, B = f().batch;
    const std::int64_t n = q_len(r);
    for (const PlacedBlock& pb : placed_[r]) {
      const GridBlock& b = pb.block;
      const auto h = keys_.held_of(space_, b.piece, stats_);
      const auto [k, v] = widened_once(h, pb.kcol);
      const PiecePair pp = dense_pair(opt_, b.q_global(), b.nq, plan_.Nq(), b.k_global(), b.nk, plan_.Nk());
      if (!blocks_.compute(rows_at(rows, n, b.qs.local + b.cq), b.nq, k, v, h.held, h.at + b.ck, b.nk, pp, nullptr,
                           BlockAt{}, stats_.flops))
        continue;  // not reached: every placed block has a visible pair
      T* dq = dq_part_[r].device() + pb.dq_at;
      T* dkv = dkv_part_[pb.kcol].device() + pb.dkv_at;
      copy_rows(space_, Operand<const T>{blocks_.dq(), b.nq * H * D, std::int64_t(H) * D, D}, 0, dense_q(dq, b.nq), B,
                b.nq, H, D);
      copy_rows(space_, Operand<const T>{blocks_.dk(), b.nk * Hkv * D, std::int64_t(Hkv) * D, D}, 0,
                dense_kv(dkv, b.nk), B, b.nk, Hkv, D);
      copy_rows(space_, Operand<const T>{blocks_.dv(), b.nk * Hkv * D, std::int64_t(Hkv) * D, D}, 0,
                dense_kv(dkv + kv_values(b.nk), b.nk), B, b.nk, Hkv, D);
      keys_.poke_all();
    }
  }

  // Deterministic mode: every block of this rank's query rows in dQ order and of its keys in dK/dV
  // order, each read from the stream of the rank that computed it, in turn.
  void fold_chunks() {
    const int H = f().heads_q, Hkv = f().heads_kv, D = f().head_dim, B = f().batch, P = plan_.rows() * plan_.cols();
    std::vector<std::pair<GridBlock, int>> dq_blocks, dkv_blocks;  // with the grid row / column they come from
    for (int other = 0; other < P; ++other) {
      for (const GridBlock& b : plan_.blocks(rank_, other)) dq_blocks.push_back({b, plan_.row_of(other)});
      for (const GridBlock& b : plan_.blocks(other, rank_)) dkv_blocks.push_back({b, plan_.col_of(other)});
    }
    std::sort(dq_blocks.begin(), dq_blocks.end(),
              [](const auto& a, const auto& b) { return dq_order(a.first, b.first); });
    std::sort(dkv_blocks.begin(), dkv_blocks.end(),
              [](const auto& a, const auto& b) { return dkv_order(a.first, b.first); });
    std::vector<std::int64_t> at(std::max(plan_.rows(), plan_.cols()), 0);
    for (const auto& [b, r] : dq_blocks) {
      T* s = (r == g_ ? dq_part_[r].device() : dq_in_[r].device()) + at[r];
      add_rows(space_, Operand<const T>(dense_q(s, b.nq)), p_.dq, b.qs.local + b.cq, B, b.nq, H, D);
      at[r] += q_values(b.nq);
    }
    std::fill(at.begin(), at.end(), 0);
    for (const auto& [b, c] : dkv_blocks) {
      T* s = (c == c_ ? dkv_part_[c].device() : dkv_in_[c].device()) + at[c];
      const std::int64_t j = b.piece.local + b.ck;
      add_rows(space_, Operand<const T>(dense_kv(s, b.nk)), p_.dk, j, B, b.nk, Hkv, D);
      add_rows(space_, Operand<const T>(dense_kv(s + kv_values(b.nk), b.nk)), p_.dv, j, B, b.nk, Hkv, D);
      at[c] += 2 * kv_values(b.nk);
    }
  }

  MPI_Comm comm_;
  ExecSpace space_;
  BackwardParams<T> p_;
  const KV* k_;
  const KV* v_;
  Options opt_;
  DistOptions d_;
  const GridPlan& plan_;
  FailureLatch& latch_;
  int rank_ = 0, g_ = 0, c_ = 0;
  GridKeys<ExecSpace, KV> keys_;
  BlockGradients<ExecSpace, T, KV> blocks_;
  std::vector<int> computes_, merges_, sends_dkv_, gets_dkv_;
  TBuf own_rows_;
  std::vector<TBuf> rows_in_, dq_part_, dq_in_, dkv_part_, dkv_in_;
  std::vector<std::pair<const T*, const T*>> wide_;  // each key column's K/V as the kernels read them
  // deterministic: the lengths of the streams out and in
  std::vector<std::int64_t> dq_stream_, dkv_stream_, dq_in_stream_, dkv_in_stream_;
  std::vector<std::vector<PlacedBlock>> placed_;  // deterministic: per query shard
  DistStats stats_;
};

}  // namespace

template <class ExecSpace, class T, class KV>
DistStats grid_backward_impl(MPI_Comm comm, const ExecSpace& space, const BackwardParams<T>& p, const KV* k,
                             const KV* v, const Options& opt, const DistOptions& d, const BackwardOptions& bopt,
                             FailureLatch* outer) {
  compat::ScopedRegion area("kattn::dist");
  compat::ScopedRegion region("kattn::dist::grid_backward");
  const GlobalSplit split = enter_sharded_call(comm, backward_fields(DistCall::grid_backward, p, opt, d, bopt), opt,
                                              p.fwd.q_len, p.fwd.kv_len, d);
  std::optional<GridPlan> plan;
  collective_check(comm, [&] { plan.emplace(opt, split.Nq, split.Nk, size_in(comm), d); });
  return under_latch(comm, outer, [&](FailureLatch& latch) {
    return GridBackwardRunner<ExecSpace, T, KV>(comm, space, p, k, v, opt, d, bopt, *plan, latch).run();
  });
}

template <class ExecSpace, class S>
DistStats grid_ragged_backward_impl(MPI_Comm comm, const ExecSpace& space, const BackwardParams<S>& p,
                                    const BatchLengths& lengths, const Options& opt, const DistOptions& d,
                                    const BackwardOptions& bopt) {
  compat::ScopedRegion area("kattn::dist");
  compat::ScopedRegion region("kattn::dist::grid_backward");
  collective_agree(comm, backward_fields(DistCall::grid_ragged_backward, p, opt, d, bopt));
  require_no_block_mask(opt);
  return backward_each_sequence(
      comm, space, p, lengths, opt, d, "kattn::dist::attention_backward (grid)",
      [&](const auto& seq, const auto* k, const auto* v, const DistOptions& each, FailureLatch* latch) {
        return grid_backward_impl(comm, space, seq, k, v, opt, each, bopt, latch);
      });
}

#define KATTN_INSTANTIATE_GRID_BACKWARD_KV(Space, T, KV)                                                           \
  template DistStats grid_backward_impl<Space, T, KV>(MPI_Comm, const Space&, const BackwardParams<T>&, const KV*, \
                                                      const KV*, const Options&, const DistOptions&,               \
                                                      const BackwardOptions&, FailureLatch*);
#define KATTN_INSTANTIATE_RAGGED_GRID_BACKWARD(Space, S)                                                          \
  template DistStats grid_ragged_backward_impl<Space, S>(MPI_Comm, const Space&, const BackwardParams<S>&,        \
                                                         const BatchLengths&, const Options&, const DistOptions&, \
                                                         const BackwardOptions&);
#define KATTN_INSTANTIATE_GRID_BACKWARD(Space, T) \
  KATTN_INSTANTIATE_GRID_BACKWARD_KV(Space, T, T) \
  KATTN_INSTANTIATE_RAGGED_GRID_BACKWARD(Space, T)
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_GRID_BACKWARD)
// 16-bit K/V under float q, o, dout and gradients (the door widens those first), as the ring.
#define KATTN_INSTANTIATE_16BIT_GRID_BACKWARD(Space, S) \
  KATTN_INSTANTIATE_GRID_BACKWARD_KV(Space, float, S)   \
  KATTN_INSTANTIATE_RAGGED_GRID_BACKWARD(Space, S)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_16BIT_GRID_BACKWARD, bf16)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_16BIT_GRID_BACKWARD, fp16)

}  // namespace detail
}  // namespace dist
}  // namespace kattn
