#include "kattn/dist/ring.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <string>
#include <utility>
#include <vector>

#include "kattn/compat.hpp"
#include "kattn/dist/clock.hpp"
#include "kattn/detail/backends.hpp"
#include "kattn/dist/agreement.hpp"
#include "kattn/dist/chunk_partials.hpp"
#include "kattn/dist/fold_kernels.hpp"
#include "kattn/dist/pack.hpp"
#include "kattn/dist/shard_math.hpp"
#include "kattn/dist/transport.hpp"

namespace kattn {
namespace dist {
namespace detail {

void validate(const DistOptions& d) {
  KATTN_REQUIRE(d.chunk >= 0, "chunk: expected keys per deterministic chunk >= 1 or 0 (", kDefaultChunk, "), got ",
                d.chunk);
  KATTN_REQUIRE(d.root >= -1, "root: expected a rank number or -1 (every rank), got ", d.root);
}

namespace {

// Query rows per kernel launch: a segment is cut into a few pieces so that MPI can progress the
// transfers between launches; small segments stay whole.
constexpr std::int64_t kMinPieceRows = 2048;
constexpr std::int64_t kPiecesPerSegment = 8;
std::int64_t piece_rows(std::int64_t seg_len) {
  return std::max<std::int64_t>(kMinPieceRows, (seg_len + kPiecesPerSegment - 1) / kPiecesPerSegment);
}

// Deterministic mode: at most this many chunk partials per launch (the workspace holds them), and
// this many key segments broadcast ahead.
constexpr int kChunksPerLaunch = 4;
constexpr std::size_t kBroadcastWindow = 4;

template <class ExecSpace, class T>
class RingRunner {
 public:
  using Mem = typename ExecSpace::memory_space;
  using Buffer = MessageBuffer<T, Mem>;

  RingRunner(MPI_Comm comm, const ExecSpace& space, const AttentionParams<T>& p, const Options& opt,
             const DistOptions& d, const GlobalSplit& split)
      : comm_(comm), space_(space), p_(p), opt_(opt), d_(d), s_(split) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &P_);
    const int H = p.heads_q, D = p.head_dim;
    // The accumulator: o in the caller's o, (m, l) per row here.
    ml_ = Kokkos::View<T*, Mem>(Kokkos::view_alloc(space, Kokkos::WithoutInitializing, "kattn::dist::ring::ml"),
                                2 * std::size_t(p.batch) * p.q_len * H);
    acc_.o = p.o;
    acc_.o_b = p.o_stride_batch, acc_.o_i = p.o_stride_seq, acc_.o_h = p.o_stride_head;
    acc_.m = ml_.data();
    acc_.l = ml_.data() + std::size_t(p.batch) * p.q_len * H;
    acc_.s_b = p.q_len * H, acc_.s_i = H, acc_.s_h = 1;
    acc_.batch = p.batch, acc_.heads = H, acc_.head_dim = D, acc_.q_len = p.q_len;
    stats_.staged = needs_staging<Mem>(d.staging);
  }

  DistStats run() {
    const double t0 = now();
    launch_rows(space_, "kattn::dist::ring::init", InitRows<ExecSpace, T>{acc_});
    if (d_.deterministic)
      run_global_order();
    else
      run_ring();
    FinishRows<ExecSpace, T> fin{acc_};
    fin.lse = p_.lse;
    fin.l_b = p_.lse_stride_batch, fin.l_i = p_.lse_stride_seq, fin.l_h = p_.lse_stride_head;
    launch_rows(space_, "kattn::dist::ring::finish", fin);
    space_.fence();
    stats_.seconds = now() - t0;
    return stats_;
  }

 private:
  std::int64_t kv_elems(std::int64_t n) const { return std::int64_t(p_.batch) * n * p_.heads_kv * p_.head_dim; }

  // K/V positions [j0, j0 + n) of this rank's shard into dense buffers.
  void pack_local(std::int64_t j0, std::int64_t n, const Buffer& k, const Buffer& v) {
    const int Hkv = p_.heads_kv, D = p_.head_dim;
    copy_rows(space_, Strided<const T>{p_.k, p_.k_stride_batch, p_.k_stride_seq, p_.k_stride_head}, j0,
              dense(k.device(), n, Hkv, D), p_.batch, n, Hkv, D);
    copy_rows(space_, Strided<const T>{p_.v, p_.v_stride_batch, p_.v_stride_seq, p_.v_stride_head}, j0,
              dense(v.device(), n, Hkv, D), p_.batch, n, Hkv, D);
  }

