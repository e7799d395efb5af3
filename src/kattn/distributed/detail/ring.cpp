#include "kattn/distributed/detail/schemes.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <string>
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
#include "kattn/distributed/detail/inner_stats.hpp"
#include "kattn/distributed/detail/pack.hpp"
#include "kattn/distributed/detail/ragged_pieces.hpp"
#include "kattn/distributed/detail/ragged_sequences.hpp"
#include "kattn/distributed/detail/shard_math.hpp"
#include "kattn/distributed/detail/transport.hpp"

namespace kattn {
namespace dist {
namespace detail {

namespace {

// Query rows per kernel launch: a segment is cut into a few pieces so that MPI can progress the
// transfers between launches; small segments stay whole.
constexpr std::int64_t kMinPieceRows = 2048;
constexpr std::int64_t kPiecesPerSegment = 8;
std::int64_t piece_rows(std::int64_t seg_len) {
  return std::max<std::int64_t>(kMinPieceRows, (seg_len + kPiecesPerSegment - 1) / kPiecesPerSegment);
}

// Deterministic mode: this many key segments received ahead.
constexpr std::size_t kReceiveWindow = 4;

// T: q, o and the accumulation type; KV: the storage of k and v, in which they travel. ragged:
// the pieces of a ragged batch whose piece-major rows p and the split stand for (ragged_pieces.hpp).
template <class ExecSpace, class T, class KV>
class RingRunner {
 public:
  using Mem = typename ExecSpace::memory_space;
  using Buffer = MessageBuffer<KV, Mem>;

  RingRunner(MPI_Comm comm, const ExecSpace& space, const AttentionParams<T, T, KV>& p, const Options& opt,
             const DistOptions& d, const GlobalSplit& split, FailureLatch& latch,
             const RaggedPieces<Mem>* ragged = nullptr)
      : comm_(comm), space_(space), p_(p), opt_(opt), d_(d), s_(split), latch_(latch), ragged_(ragged) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &P_);
    stats_.staged = needs_staging<Mem>(d.staging);
  }

  DistStats run() {
    const double t0 = now();
    // The accumulator and the partial workspace in one collective step (as each mode's message
    // buffers after it): what does not fit fails on every rank before the first transfer.
    collective_check(comm_, [&] {
      const std::uint64_t rows = std::uint64_t(p_.batch) * p_.q_len * p_.heads_q,
                          piece = std::uint64_t(p_.batch) * max_piece_rows() * p_.heads_q;
      require_buffers<Mem>(opt_.workspace, "kattn::dist::attention (ring)", 2 * rows + piece * (p_.head_dim + 1),
                           sizeof(T));
      allocate_accumulator();
      ensure_workspace(max_piece_rows());
    });
    launch_rows(space_, "kattn::dist::ring::init", InitRows<ExecSpace, T>{acc_});
    if (d_.deterministic)
      run_global_order();
    else
      run_ring();
    FinishRows<ExecSpace, T> fin{acc_};
    fin.lse = p_.lse;
    launch_rows(space_, "kattn::dist::ring::finish", fin);
    space_.fence();
    stats_.seconds = now() - t0;
    return stats_;
  }

 private:
  std::int64_t row() const { return std::int64_t(p_.heads_kv) * p_.head_dim; }  // values per K/V position
  std::int64_t kv_elems(std::int64_t n) const { return p_.batch * n * row(); }

  // This rank's K/V shard into dense buffers [B][kv_len][Hkv][D]: every piece is sent from there.
  void pack_own(const Buffer& k, const Buffer& v) {
    const int Hkv = p_.heads_kv, D = p_.head_dim;
    const std::int64_t n = p_.kv_len;
    copy_rows(space_, p_.k, 0, dense_operand(k.device(), n, Hkv, D), p_.batch, n, Hkv, D);
    copy_rows(space_, p_.v, 0, dense_operand(v.device(), n, Hkv, D), p_.batch, n, Hkv, D);
  }

