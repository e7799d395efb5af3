// The grid scheme's forward (schemes.hpp, grid_plan.hpp): rank (g, c) of the rows x cols grid
// receives the query shards of its column that see keys of its row and the keys of its row that
// its column's queries see, computes each such query shard against those keys with the local
// kernels, and sends the result to the query shard's owner, which merges what its column computed
// in a fixed order. Every transfer is posted before the first kernel and runs under the compute.
//
// A ragged batch: the dense grid on each sequence in turn (ragged_sequences.hpp), every sequence
// sharded as a dense one, all sequences under one failure latch.
//
// Default mode: each block is folded into finished rows (o, lse) where it is computed, and the
// owner folds the rows of grid rows 0 .. rows - 1 in that order (a reduce-scatter of states along
// the column). Deterministic mode: the blocks are the ring's chunk partials (one per query row and
// global key chunk it sees), sent as they are, and the owner folds them in global chunk order, the
// order of the ring's deterministic mode: the bits are those of one rank.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "kattn/compat.hpp"
#include "kattn/detail/backends.hpp"
#include "kattn/distributed/detail/agreement.hpp"
#include "kattn/distributed/detail/buffer_memory.hpp"
#include "kattn/distributed/detail/chunk_partials.hpp"
#include "kattn/distributed/detail/clock.hpp"
#include "kattn/distributed/detail/failure_latch.hpp"
#include "kattn/distributed/detail/fold_kernels.hpp"
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

// Tags of the grid's messages (kattn's own communicator; one message kind per tag).
enum GridTag : int { kGridQ = 41, kGridK = 42, kGridV = 43, kGridO = 44, kGridLse = 45, kGridStream = 46 };

template <class ExecSpace, class T, class KV>
class GridRunner {
 public:
  using Mem = typename ExecSpace::memory_space;
  using TBuf = MessageBuffer<T, Mem>;

  GridRunner(MPI_Comm comm, const ExecSpace& space, const AttentionParams<T, T, KV>& p, const Options& opt,
             const DistOptions& d, const GridPlan& plan, FailureLatch& latch)
      : comm_(comm), space_(space), p_(p), opt_(opt), d_(d), plan_(plan), latch_(latch),
        rank_(rank_in(comm)), keys_(plan, rank_, p.batch, p.heads_kv, p.head_dim, p.kv_len) {
    g_ = plan.row_of(rank_), c_ = plan.col_of(rank_);
    stats_.staged = needs_staging<Mem>(d.staging);
  }