  // Attention of local query rows [qi, qi + nq) (global qg) against keys [0, kv_len) of a dense
  // K/V buffer holding `held` positions per sequence from key offset kj (global kg), folded into
  // the accumulator; partials in ws.
  void fold_pair(std::int64_t qi, std::int64_t qg, std::int64_t nq, const T* k, const T* v, std::int64_t held,
                 std::int64_t kj, std::int64_t kg, std::int64_t kv_len, std::vector<MPI_Request>& reqs) {
    const int H = p_.heads_q, Hkv = p_.heads_kv, D = p_.head_dim;
    const Options o = shard_options(opt_, qg, nq, s_.Nq, kg, kv_len, s_.Nk);
    const std::int64_t pairs = visible_pairs(o, nq, kv_len);
    if (pairs == 0) return;
    stats_.flops += 4.0 * D * double(pairs) * p_.batch * H;
    AttentionParams<T> q = p_;
    q.q = p_.q + qi * p_.q_stride_seq;
    q.q_len = nq;
    q.q_total = std::int64_t(p_.batch) * nq;
    q.k = k + kj * Hkv * D;
    q.v = v + kj * Hkv * D;
    q.k_stride_batch = q.v_stride_batch = held * Hkv * D;
    q.k_stride_seq = q.v_stride_seq = std::int64_t(Hkv) * D;
    q.k_stride_head = q.v_stride_head = D;
    q.kv_len = kv_len;
    ensure_workspace(1, nq);
    q.o = ws_o_.data();
    q.o_stride_batch = nq * H * D, q.o_stride_seq = std::int64_t(H) * D, q.o_stride_head = D;
    q.lse = ws_lse_.data();
    q.lse_stride_batch = nq * H, q.lse_stride_head = 1, q.lse_stride_seq = H;
    kattn::detail::attention_impl(space_, q, o, BatchLengths{});
    launch_rows(space_, "kattn::dist::ring::fold",
                FoldPartials<ExecSpace, T>{acc_, PartialRows<T>{ws_o_.data(), ws_lse_.data(), nq, qi, 1}});
    poke(reqs);
  }

  void ensure_workspace(int parts, std::int64_t nq) {
    const std::size_t rows = std::size_t(parts) * p_.batch * nq * p_.heads_q;
    if (ws_lse_.extent(0) >= rows) return;
    ws_o_ = Kokkos::View<T*, Mem>(Kokkos::view_alloc(space_, Kokkos::WithoutInitializing, "kattn::dist::partial_o"),
                                  rows * p_.head_dim);
    ws_lse_ = Kokkos::View<T*, Mem>(Kokkos::view_alloc(space_, Kokkos::WithoutInitializing, "kattn::dist::partial_lse"),
                                    rows);
  }