  // Keys of one piece (needed_keys) as this rank holds them.
  using Held = HeldKeys<KV>;

  // Attention of local query rows [qi, qi + nq) (global qg) against the keys of piece ks, held as
  // h, folded into the accumulator; partials in ws.
  void fold_pair(std::int64_t qi, std::int64_t qg, std::int64_t nq, const Held& h, const Segment& ks,
                 std::vector<MPI_Request>& reqs) {
    const int H = p_.heads_q, Hkv = p_.heads_kv, D = p_.head_dim;
    const PiecePair pp = shard_pair(opt_, s_, qg, nq, ks.global, ks.length, ragged_);
    if (pp.runs.empty()) return;
    AttentionParams<T, T, KV> q = p_;
    q.q = p_.q.from_row(qi);
    q.q_len = nq;
    q.q_total = std::int64_t(p_.batch) * nq;
    q.k = h.k_from(0, Hkv, D);
    q.v = h.v_from(0, Hkv, D);
    q.kv_len = ks.length;
    ensure_workspace(nq);
    q.o = dense_operand(ws_o_.data(), nq, H, D);
    q.lse = dense_operand(ws_lse_.data(), nq, H, 1);
    stats_.flops += 4.0 * D * pp.pairs * p_.batch * H;
    if (!pp.covers_all) clear_partials(nq);
    for (const PieceRun& r : pp.runs) {
      AttentionParams<T, T, KV> run = q;
      const BatchLengths lengths = ragged_ ? ragged_->use_run(run, r) : BatchLengths{};
      kattn::detail::attention_impl(space_, run, with_block_bias(r.opt, qi, ks.global, nq, ks.length), lengths);
    }
    launch_rows(space_, "kattn::dist::ring::fold",
                FoldPartials<ExecSpace, T>{acc_, PartialRows<T>{ws_o_.data(), ws_lse_.data(), nq, qi, 1}});
    poke(reqs);
  }

  // The partials of nq rows as those of rows that see no key (o = 0, lse = -inf): what a ragged
  // pair leaves to the sequences that see none of it.
  void clear_partials(std::int64_t nq) {
    const std::size_t rows = std::size_t(p_.batch) * nq * p_.heads_q;
    Kokkos::deep_copy(space_, Kokkos::subview(ws_o_, std::make_pair(std::size_t(0), rows * p_.head_dim)), T(0));
    Kokkos::deep_copy(space_, Kokkos::subview(ws_lse_, std::make_pair(std::size_t(0), rows)),
                      -compat::infinity<T>());
  }

  // The accumulator: o in the caller's o, (m, l) per row here.
  void allocate_accumulator() {
    const int H = p_.heads_q;
    ml_ =
        take_buffer<T, Mem>(opt_.workspace, space_, "kattn::dist::ring::ml", 2 * std::size_t(p_.batch) * p_.q_len * H);
    acc_ = accumulator(p_.o, ml_.data(), p_.batch, p_.q_len, H, p_.head_dim);
  }

  // Query rows per launch of the ring: a ragged pair is one call over every sequence's part.
  std::int64_t rows_per_launch(std::int64_t seg_len) const { return ragged_ ? seg_len : piece_rows(seg_len); }

  // The most query rows one launch takes: the partial workspace is sized for them up front.
  std::int64_t max_piece_rows() const {
    std::int64_t rows = 0;
    for (const Segment& qs : s_.q_layout.segments_of(rank_))
      rows = std::max(rows, std::min(rows_per_launch(qs.length), qs.length));
    return rows;
  }

  // Room for one partial (o, lse) of nq query rows.
  void ensure_workspace(std::int64_t nq) {
    const std::size_t rows = std::size_t(p_.batch) * nq * p_.heads_q;
    if (ws_lse_.extent(0) >= rows) return;
    ws_o_ = take_buffer<T, Mem>(opt_.workspace, space_, "kattn::dist::partial_o", rows * p_.head_dim);
    ws_lse_ = take_buffer<T, Mem>(opt_.workspace, space_, "kattn::dist::partial_lse", rows);
  }