  DistStats run() {
    const double t0 = now();
    const int R = plan_.rows(), H = p_.heads_q, D = p_.head_dim;
    const std::int64_t B = p_.batch, qrow = std::int64_t(H) * D;
    const bool det = d_.deterministic;
    const bool staged = stats_.staged;
    // What this rank computes (the query shards of its column that see keys of its row), and whose
    // results it merges (the rows of the grid whose keys its queries see).
    for (int r = 0; r < R; ++r) {
      if (plan_.sees(plan_.at(r, c_), g_)) computes_.push_back(r);
      if (plan_.sees(rank_, r)) merges_.push_back(r);
    }
    const auto q_len_of = [&](int r) { return plan_.q_layout().local_length(plan_.at(r, c_)); };
    const auto stream_values = [&](int row, int qrank) { return plan_.stream_rows(row, qrank) * B * H * (D + 1); };
    std::int64_t max_rows = 0;
    for (int r : computes_)
      for (const Segment& qs : plan_.q_layout().segments_of(plan_.at(r, c_)))
        max_rows = std::max(max_rows, std::min(qs.length, grid_piece_rows(qs.length)));
    const std::int64_t n_own = p_.q_len;

    // Every buffer in one collective step: what does not fit fails on every rank before the first transfer.
    q_in_.resize(R);
    blk_o_.resize(R), blk_lse_.resize(R), blk_ml_.resize(R);
    st_o_.resize(R), st_lse_.resize(R);
    streams_out_.resize(R), streams_in_.resize(R);
    collective_check(comm_, [&] {
      std::uint64_t t_values = B * n_own * qrow + B * max_rows * H * (D + 1) + 2 * B * n_own * H;
      for (int r : computes_) {
        if (r != g_) t_values += B * q_len_of(r) * qrow;
        t_values += det ? stream_values(g_, plan_.at(r, c_)) : B * q_len_of(r) * H * (D + 3);
      }
      for (int r : merges_)
        if (r != g_) t_values += det ? stream_values(r, rank_) : B * n_own * H * (D + 1);
      require_buffers<Mem>(opt_.workspace, "kattn::dist::attention (grid)", t_values, sizeof(T), keys_.values(),
                           sizeof(KV));
      own_q_ = TBuf(opt_.workspace, "kattn::dist::grid::own_q", B * n_own * qrow, staged);
      keys_.allocate(opt_.workspace, staged);
      for (int r : computes_) {
        if (r != g_) q_in_[r] = TBuf(opt_.workspace, "kattn::dist::grid::q", B * q_len_of(r) * qrow, staged);
        if (det) {
          streams_out_[r] =
              TBuf(opt_.workspace, "kattn::dist::grid::stream", stream_values(g_, plan_.at(r, c_)), staged);
        } else {
          blk_o_[r] = TBuf(opt_.workspace, "kattn::dist::grid::block_o", B * q_len_of(r) * qrow, staged);
          blk_lse_[r] = TBuf(opt_.workspace, "kattn::dist::grid::block_lse", B * q_len_of(r) * H, staged);
          blk_ml_[r] = kattn::detail::take_buffer<T, Mem>(opt_.workspace, space_, "kattn::dist::grid::block_ml",
                                                          2 * std::size_t(B * q_len_of(r) * H));
        }
      }
      for (int r : merges_)
        if (r != g_) {
          if (det) {
            streams_in_[r] = TBuf(opt_.workspace, "kattn::dist::grid::stream_in", stream_values(r, rank_), staged);
          } else {
            st_o_[r] = TBuf(opt_.workspace, "kattn::dist::grid::state_o", B * n_own * qrow, staged);
            st_lse_[r] = TBuf(opt_.workspace, "kattn::dist::grid::state_lse", B * n_own * H, staged);
          }
        }
      ws_o_ = kattn::detail::take_buffer<T, Mem>(opt_.workspace, space_, "kattn::dist::grid::partial_o",
                                                 std::size_t(B * max_rows * qrow));
      ws_lse_ = kattn::detail::take_buffer<T, Mem>(opt_.workspace, space_, "kattn::dist::grid::partial_lse",
                                                   std::size_t(B * max_rows * H));
      ml_ = kattn::detail::take_buffer<T, Mem>(opt_.workspace, space_, "kattn::dist::grid::ml",
                                               2 * std::size_t(B * n_own * H));
    });

    // This rank's shards, packed dense: what it sends and what its own blocks read.
    copy_rows(space_, p_.q, 0, dense_operand(own_q_.device(), n_own, H, D), p_.batch, n_own, H, D);
    keys_.pack(space_, p_.k, p_.v, p_.heads_kv, D);
    own_q_.stage_out(space_, B * n_own * qrow);

    // Every receive and every send of the inputs, before the first kernel: the query shard to
    // the ranks of this column that compute it, the keys to the ranks of this row whose queries see them.
    std::vector<std::vector<MPI_Request>> q_reqs(R), st_reqs(R);
    std::vector<MPI_Request> sends;
    const double tp0 = now();
    for (int r : computes_)
      if (r != g_) irecv(q_in_[r].mpi(), B * q_len_of(r) * qrow, plan_.at(r, c_), kGridQ, comm_, q_reqs[r]);
    for (int r : merges_)
      if (r != g_) {
        if (det)
          irecv(streams_in_[r].mpi(), stream_values(r, rank_), plan_.at(r, c_), kGridStream, comm_, st_reqs[r]);
        else {
          irecv(st_o_[r].mpi(), B * n_own * qrow, plan_.at(r, c_), kGridO, comm_, st_reqs[r]);
          irecv(st_lse_[r].mpi(), B * n_own * H, plan_.at(r, c_), kGridLse, comm_, st_reqs[r]);
        }
      }
    for (int r : merges_)
      if (r != g_) isend(own_q_.mpi(), B * n_own * qrow, plan_.at(r, c_), kGridQ, comm_, sends, stats_);
    keys_.post(comm_, kGridK, kGridV, sends, stats_);
    stats_.comm_seconds += now() - tp0;

    Options opt = opt_;
    if (det) {
      Options tiles = opt_;
      tiles.block_q = 0;
      opt.block_k = deterministic_block_k<ExecSpace, T>(space_, D, plan_.Nq() * p_.group_size(), tiles);
    }
    // The blocks of other ranks' query shards first (their results travel while this rank
    // computes its own), each result sent as soon as it is complete.
    std::vector<int> order;
    for (int r : computes_)
      if (r != g_) order.push_back(r);
    for (int r : computes_)
      if (r == g_) order.push_back(r);
    const int steps = static_cast<int>(order.size());
    for (int s = 0; s < steps; ++s) {
      const int r = order[s];
      const int qrank = plan_.at(r, c_);
      const double tw0 = now();
      wait_all(q_reqs[r]);
      if (r != g_) q_in_[r].stage_in(space_, B * q_len_of(r) * qrow);
      const T* qb = r == g_ ? own_q_.device() : q_in_[r].device();
      const double tw1 = now(), cpu1 = cpu_now();
      stats_.comm_seconds += tw1 - tw0;
      if (det)
        compute_stream(r, qrank, qb, opt);
      else
        compute_block(r, qrank, qb, opt);
      stats_.compute_seconds += now() - tw1;
      stats_.compute_cpu_seconds += cpu_now() - cpu1;
      ++stats_.steps;
      if (r != g_) {
        if (det) {
          streams_out_[r].stage_out(space_, stream_values(g_, qrank));
          isend(streams_out_[r].mpi(), stream_values(g_, qrank), qrank, kGridStream, comm_, sends, stats_);
        } else {
          blk_o_[r].stage_out(space_, B * q_len_of(r) * qrow);
          blk_lse_[r].stage_out(space_, B * q_len_of(r) * H);
          isend(blk_o_[r].mpi(), B * q_len_of(r) * qrow, qrank, kGridO, comm_, sends, stats_);
          isend(blk_lse_[r].mpi(), B * q_len_of(r) * H, qrank, kGridLse, comm_, sends, stats_);
        }
      }
      latch_.guard([&] {
        if (d_.progress) d_.progress(s + 1, steps);
      });
    }
    keys_.wait();  // keys no block read (a window)

    // The merge of this rank's rows: in the order of grid rows, or of global key chunks.
    const double tm0 = now();
    for (int r : merges_) {
      wait_all(st_reqs[r]);
      if (r == g_) continue;
      if (det)
        streams_in_[r].stage_in(space_, stream_values(r, rank_));
      else {
        st_o_[r].stage_in(space_, B * n_own * qrow);
        st_lse_[r].stage_in(space_, B * n_own * H);
      }
    }
    stats_.comm_seconds += now() - tm0;
    const double tm1 = now();
    latch_.guard([&] { merge(n_own); });
    stats_.compute_seconds += now() - tm1;
    const double tw = now();
    wait_all(sends);
    stats_.comm_seconds += now() - tw;
    stats_.seconds = now() - t0;
    return stats_;
  }