  // The ring: at step t this rank holds the K/V shard of rank (rank - t) mod P, sends it to the
  // right and receives the next from the left while it computes.
  void run_ring() {
    std::int64_t cap = 0;
    for (std::int64_t n : s_.kv_lens) cap = std::max(cap, n);
    const bool staged = stats_.staged;
    Buffer kb[2] = {Buffer("kattn::dist::ring::k0", kv_elems(cap), staged),
                    Buffer("kattn::dist::ring::k1", kv_elems(cap), staged)};
    Buffer vb[2] = {Buffer("kattn::dist::ring::v0", kv_elems(cap), staged),
                    Buffer("kattn::dist::ring::v1", kv_elems(cap), staged)};
    if (!d_.communicate) {
      // Without transfers every step reads this rank's buffer at the lengths of the shard it
      // stands for; zeros past this shard's end keep those reads defined.
      Kokkos::deep_copy(space_, kb[0].view(), T(0));
      Kokkos::deep_copy(space_, vb[0].view(), T(0));
    }
    pack_local(0, p_.kv_len, kb[0], vb[0]);
    space_.fence();
    const int right = (rank_ + 1) % P_, left = (rank_ - 1 + P_) % P_;
    const auto q_segs = s_.q_layout.segments_of(rank_);
    int cur = 0;
    for (int t = 0; t < P_; ++t) {
      const int owner = (rank_ - t + P_) % P_;
      std::vector<MPI_Request> reqs;
      const bool transfer = d_.communicate && t + 1 < P_;
      const double tc0 = now();
      if (transfer) {
        const int from = (rank_ - t - 1 + P_) % P_;
        const std::int64_t n_in = kv_elems(s_.kv_lens[from]), n_out = kv_elems(s_.kv_lens[owner]);
        irecv(kb[1 - cur].mpi(), n_in, left, 0, comm_, reqs);
        irecv(vb[1 - cur].mpi(), n_in, left, 1, comm_, reqs);
        kb[cur].stage_out(space_, n_out);
        vb[cur].stage_out(space_, n_out);
        isend(kb[cur].mpi(), n_out, right, 0, comm_, reqs, stats_);
        isend(vb[cur].mpi(), n_out, right, 1, comm_, reqs, stats_);
      }
      const double tc1 = now(), cpu1 = cpu_now();
      // Positions per sequence in the buffer (its batch stride).
      const std::int64_t held = d_.communicate ? s_.kv_lens[owner] : cap;
      for (const Segment& qs : q_segs) {
        const std::int64_t step = piece_rows(qs.length);
        for (std::int64_t off = 0; off < qs.length; off += step) {
          const std::int64_t nq = std::min(step, qs.length - off);
          for (const Segment& ks : s_.kv_layout.segments_of(owner))
            fold_pair(qs.local + off, qs.global + off, nq, kb[cur].device(), vb[cur].device(), held, ks.local,
                      ks.global, ks.length, reqs);
        }
      }
      space_.fence();
      const double tc2 = now();
      stats_.compute_cpu_seconds += cpu_now() - cpu1;
      wait_all(reqs);
      if (transfer) {
        const std::int64_t n_in = kv_elems(s_.kv_lens[(rank_ - t - 1 + P_) % P_]);
        kb[1 - cur].stage_in(space_, n_in);
        vb[1 - cur].stage_in(space_, n_in);
        cur = 1 - cur;
      }
      const double tc3 = now();
      stats_.compute_seconds += tc2 - tc1;
      stats_.comm_seconds += (tc1 - tc0) + (tc3 - tc2);
      ++stats_.steps;
      if (d_.progress) d_.progress(t + 1, P_);
    }
  }

  // Deterministic: every key segment in global order, broadcast by its owner, up to
  // kBroadcastWindow segments in flight ahead of the one being computed (the per-segment work
  // differs between ranks under causal masks; the window lets a rank run ahead instead of
  // waiting at every segment), folded chunk by chunk into every local query row.
  void run_global_order() {
    const std::int64_t C = chunk_of(d_);
    Options opt = opt_;
    {
      Options plan = opt_;
      plan.block_q = 0;
      opt.block_k = deterministic_block_k<ExecSpace, T>(space_, p_.head_dim, s_.Nq * p_.group_size(), plan);
    }
    const auto& segs = s_.kv_layout.segments();
    const std::size_t S = segs.size();
    std::int64_t cap = 0;
    for (const Segment& g : segs) cap = std::max(cap, g.length);
    const std::size_t W = std::min<std::size_t>(S, kBroadcastWindow);
    std::vector<Buffer> kb, vb;
    for (std::size_t w = 0; w < W; ++w) {
      kb.emplace_back("kattn::dist::bcast::k", kv_elems(cap), stats_.staged);
      vb.emplace_back("kattn::dist::bcast::v", kv_elems(cap), stats_.staged);
    }
    std::vector<std::vector<MPI_Request>> reqs(W);
    const auto post = [&](std::size_t g) {
      const Segment& s = segs[g];
      const std::size_t slot = g % W;
      if (s.owner == rank_) {
        pack_local(s.local, s.length, kb[slot], vb[slot]);
        space_.fence();
        kb[slot].stage_out(space_, kv_elems(s.length));
        vb[slot].stage_out(space_, kv_elems(s.length));
      }
      if (P_ > 1) {
        ibcast(kb[slot].mpi(), kv_elems(s.length), s.owner, comm_, reqs[slot], stats_);
        ibcast(vb[slot].mpi(), kv_elems(s.length), s.owner, comm_, reqs[slot], stats_);
      }
    };
    const auto q_segs = s_.q_layout.segments_of(rank_);
    for (std::size_t g = 0; g < W; ++g) post(g);
    for (std::size_t g = 0; g < S; ++g) {
      const std::size_t slot = g % W;
      const double tw0 = now();
      wait_all(reqs[slot]);
      if (segs[g].owner != rank_) {
        kb[slot].stage_in(space_, kv_elems(segs[g].length));
        vb[slot].stage_in(space_, kv_elems(segs[g].length));
      }
      const double tw1 = now(), cpu1 = cpu_now();
      const Segment& ks = segs[g];
      for (const Segment& qs : q_segs) {
        const std::int64_t step = piece_rows(qs.length);
        for (std::int64_t off = 0; off < qs.length; off += step) {
          const std::int64_t nq = std::min(step, qs.length - off);
          fold_chunks(qs.local + off, qs.global + off, nq, kb[slot].device(), vb[slot].device(), ks, C, opt, reqs);
        }
      }
      space_.fence();
      const double tw2 = now();
      stats_.compute_cpu_seconds += cpu_now() - cpu1;
      if (g + W < S) post(g + W);  // into the slot just computed
      stats_.comm_seconds += (tw1 - tw0) + (now() - tw2);
      stats_.compute_seconds += tw2 - tw1;
      ++stats_.steps;
      if (d_.progress) d_.progress(static_cast<int>(g + 1), static_cast<int>(S));
    }
  }