  // The ring over the shifts of ring_shifts: at step t this rank receives from rank r - t the keys
  // its queries see (and nothing when they see none), and sends rank r + t those its queries see,
  // straight from this rank's packed shard. The next step's transfer is in flight while the
  // current one is computed.
  void run_ring() {
    const std::vector<RingStep> plan = ring_plan(opt_, s_, rank_, ragged_);
    const std::size_t steps = plan.size();
    std::vector<Landing> lands;
    std::int64_t cap = 0;
    for (std::size_t i = 0; i < steps; ++i) {
      lands.push_back(landing(plan[i].in, ragged_));
      if (i > 0) cap = std::max(cap, lands[i].held);
    }
    const bool staged = stats_.staged;
    const std::int64_t n_own = p_.kv_len;
    Buffer own_k, own_v, kb[2], vb[2];
    // Every buffer before the first transfer, in one collective step: one that does not fit fails
    // on every rank.
    collective_check(comm_, [&] {
      require_buffers<Mem>(opt_.workspace, "kattn::dist::attention (ring)", 2 * kv_elems(n_own) + 4 * kv_elems(cap),
                           sizeof(KV));
      own_k = Buffer(opt_.workspace, "kattn::dist::ring::own_k", kv_elems(n_own), staged);
      own_v = Buffer(opt_.workspace, "kattn::dist::ring::own_v", kv_elems(n_own), staged);
      for (int b = 0; b < 2; ++b) {
        kb[b] =
            Buffer(opt_.workspace, b == 0 ? "kattn::dist::ring::k0" : "kattn::dist::ring::k1", kv_elems(cap), staged);
        vb[b] =
            Buffer(opt_.workspace, b == 0 ? "kattn::dist::ring::v0" : "kattn::dist::ring::v1", kv_elems(cap), staged);
      }
    });
    pack_own(own_k, own_v);
    space_.fence();
    if (d_.communicate && steps > 1) {
      own_k.stage_out(space_, kv_elems(n_own));
      own_v.stage_out(space_, kv_elems(n_own));
    }
    if (!d_.communicate) {
      // Without transfers every step reads buffer 0 at the lengths of the keys it stands for;
      // zeros (KV{}: +0 in every storage type) keep those reads defined.
      Kokkos::deep_copy(space_, kb[0].view(), KV{});
      Kokkos::deep_copy(space_, vb[0].view(), KV{});
    }
    const auto q_segs = s_.q_layout.segments_of(rank_);
    int cur = 0;
    for (std::size_t i = 0; i < steps; ++i) {
      std::vector<MPI_Request> reqs;
      const bool transfer = d_.communicate && i + 1 < steps;
      const double tc0 = now();
      if (transfer) {
        const RingStep& next = plan[i + 1];
        const Landing& into = lands[i + 1];
        if (into.sparse) {
          kb[1 - cur].clear(space_, kv_elems(into.held));
          vb[1 - cur].clear(space_, kv_elems(into.held));
        }
        recv_pieces_at(kb[1 - cur].mpi(), vb[1 - cur].mpi(), row(), p_.batch, next.in, into.pieces_at, into.held,
                       next.from, 0, 1, comm_, reqs);
        send_pieces(own_k.mpi(), own_v.mpi(), n_own, row(), p_.batch, next.out, next.to, 0, 1, comm_, reqs, stats_);
      }
      const double tc1 = now(), cpu1 = cpu_now();
      latch_.guard([&] {
        const Landing& l = lands[i];
        for (std::size_t j = 0; j < l.keys.size(); ++j) {
          const Segment& ks = l.keys[j];
          const Held h = i == 0 ? Held{own_k.device(), own_v.device(), n_own, ks.local}
                                : Held{kb[cur].device(), vb[cur].device(), l.held, l.keys_at[j]};
          for (const Segment& qs : q_segs) {
            const std::int64_t step = rows_per_launch(qs.length);
            for (std::int64_t off = 0; off < qs.length; off += step)
              fold_pair(qs.local + off, qs.global + off, std::min(step, qs.length - off), h, ks, reqs);
          }
        }
        space_.fence();
      });
      const double tc2 = now();
      stats_.compute_cpu_seconds += cpu_now() - cpu1;
      wait_all(reqs);
      if (transfer) {
        const std::int64_t n_in = kv_elems(lands[i + 1].held);
        kb[1 - cur].stage_in(space_, n_in);
        vb[1 - cur].stage_in(space_, n_in);
        cur = 1 - cur;
      }
      const double tc3 = now();
      stats_.compute_seconds += tc2 - tc1;
      stats_.comm_seconds += (tc1 - tc0) + (tc3 - tc2);
      ++stats_.steps;
      latch_.guard([&] {
        if (d_.progress) d_.progress(static_cast<int>(i + 1), static_cast<int>(steps));
      });
    }
  }