 private:
  using Held = typename GridKeys<ExecSpace, KV>::Held;

  // Params of query rows [qi, qi + nq) of the dense query shard qb (n positions) against keys
  // [j0, j0 + nk) of the piece held as h.
  AttentionParams<T, T, KV> block_params(const T* qb, std::int64_t n, std::int64_t qi, std::int64_t nq, const Held& h,
                                         std::int64_t j0, std::int64_t nk) const {
    const int H = p_.heads_q, Hkv = p_.heads_kv, D = p_.head_dim;
    AttentionParams<T, T, KV> q = p_;
    q.q = dense_operand(qb, n, H, D).from_row(qi);
    q.q_len = nq;
    q.q_total = std::int64_t(p_.batch) * nq;
    q.k = h.k_from(j0, Hkv, D);
    q.v = h.v_from(j0, Hkv, D);
    q.kv_len = nk;
    q.o = {};
    q.lse = {};
    return q;
  }

  // A dense [B][n][H][D] accumulator with (m, l) at ml.
  RowAccumulator<T> dense_acc(T* o, T* ml, std::int64_t n) const {
    const int H = p_.heads_q, D = p_.head_dim;
    return accumulator(dense_operand(o, n, H, D), ml, p_.batch, n, H, D);
  }

  // Default mode: query shard qrank (dense at qb) against every piece of this row's keys its
  // queries see, this rank's own keys first, folded into finished rows (blk_o_, blk_lse_).
  void compute_block(int r, int qrank, const T* qb, const Options& opt) {
    const int H = p_.heads_q, D = p_.head_dim, C = plan_.cols();
    const std::int64_t n = plan_.q_layout().local_length(qrank);
    const RowAccumulator<T> acc = dense_acc(blk_o_[r].device(), blk_ml_[r].data(), n);
    latch_.guard([&] { launch_rows(space_, "kattn::dist::grid::init", InitRows<ExecSpace, T>{acc}); });
    const auto qsegs = plan_.q_layout().segments_of(qrank);
    for (int i = 0; i < C; ++i) {
      const int owner = plan_.at(g_, (c_ + i) % C);
      for (const Segment& piece : plan_.pieces(owner, c_)) {
        const Held h = keys_.held_of(space_, piece, stats_);
        latch_.guard([&] {
          for (const Segment& qs : qsegs) {
            const std::int64_t step = grid_piece_rows(qs.length);
            for (std::int64_t off = 0; off < qs.length; off += step) {
              const std::int64_t nq = std::min(step, qs.length - off), qi = qs.local + off;
              const Options o =
                  shard_options(opt, qs.global + off, nq, plan_.Nq(), piece.global, piece.length, plan_.Nk());
              const double pairs = double(KeyWindow::from(o).visible_pairs(nq, piece.length));
              if (pairs <= 0) continue;
              stats_.flops += 4.0 * D * pairs * p_.batch * H;
              AttentionParams<T, T, KV> q = block_params(qb, n, qi, nq, h, 0, piece.length);
              q.o = dense_operand(ws_o_.data(), nq, H, D);
              q.lse = dense_operand(ws_lse_.data(), nq, H, 1);
              kattn::detail::attention_impl(space_, q, o, BatchLengths{});
              launch_rows(space_, "kattn::dist::grid::fold",
                          FoldPartials<ExecSpace, T>{acc, PartialRows<T>{ws_o_.data(), ws_lse_.data(), nq, qi, 1}});
            }
          }
        });
        keys_.poke_all();
      }
    }
    latch_.guard([&] {
      FinishRows<ExecSpace, T> fin{acc};
      fin.lse = dense_operand(blk_lse_[r].device(), n, H, 1);
      launch_rows(space_, "kattn::dist::grid::finish", fin);
      space_.fence();
    });
  }