  // The chunks of key segment ks that some of the query rows [qi, qi + nq) see, in order,
  // kChunksPerLaunch per launch, each chunk's partial folded in turn.
  void fold_chunks(std::int64_t qi, std::int64_t qg, std::int64_t nq, const T* k, const T* v, const Segment& ks,
                   std::int64_t C, const Options& opt, std::vector<std::vector<MPI_Request>>& reqs) {
    const int H = p_.heads_q, Hkv = p_.heads_kv, D = p_.head_dim;
    const KeyRange seen = visible_keys(shard_options(opt, qg, nq, s_.Nq, ks.global, ks.length, s_.Nk), nq, ks.length);
    if (seen.empty()) return;
    const std::int64_t c_lo = seen.lo / C, c_hi = seen.hi / C;
    for (std::int64_t c0 = c_lo; c0 <= c_hi; c0 += kChunksPerLaunch) {
      const int n_chunks = static_cast<int>(std::min<std::int64_t>(kChunksPerLaunch, c_hi - c0 + 1));
      const std::int64_t j0 = c0 * C, kv_len = std::min(ks.length, (c0 + n_chunks) * C) - j0;
      const Options o = shard_options(opt, qg, nq, s_.Nq, ks.global + j0, kv_len, s_.Nk);
      stats_.flops += 4.0 * D * double(visible_pairs(o, nq, kv_len)) * p_.batch * H;
      AttentionParams<T> q = p_;
      q.q = p_.q + qi * p_.q_stride_seq;
      q.q_len = nq;
      q.q_total = std::int64_t(p_.batch) * nq;
      q.k = k + j0 * Hkv * D;
      q.v = v + j0 * Hkv * D;
      q.k_stride_batch = q.v_stride_batch = ks.length * Hkv * D;
      q.k_stride_seq = q.v_stride_seq = std::int64_t(Hkv) * D;
      q.k_stride_head = q.v_stride_head = D;
      q.kv_len = kv_len;
      q.o = nullptr;
      q.lse = nullptr;
      ensure_workspace(n_chunks, nq);
      chunk_partials(space_, q, o, n_chunks, C, ws_o_.data(), ws_lse_.data());
      launch_rows(space_, "kattn::dist::ring::fold_chunks",
                  FoldPartials<ExecSpace, T>{acc_, PartialRows<T>{ws_o_.data(), ws_lse_.data(), nq, qi, n_chunks}});
      for (auto& r : reqs) poke(r);
    }
  }

  MPI_Comm comm_;
  ExecSpace space_;
  AttentionParams<T> p_;
  Options opt_;
  DistOptions d_;
  GlobalSplit s_;
  int rank_ = 0, P_ = 1;
  Kokkos::View<T*, Mem> ml_, ws_o_, ws_lse_;
  RowAccumulator<T> acc_;
  DistStats stats_;
};

}  // namespace

template <class ExecSpace, class T>
DistStats ring_forward_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<T>& p, const Options& opt,
                            const DistOptions& d) {
  // Regions of the area ("kattn::dist", shared helpers) and of this entry point (its own kernels).
  compat::ScopedRegion area("kattn::dist");
  compat::ScopedRegion region("kattn::dist::ring");
  collective_agree(comm, problem_fields(DistCall::ring_attention, p, opt, d));
  require_no_block_mask(opt);
  const GlobalSplit split = sharded_split(comm, p.q_len, p.kv_len, d);
  RingRunner<ExecSpace, T> runner(comm, space, p, opt, d, split);
  return runner.run();
}

#define KATTN_INSTANTIATE_RING(Space, T)                                                                            \
  template DistStats ring_forward_impl<Space, T>(MPI_Comm, const Space&, const AttentionParams<T>&, const Options&, \
                                                 const DistOptions&);
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_RING)

}  // namespace detail
}  // namespace dist
}  // namespace kattn