  // Deterministic: every key segment in global order, its needed pieces sent by its owner to each
  // rank that sees them (all sends posted at once, from the owner's packed shard), each rank
  // receiving up to kReceiveWindow segments ahead of the one it computes (the per-segment work
  // differs between ranks under causal masks; the window lets a rank run ahead instead of waiting
  // at every segment), folded chunk by chunk into every local query row. Pieces are whole chunks,
  // so every row folds the same chunks in the same global order at every rank count.
  void run_global_order() {
    const std::int64_t C = chunk_of(d_);
    Options opt = opt_;
    {
      Options plan = opt_;
      plan.block_q = 0;
      opt.block_k = deterministic_block_k<ExecSpace, T>(space_, p_.head_dim, s_.Nq * p_.group_size(), plan);
    }
    const std::int64_t n_own = p_.kv_len;
    // The segments this rank needs, with their pieces, in global order; the pieces of its own
    // segments each other rank needs, in the order they are sent.
    struct Needed {
      Segment seg;
      std::vector<Segment> pieces;
    };
    struct Outgoing {
      int to;
      std::vector<Segment> pieces;
    };
    std::vector<Needed> needed;
    std::vector<Outgoing> outgoing;
    std::int64_t cap = 0;
    for (const Segment& ks : s_.kv_layout.segments()) {
      if (ks.owner == rank_) {
        for (int r = 0; r < P_; ++r) {
          if (r == rank_ || !d_.communicate) continue;
          auto pieces = needed_keys_of(opt_, s_.q_layout, s_.kv_layout, r, ks, C);
          if (!pieces.empty()) outgoing.push_back(Outgoing{r, std::move(pieces)});
        }
      }
      auto mine = needed_keys_of(opt_, s_.q_layout, s_.kv_layout, rank_, ks, C);
      if (mine.empty()) continue;
      if (ks.owner != rank_) cap = std::max(cap, total_length(mine));
      needed.push_back(Needed{ks, std::move(mine)});
    }
    const std::size_t S = needed.size(), W = std::min<std::size_t>(S, kReceiveWindow);
    Buffer own_k, own_v;
    std::vector<Buffer> kb(W), vb(W);
    // Every buffer before the first transfer, in one collective step: one that does not fit fails
    // on every rank.
    collective_check(comm_, [&] {
      require_buffers<Mem>(opt_.workspace, "kattn::dist::attention (ring)", 2 * kv_elems(n_own) + 2 * W * kv_elems(cap),
                           sizeof(KV));
      own_k = Buffer(opt_.workspace, "kattn::dist::det::own_k", kv_elems(n_own), stats_.staged);
      own_v = Buffer(opt_.workspace, "kattn::dist::det::own_v", kv_elems(n_own), stats_.staged);
      for (std::size_t w = 0; w < W; ++w) {
        kb[w] = Buffer(opt_.workspace, "kattn::dist::det::k", kv_elems(cap), stats_.staged);
        vb[w] = Buffer(opt_.workspace, "kattn::dist::det::v", kv_elems(cap), stats_.staged);
      }
    });
    pack_own(own_k, own_v);
    space_.fence();
    if (!outgoing.empty()) {
      own_k.stage_out(space_, kv_elems(n_own));
      own_v.stage_out(space_, kv_elems(n_own));
    }
    std::vector<MPI_Request> sends;
    for (const Outgoing& out : outgoing)
      send_pieces(own_k.mpi(), own_v.mpi(), n_own, row(), p_.batch, out.pieces, out.to, 0, 1, comm_, sends, stats_);
    if (!d_.communicate)
      for (std::size_t w = 0; w < W; ++w) {
        Kokkos::deep_copy(space_, kb[w].view(), KV{});
        Kokkos::deep_copy(space_, vb[w].view(), KV{});
      }
    std::vector<std::vector<MPI_Request>> reqs(W + 1);
    reqs[W] = std::move(sends);  // poked with the receives
    const auto post = [&](std::size_t g) {
      if (needed[g].seg.owner != rank_ && d_.communicate)
        recv_pieces(kb[g % W].mpi(), vb[g % W].mpi(), row(), p_.batch, needed[g].pieces, needed[g].seg.owner, 0, 1,
                    comm_, reqs[g % W]);
    };
    const auto q_segs = s_.q_layout.segments_of(rank_);
    for (std::size_t g = 0; g < W; ++g) post(g);
    for (std::size_t g = 0; g < S; ++g) {
      const std::size_t slot = g % W;
      const bool own = needed[g].seg.owner == rank_;
      const std::int64_t held = own ? n_own : total_length(needed[g].pieces);
      const double tw0 = now();
      wait_all(reqs[slot]);
      if (!own) {
        kb[slot].stage_in(space_, kv_elems(held));
        vb[slot].stage_in(space_, kv_elems(held));
      }
      const double tw1 = now(), cpu1 = cpu_now();
      latch_.guard([&] {
        std::int64_t at = 0;
        for (const Segment& ks : needed[g].pieces) {
          const Held h = own ? Held{own_k.device(), own_v.device(), held, ks.local}
                             : Held{kb[slot].device(), vb[slot].device(), held, at};
          at += ks.length;
          for (const Segment& qs : q_segs) fold_chunks(qs, h, ks, C, opt, reqs);
        }
        space_.fence();
      });
      const double tw2 = now();
      stats_.compute_cpu_seconds += cpu_now() - cpu1;
      if (g + W < S) post(g + W);  // into the slot just computed
      stats_.comm_seconds += (tw1 - tw0) + (now() - tw2);
      stats_.compute_seconds += tw2 - tw1;
      ++stats_.steps;
      latch_.guard([&] {
        if (d_.progress) d_.progress(static_cast<int>(g + 1), static_cast<int>(S));
      });
    }
    const double tw = now();
    wait_all(reqs[W]);  // this rank's sends, before its packed shard goes
    stats_.comm_seconds += now() - tw;
  }