  // Deterministic mode: the chunk partials of query shard qrank against this row's keys, written
  // one after the other into its stream in the order its owner folds them (GridPlan::items).
  void compute_stream(int r, int qrank, const T* qb, const Options& opt) {
    const int H = p_.heads_q, D = p_.head_dim;
    const std::int64_t n = plan_.q_layout().local_length(qrank);
    T* out = streams_out_[r].device();
    std::int64_t pos = 0;
    for (const Segment& ks : plan_.kv_layout().segments()) {
      if (plan_.row_of(ks.owner) != g_) continue;
      for (const GridItem& it : plan_.items(ks, qrank)) {
        const Held h = keys_.held_of(space_, it.piece, stats_);
        const std::int64_t vals = std::int64_t(p_.batch) * it.rows * H;
        latch_.guard([&] {
          const Options o = shard_options(opt, it.qs.global + it.row, it.rows, plan_.Nq(), it.piece.global + it.at,
                                          it.keys, plan_.Nk());
          stats_.flops += 4.0 * D * double(KeyWindow::from(o).visible_pairs(it.rows, it.keys)) * p_.batch * H;
          const AttentionParams<T, T, KV> q = block_params(qb, n, it.qs.local + it.row, it.rows, h, it.at, it.keys);
          chunk_partials(space_, q, o, 1, it.keys, out + pos, out + pos + vals * D);
        });
        pos += vals * (D + 1);
        keys_.poke_all();
      }
    }
    latch_.guard([&] { space_.fence(); });
  }

  // This rank's rows: the partial results of its column folded into the caller's o in a fixed order.
  void merge(std::int64_t n_own) {
    const int H = p_.heads_q, D = p_.head_dim;
    const RowAccumulator<T> acc = accumulator(p_.o, ml_.data(), p_.batch, n_own, H, D);
    launch_rows(space_, "kattn::dist::grid::init", InitRows<ExecSpace, T>{acc});
    if (d_.deterministic) {
      // Every chunk partial of these rows in global key order, whichever grid row computed it.
      std::vector<std::int64_t> pos(plan_.rows(), 0);
      for (const Segment& ks : plan_.kv_layout().segments()) {
        const int r = plan_.row_of(ks.owner);
        const T* s = r == g_ ? streams_out_[r].device() : streams_in_[r].device();
        for (const GridItem& it : plan_.items(ks, rank_)) {
          const std::int64_t vals = std::int64_t(p_.batch) * it.rows * H;
          launch_rows(space_, "kattn::dist::grid::fold_chunks",
                      FoldPartials<ExecSpace, T>{
                          acc, PartialRows<T>{s + pos[r], s + pos[r] + vals * D, it.rows, it.qs.local + it.row, 1}});
          pos[r] += vals * (D + 1);
        }
      }
    } else {
      for (int r : merges_) {
        const T* o = r == g_ ? blk_o_[r].device() : st_o_[r].device();
        const T* lse = r == g_ ? blk_lse_[r].device() : st_lse_[r].device();
        launch_rows(space_, "kattn::dist::grid::merge",
                    FoldPartials<ExecSpace, T>{acc, PartialRows<T>{o, lse, n_own, 0, 1}});
      }
    }
    FinishRows<ExecSpace, T> fin{acc};
    fin.lse = p_.lse;
    launch_rows(space_, "kattn::dist::grid::finish", fin);
    space_.fence();
  }