  // The chunks of key piece ks (held as h; ks.global a multiple of C) that some row of query
  // segment qs sees, in order, one launch per chunk over only the rows that see some of its keys
  // (in pieces of piece_rows), each partial folded in turn. A row gets no partial of a chunk it
  // cannot see, which is what folding that empty partial would give: under a window or a causal
  // mask the partials written stay near the keys computed (several chunks per launch wrote one
  // per row and chunk, 1.3x-1.5x the work of the non-deterministic ring with a 256-key window).
  void fold_chunks(const Segment& qs, const Held& h, const Segment& ks, std::int64_t C, const Options& opt,
                   std::vector<std::vector<MPI_Request>>& reqs) {
    for_each_chunk_rows(
        opt, qs, ks, s_.Nq, s_.Nk, C, piece_rows(qs.length),
        [&](std::int64_t i, std::int64_t n, std::int64_t j0, std::int64_t keys) {
          fold_chunk_rows(qs.local + i, qs.global + i, n, h, ks, j0, keys, opt);
        },
        [&] {
          for (auto& r : reqs) poke(r);
        });
  }

  // The partial of query rows [qi, qi + nq) (global qg) against the chunk [j0, j0 + kv_len) of
  // piece ks, folded into the accumulator.
  void fold_chunk_rows(std::int64_t qi, std::int64_t qg, std::int64_t nq, const Held& h, const Segment& ks,
                       std::int64_t j0, std::int64_t kv_len, const Options& opt) {
    const int H = p_.heads_q, Hkv = p_.heads_kv, D = p_.head_dim;
    const Options o = with_block_bias(shard_options(opt, qg, nq, s_.Nq, ks.global + j0, kv_len, s_.Nk), qi,
                                      ks.global + j0, nq, kv_len);
    stats_.flops += 4.0 * D * double(KeyWindow::from(o).visible_pairs(nq, kv_len)) * p_.batch * H;
    AttentionParams<T, T, KV> q = p_;
    q.q = p_.q.from_row(qi);
    q.q_len = nq;
    q.q_total = std::int64_t(p_.batch) * nq;
    q.k = h.k_from(j0, Hkv, D);
    q.v = h.v_from(j0, Hkv, D);
    q.kv_len = kv_len;
    q.o = {};
    q.lse = {};
    ensure_workspace(nq);
    chunk_partials(space_, q, o, 1, kv_len, ws_o_.data(), ws_lse_.data());
    launch_rows(space_, "kattn::dist::ring::fold_chunks",
                FoldPartials<ExecSpace, T>{acc_, PartialRows<T>{ws_o_.data(), ws_lse_.data(), nq, qi, 1}});
  }

  MPI_Comm comm_;
  ExecSpace space_;
  AttentionParams<T, T, KV> p_;
  Options opt_;
  DistOptions d_;
  GlobalSplit s_;
  FailureLatch& latch_;
  const RaggedPieces<Mem>* ragged_;
  int rank_ = 0, P_ = 1;
  Kokkos::View<T*, Mem> ml_, ws_o_, ws_lse_;
  RowAccumulator<T> acc_;
  DistStats stats_;
};

}  // namespace

template <class ExecSpace, class T, class KV>
DistStats ring_forward_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<T, T, KV>& p,
                            const Options& opt, const DistOptions& d, FailureLatch* outer) {
  // Regions of the area ("kattn::dist", shared helpers) and of this entry point (its own kernels).
  compat::ScopedRegion area("kattn::dist");
  compat::ScopedRegion region("kattn::dist::ring");
  const GlobalSplit split =
      enter_sharded_call(comm, problem_fields(DistCall::ring_forward, p, opt, d), opt, p.q_len, p.kv_len, d);
  require_sharded_bias(comm, p, split.Nk, opt);
  return under_latch(comm, outer, [&](FailureLatch& latch) {
    return RingRunner<ExecSpace, T, KV>(comm, space, p, opt, d, split, latch).run();
  });
}

namespace {

// Deterministic mode: the deterministic dense ring on each sequence in turn (ragged_sequences.hpp).
template <class ExecSpace, class S>
DistStats ring_ragged_deterministic_forward(MPI_Comm comm, const ExecSpace& space, const AttentionParams<S>& p,
                                            const BatchLengths& lengths, const Options& opt, const DistOptions& d) {
  return forward_each_sequence(comm, space, p, lengths, opt, d, "kattn::dist::attention (ring)",
                               [&](const auto& seq, const DistOptions& each, FailureLatch* latch) {
                                 return ring_forward_impl(comm, space, seq, opt, each, latch);
                               });
}

}  // namespace