  MPI_Comm comm_;
  ExecSpace space_;
  AttentionParams<T, T, KV> p_;
  Options opt_;
  DistOptions d_;
  const GridPlan& plan_;
  FailureLatch& latch_;
  int rank_ = 0, g_ = 0, c_ = 0;
  GridKeys<ExecSpace, KV> keys_;
  std::vector<int> computes_, merges_;
  TBuf own_q_;
  std::vector<TBuf> q_in_, blk_o_, blk_lse_, st_o_, st_lse_, streams_out_, streams_in_;
  std::vector<Kokkos::View<T*, Mem>> blk_ml_;
  Kokkos::View<T*, Mem> ws_o_, ws_lse_, ml_;
  DistStats stats_;
};

}  // namespace

template <class ExecSpace, class T, class KV>
DistStats grid_forward_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<T, T, KV>& p,
                            const Options& opt, const DistOptions& d, FailureLatch* outer) {
  compat::ScopedRegion area("kattn::dist");
  compat::ScopedRegion region("kattn::dist::grid");
  const GlobalSplit split =
      enter_sharded_call(comm, problem_fields(DistCall::grid_forward, p, opt, d), opt, p.q_len, p.kv_len, d);
  int P = 1;
  MPI_Comm_size(comm, &P);
  std::optional<GridPlan> plan;
  collective_check(comm, [&] { plan.emplace(opt, split.Nq, split.Nk, P, d); });
  return under_latch(comm, outer, [&](FailureLatch& latch) {
    return GridRunner<ExecSpace, T, KV>(comm, space, p, opt, d, *plan, latch).run();
  });
}

template <class ExecSpace, class S>
DistStats grid_ragged_forward_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<S>& p,
                                   const BatchLengths& lengths, const Options& opt, const DistOptions& d) {
  compat::ScopedRegion area("kattn::dist");
  compat::ScopedRegion region("kattn::dist::grid");
  collective_agree(comm, problem_fields(DistCall::grid_ragged_forward, p, opt, d));
  require_no_block_mask(opt);
  return forward_each_sequence(comm, space, p, lengths, opt, d, "kattn::dist::attention (grid)",
                               [&](const auto& seq, const DistOptions& each, FailureLatch* latch) {
                                 return grid_forward_impl(comm, space, seq, opt, each, latch);
                               });
}

#define KATTN_INSTANTIATE_GRID_KV(Space, T, KV)                                                                \
  template DistStats grid_forward_impl<Space, T, KV>(MPI_Comm, const Space&, const AttentionParams<T, T, KV>&, \
                                                     const Options&, const DistOptions&, FailureLatch*);
#define KATTN_INSTANTIATE_RAGGED_GRID(Space, S)                                                            \
  template DistStats grid_ragged_forward_impl<Space, S>(MPI_Comm, const Space&, const AttentionParams<S>&, \
                                                        const BatchLengths&, const Options&, const DistOptions&);
#define KATTN_INSTANTIATE_GRID(Space, T) \
  KATTN_INSTANTIATE_GRID_KV(Space, T, T) \
  KATTN_INSTANTIATE_RAGGED_GRID(Space, T)
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_GRID)
// 16-bit K/V under float queries, as the ring (the door widens 16-bit queries first); a ragged
// batch of 16-bit arrays (q widened, o rounded once, per sequence).
#define KATTN_INSTANTIATE_16BIT_GRID(Space, S) \
  KATTN_INSTANTIATE_GRID_KV(Space, float, S)   \
  KATTN_INSTANTIATE_RAGGED_GRID(Space, S)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_16BIT_GRID, bf16)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_16BIT_GRID, fp16)

}  // namespace detail
}  // namespace dist
}  // namespace kattn