template <class ExecSpace, class S>
DistStats ring_ragged_forward_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<S>& p,
                                   const BatchLengths& lengths, const Options& opt, const DistOptions& d) {
  using Mem = typename ExecSpace::memory_space;
  using T = accumulate_t<S>;  // q, o and lse in the ring; K/V travel in S
  compat::ScopedRegion area("kattn::dist");
  compat::ScopedRegion region("kattn::dist::ring");
  collective_agree(comm, problem_fields(DistCall::ring_ragged_forward, p, opt, d));
  require_no_block_mask(opt);
  if (d.deterministic) return ring_ragged_deterministic_forward(comm, space, p, lengths, opt, d);
  const RaggedPieces<Mem> rp = ragged_pieces<Mem>(comm, lengths, d);
  const int H = p.heads_q, Hkv = p.heads_kv, D = p.head_dim;
  const std::int64_t nq = rp.q_local.back(), nk = rp.kv_local.back();
  // Piece-major copies of q, k, v and the outputs, in one collective step: q widened, o rounded
  // once on the way back.
  Kokkos::View<T*, Mem> q, o, lse;
  Kokkos::View<S*, Mem> k, v;
  collective_check(comm, [&] {
    const std::uint64_t q_elems = std::uint64_t(nq) * H * D, kv_elems = std::uint64_t(nk) * Hkv * D;
    require_buffers<Mem>(opt.workspace, "kattn::dist::attention (ring)", 2 * q_elems + std::uint64_t(nq) * H, sizeof(T),
                         2 * kv_elems, sizeof(S));
    q = piece_major_array<T>(opt.workspace, space, "kattn::dist::ragged::q", q_elems);
    o = piece_major_array<T>(opt.workspace, space, "kattn::dist::ragged::o", q_elems);
    k = piece_major_array<S>(opt.workspace, space, "kattn::dist::ragged::k", kv_elems);
    v = piece_major_array<S>(opt.workspace, space, "kattn::dist::ragged::v", kv_elems);
    lse = piece_major_array<T>(opt.workspace, space, "kattn::dist::ragged::lse", std::uint64_t(nq) * H);
  });
  to_piece_major(space, rp.q_rows, p.q, q.data(), H, D);
  to_piece_major(space, rp.kv_rows, p.k, k.data(), Hkv, D);
  to_piece_major(space, rp.kv_rows, p.v, v.data(), Hkv, D);
  const AttentionParams<T, T, S> pm =
      piece_major_params(p, nq, nk, q.data(), k.data(), v.data(), o.data(), p.lse ? lse.data() : nullptr);
  FailureLatch latch(comm);
  RingRunner<ExecSpace, T, S> runner(comm, space, pm, opt, d, rp.split, latch, &rp);
  const DistStats stats = runner.run();
  latch.settle();
  from_piece_major(space, rp.q_rows, o.data(), p.o, H, D);
  if (p.lse) from_piece_major(space, rp.q_rows, lse.data(), p.lse, H, 1);
  space.fence();
  return stats;
}

#define KATTN_INSTANTIATE_RING_KV(Space, T, KV)                                                                \
  template DistStats ring_forward_impl<Space, T, KV>(MPI_Comm, const Space&, const AttentionParams<T, T, KV>&, \
                                                     const Options&, const DistOptions&, FailureLatch*);
#define KATTN_INSTANTIATE_RAGGED_RING(Space, S)                                                               \
  template DistStats ring_ragged_forward_impl<Space, S>(MPI_Comm, const Space&, const AttentionParams<S>&,     \
                                                        const BatchLengths&, const Options&, const DistOptions&);
#define KATTN_INSTANTIATE_RING(Space, T) \
  KATTN_INSTANTIATE_RING_KV(Space, T, T) \
  KATTN_INSTANTIATE_RAGGED_RING(Space, T)
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_RING)
// 16-bit K/V under float queries (dense 16-bit queries are widened first: dense_call.hpp; a ragged
// batch's are widened in its piece-major copy).
#define KATTN_INSTANTIATE_16BIT_RING(Space, S) \
  KATTN_INSTANTIATE_RING_KV(Space, float, S) \
  KATTN_INSTANTIATE_RAGGED_RING(Space, S)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_16BIT_RING, bf16)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_16BIT_RING, fp16)

}  // namespace detail
}  // namespace dist
}  // namespace kattn
