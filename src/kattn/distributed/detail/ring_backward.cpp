#include "kattn/distributed/detail/schemes.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <vector>

#include "kattn/backward.hpp"
#include "kattn/compat.hpp"
#include "kattn/detail/backends.hpp"
#include "kattn/detail/bias_gradient.hpp"
#include "kattn/distributed/detail/agreement.hpp"
#include "kattn/distributed/detail/block_gradients.hpp"
#include "kattn/distributed/detail/buffer_memory.hpp"
#include "kattn/distributed/detail/clock.hpp"
#include "kattn/distributed/detail/failure_latch.hpp"
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

// Message tags: the ring's K, V, dK, dV; the deterministic tour's from kTagTour on (three per
// key segment).
enum : int { kTagK = 0, kTagV = 1, kTagDk = 2, kTagDv = 3, kTagTour = 4 };

// Outgoing packages the tour keeps in flight before it waits for those it safely can (memory).
constexpr std::size_t kTourWindow = 4;

// T: q, o, dout, the gradients and the accumulation type; KV: the storage of k and v (k, v, with
// p.fwd's strides), in which they travel (T, or 16-bit under float T). The dK/dV that travel with
// them stay in T. ragged: the pieces of a ragged batch whose piece-major rows p and the split
// stand for (ragged_pieces.hpp).
template <class ExecSpace, class T, class KV = T>
class BackwardRunner {
 public:
  using Mem = typename ExecSpace::memory_space;
  using Buffer = MessageBuffer<T, Mem>;
  using KVBuffer = MessageBuffer<KV, Mem>;

  BackwardRunner(MPI_Comm comm, const ExecSpace& space, const BackwardParams<T>& p, const KV* k, const KV* v,
                 const Options& opt, const DistOptions& d, const BackwardOptions& bopt, const GlobalSplit& split,
                 FailureLatch& latch, const RaggedPieces<Mem>* ragged = nullptr)
      : comm_(comm), space_(space), p_(p), k_(k), v_(v), opt_(opt), d_(d), bopt_(deterministic_if(bopt, d)),
        s_(split), latch_(latch), ragged_(ragged), blocks_(space, p, opt.workspace, bopt_) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &P_);
    stats_.staged = needs_staging<Mem>(d.staging);
  }

  DistStats run() {
    const double t0 = now();
    const AttentionParams<T>& f = p_.fwd;
    zero_rows(space_, p_.dq, f.batch, f.q_len, f.heads_q, f.head_dim);
    zero_rows(space_, p_.dk, f.batch, f.kv_len, f.heads_kv, f.head_dim);
    zero_rows(space_, p_.dv, f.batch, f.kv_len, f.heads_kv, f.head_dim);
    kattn::detail::zero_bias_gradient(space_, bopt_.dbias);  // each block writes its own part
    if (d_.deterministic)
      run_tour();
    else
      run_ring();
    space_.fence();
    stats_.seconds = now() - t0;
    return stats_;
  }

 private:
  const AttentionParams<T>& f() const { return p_.fwd; }
  std::int64_t kv_row() const { return std::int64_t(f().heads_kv) * f().head_dim; }  // values per K/V position
  std::int64_t kv_elems(std::int64_t n) const { return std::int64_t(f().batch) * n * f().heads_kv * f().head_dim; }
  Operand<T> dense_kv(T* base, std::int64_t n) const { return dense_operand(base, n, f().heads_kv, f().head_dim); }

  Buffer buffer(const char* label, std::int64_t n) const {
    return Buffer(opt_.workspace, label, kv_elems(n), stats_.staged);
  }
  KVBuffer kv_buffer(const char* label, std::int64_t n) const {
    return KVBuffer(opt_.workspace, label, kv_elems(n), stats_.staged);
  }

  void pack_local(std::int64_t j0, std::int64_t n, const KVBuffer& k, const KVBuffer& v) {
    const int Hkv = f().heads_kv, D = f().head_dim;
    copy_rows(space_, same_layout(k_, f().k), j0, dense_operand(k.device(), n, Hkv, D), f().batch, n, Hkv, D);
    copy_rows(space_, same_layout(v_, f().v), j0, dense_operand(v.device(), n, Hkv, D), f().batch, n, Hkv, D);
  }

  // This rank's query rows from local row qi on, as a block reads them.
  BackwardParams<T> rows_at(std::int64_t qi) const {
    BackwardParams<T> b = p_;
    b.fwd.q = f().q.from_row(qi);
    b.fwd.o = f().o.from_row(qi);
    b.fwd.lse = f().lse.from_row(qi);
    b.dout = p_.dout.from_row(qi);
    return b;
  }

  // The gradients of local query rows [qi, qi + nq) (global qg) against keys [kj, kj + nk) (global
  // kg) of dense K/V buffers holding `held` positions per sequence (BlockGradients::compute).
  bool pair(std::int64_t qi, std::int64_t qg, std::int64_t nq, const T* k, const T* v, std::int64_t held,
            std::int64_t kj, std::int64_t kg, std::int64_t nk) {
    return blocks_.compute(rows_at(qi), nq, k, v, held, kj, nk, shard_pair(opt_, s_, qg, nq, kg, nk, ragged_), ragged_,
                           BlockAt{qi, kg}, stats_.flops);
  }

  // dq rows [qi, qi + nq) += the pair's dq.
  void add_dq(std::int64_t qi, std::int64_t nq) {
    blocks_.add_dq(p_.dq, qi, nq);
  }
  // The caller's dk, dv rows [j0, j0 + n) += rows [from, from + n) of dk, dv.
  void add_to_outputs(const Operand<T>& dk, const Operand<T>& dv, std::int64_t from, std::int64_t j0, std::int64_t n) {
    const int Hkv = f().heads_kv, D = f().head_dim;
    add_rows(space_, Operand<const T>(dk.from_row(from)), p_.dk, j0, f().batch, n, Hkv, D);
    add_rows(space_, Operand<const T>(dv.from_row(from)), p_.dv, j0, f().batch, n, Hkv, D);
  }

  // ---- the ring -----------------------------------------------------------------------------
  // The steps of ring_shifts, as in the forward: at step t this rank receives from rank r - t the
  // keys its queries see (sending rank r + t those its queries see, from its packed shard), adds
  // the dQ of its queries against them at once, and sends their dK/dV straight back to their
  // owner, which adds them to its outputs one step later (the return transfer overlaps the next
  // step's work).
  void run_ring() {
    const std::vector<RingStep> plan = ring_plan(opt_, s_, rank_, ragged_);
    const std::size_t steps = plan.size();
    // Where each step's keys land (ragged: parts of whole pieces; their dK/dV go back as parts),
    // and whether the gradients this rank gets back at a step were sent as parts.
    std::vector<Landing> lands;
    std::vector<bool> back_in_parts;
    std::int64_t cap_in = 0, cap_out = 0;
    for (std::size_t i = 0; i < steps; ++i) {
      lands.push_back(landing(plan[i].in, ragged_));
      back_in_parts.push_back(landing(plan[i].out, ragged_).sparse);
      if (i > 0) cap_in = std::max(cap_in, lands[i].held), cap_out = std::max(cap_out, total_length(plan[i].out));
    }
    const std::int64_t n_own = f().kv_len;
    // K/V in (double-buffered), the dK/dV computed here for their owners and those coming back
    // (one per step in flight): all before the first transfer, in one collective step, so that
    // one that does not fit fails on every rank.
    KVBuffer own_k, own_v, kb[2], vb[2];
    Buffer gk[2], gv[2], rk[2], rv[2];
    collective_check(comm_, [&] {
      require_buffers<Mem>(opt_.workspace, "kattn::dist::attention_backward (ring)",
                           2 * kv_elems(n_own) + 4 * kv_elems(cap_in), sizeof(KV));
      require_buffers<Mem>(opt_.workspace, "kattn::dist::attention_backward (ring)",
                           4 * kv_elems(cap_in) + 4 * kv_elems(cap_out), sizeof(T));
      own_k = kv_buffer("kattn::dist::ring_bw::own_k", n_own), own_v = kv_buffer("kattn::dist::ring_bw::own_v", n_own);
      for (int b = 0; b < 2; ++b) {
        kb[b] = kv_buffer("kattn::dist::ring_bw::k", cap_in), vb[b] = kv_buffer("kattn::dist::ring_bw::v", cap_in);
        gk[b] = buffer("kattn::dist::ring_bw::dk", cap_in), gv[b] = buffer("kattn::dist::ring_bw::dv", cap_in);
        rk[b] = buffer("kattn::dist::ring_bw::back_dk", cap_out),
        rv[b] = buffer("kattn::dist::ring_bw::back_dv", cap_out);
      }
    });
    pack_local(0, n_own, own_k, own_v);
    space_.fence();
    if (steps > 1) {
      own_k.stage_out(space_, kv_elems(n_own));
      own_v.stage_out(space_, kv_elems(n_own));
    }
    const auto q_segs = s_.q_layout.segments_of(rank_);
    std::vector<MPI_Request> grads[2];  // per slot: the dK/dV sent and received at its step
    // Step i's returned gradients into this rank's outputs, once they are in.
    const auto land = [&](std::size_t i) {
      const int slot = i % 2;
      wait_all(grads[slot]);
      const std::int64_t n = total_length(plan[i].out);
      if (i == 0 || n == 0) return;
      rk[slot].stage_in(space_, kv_elems(n));
      rv[slot].stage_in(space_, kv_elems(n));
      std::int64_t at = 0;
      for (const Segment& pc : plan[i].out) {
        add_to_outputs(dense_kv(rk[slot].device(), n), dense_kv(rv[slot].device(), n), at, pc.local, pc.length);
        at += pc.length;
      }
      // The slot's next receive may write into it as soon as this returns (MPI straight into device
      // memory when GPU-aware): the adds that read it finish first.
      space_.fence();
    };
    int cur = 0;
    for (std::size_t i = 0; i < steps; ++i) {
      const int from = plan[i].from, to = plan[i].to;
      const int slot = i % 2;
      const double tw0 = now();
      std::vector<MPI_Request> kv_reqs;
      if (i + 1 < steps) {
        const RingStep& next = plan[i + 1];
        const std::int64_t row = kv_row();
        const Landing& into = lands[i + 1];
        if (into.sparse) {
          kb[1 - cur].clear(space_, kv_elems(into.held));
          vb[1 - cur].clear(space_, kv_elems(into.held));
        }
        recv_pieces_at(kb[1 - cur].mpi(), vb[1 - cur].mpi(), row, f().batch, next.in, into.pieces_at, into.held,
                       next.from, kTagK, kTagV, comm_, kv_reqs);
        send_pieces(own_k.mpi(), own_v.mpi(), n_own, row, f().batch, next.out, next.to, kTagK, kTagV, comm_, kv_reqs,
                    stats_);
      }
      if (i >= 2) land(i - 2);  // frees this slot
      const std::int64_t n_back = total_length(plan[i].out);
      if (i > 0 && n_back > 0) {
        if (back_in_parts[i]) {
          recv_pieces(rk[slot].mpi(), rv[slot].mpi(), kv_row(), f().batch, plan[i].out, to, kTagDk, kTagDv, comm_,
                      grads[slot]);
        } else {
          irecv(rk[slot].mpi(), kv_elems(n_back), to, kTagDk, comm_, grads[slot]);
          irecv(rv[slot].mpi(), kv_elems(n_back), to, kTagDv, comm_, grads[slot]);
        }
      }
      const double tc0 = now(), cpu0 = cpu_now();
      const Landing& l = lands[i];
      const std::int64_t held = i == 0 ? n_own : l.held;
      if (i > 0) {
        zero_rows(space_, dense_kv(gk[slot].device(), held), f().batch, held, f().heads_kv, f().head_dim);
        zero_rows(space_, dense_kv(gv[slot].device(), held), f().batch, held, f().heads_kv, f().head_dim);
      }
      latch_.guard([&] {
        const T* k = blocks_.widened(i == 0 ? own_k.device() : kb[cur].device(), held, 0);
        const T* v = blocks_.widened(i == 0 ? own_v.device() : vb[cur].device(), held, 1);
        for (std::size_t j = 0; j < l.keys.size(); ++j) {
          const Segment& ks = l.keys[j];
          const std::int64_t kj = i == 0 ? ks.local : l.keys_at[j];
          for (const Segment& qs : q_segs) {
            if (!pair(qs.local, qs.global, qs.length, k, v, held, kj, ks.global, ks.length)) continue;
            add_dq(qs.local, qs.length);
            if (i == 0)
              blocks_.add_dkv(p_.dk, p_.dv, ks.local, ks.length);
            else
              blocks_.add_dkv(dense_kv(gk[slot].device(), held), dense_kv(gv[slot].device(), held), kj, ks.length);
            poke(kv_reqs);
            poke(grads[1 - slot]);
          }
        }
        space_.fence();
      });
      const double tc1 = now();
      stats_.compute_cpu_seconds += cpu_now() - cpu0;
      if (i > 0 && held > 0) {
        gk[slot].stage_out(space_, kv_elems(held));
        gv[slot].stage_out(space_, kv_elems(held));
        if (l.sparse) {  // only the parts received: the rest no query here saw
          std::vector<Segment> parts = plan[i].in;
          for (std::size_t j = 0; j < parts.size(); ++j) parts[j].local = l.pieces_at[j];
          send_pieces(gk[slot].mpi(), gv[slot].mpi(), held, kv_row(), f().batch, parts, from, kTagDk, kTagDv, comm_,
                      grads[slot], stats_);
        } else {
          isend(gk[slot].mpi(), kv_elems(held), from, kTagDk, comm_, grads[slot], stats_);
          isend(gv[slot].mpi(), kv_elems(held), from, kTagDv, comm_, grads[slot], stats_);
        }
      }
      wait_all(kv_reqs);
      if (i + 1 < steps) {
        const std::int64_t n_in = kv_elems(lands[i + 1].held);
        kb[1 - cur].stage_in(space_, n_in);
        vb[1 - cur].stage_in(space_, n_in);
        cur = 1 - cur;
      }
      const double tw1 = now();
      stats_.compute_seconds += tc1 - tc0;
      stats_.comm_seconds += (tw1 - tw0) - (tc1 - tc0);
      ++stats_.steps;
      latch_.guard([&] {
        if (d_.progress) d_.progress(static_cast<int>(i + 1), static_cast<int>(steps));
      });
    }
    const double tw0 = now();
    for (std::size_t i = steps >= 2 ? steps - 2 : 0; i < steps; ++i) land(i);
    space_.fence();
    stats_.comm_seconds += now() - tw0;
  }

  // ---- the deterministic tour ---------------------------------------------------------------
  // A package's buffers. Packages that start or end on this rank are allocated before the tour,
  // in one collective step; those received on the way as they come, under the failure latch. One
  // that cannot be had (or any after a failure is known) is left empty: it travels as empty
  // messages, and what comes for it lands in the sink, so the tour's schedule, which every peer
  // follows, goes on to the end and the failure reaches every rank (settle) instead of a hang.
  struct Package {
    KVBuffer k, v;
    Buffer dk, dv;
    std::int64_t len = 0;
    bool held = false;  // buffers allocated
    std::vector<MPI_Request> reqs;
    std::uint64_t bytes = 0;         // of the buffers, counted in *live while the package exists
    std::uint64_t* live = nullptr;
    Package() = default;
    Package(const Package&) = delete;
    Package& operator=(const Package&) = delete;
    ~Package() {
      if (live) *live -= bytes;
    }
  };

  std::uint64_t package_bytes(std::int64_t len) const {
    return std::uint64_t(kv_elems(len)) * 2 * (sizeof(KV) + sizeof(T));
  }

  std::unique_ptr<Package> new_package(std::int64_t len) {
    auto pk = std::make_unique<Package>();
    pk->k = kv_buffer("kattn::dist::tour::k", len);
    pk->v = kv_buffer("kattn::dist::tour::v", len);
    pk->dk = buffer("kattn::dist::tour::dk", len);
    pk->dv = buffer("kattn::dist::tour::dv", len);
    pk->len = len;
    pk->held = true;
    pk->bytes = package_bytes(len);
    pk->live = &live_bytes_;
    live_bytes_ += pk->bytes;
    return pk;
  }

  // A package received on the way: its buffers, checked against the memory with those of every
  // package this rank holds, or an empty one when that fails (recorded in the latch) or a failure
  // is known already.
  std::unique_ptr<Package> package_on_the_way(std::int64_t len) {
    std::unique_ptr<Package> pk;
    latch_.guard([&] {
      kattn::detail::require_memory<Mem>(opt_.workspace, live_bytes_ + package_bytes(len),
                                         "kattn::dist::attention_backward (ring): the deterministic tour's packages",
                                         kattn::detail::concat("those held and one of ", len, " positions"),
                                         "spread the sequence over more ranks");
      pk = new_package(len);
    });
    if (!pk) {
      pk = std::make_unique<Package>();
      pk->len = len;
    }
    return pk;
  }

  void send(Package& pk, int dest, int tag, bool with_kv, bool with_grads) {
    const std::int64_t n = kv_elems(pk.len);
    if (!pk.held) {  // as many messages as the receiver posts, empty
      for (int i = 0; i < 2 && with_kv; ++i) isend_empty<KV>(n, dest, tag, comm_, pk.reqs);
      for (int i = 0; i < 2 && with_grads; ++i) isend_empty<T>(n, dest, tag, comm_, pk.reqs);
      return;
    }
    space_.fence();
    if (with_kv) {
      pk.k.stage_out(space_, n);
      pk.v.stage_out(space_, n);
      isend(pk.k.mpi(), n, dest, tag, comm_, pk.reqs, stats_);
      isend(pk.v.mpi(), n, dest, tag, comm_, pk.reqs, stats_);
    }
    if (with_grads) {
      pk.dk.stage_out(space_, n);
      pk.dv.stage_out(space_, n);
      isend(pk.dk.mpi(), n, dest, tag, comm_, pk.reqs, stats_);
      isend(pk.dv.mpi(), n, dest, tag, comm_, pk.reqs, stats_);
    }
  }

  // Blocking. An empty package receives into the sink (its contents are never read).
  void receive(Package& pk, int source, int tag, bool with_kv, bool with_grads) {
    const std::int64_t n = kv_elems(pk.len);
    Package& into = pk.held ? pk : *sink_;
    std::vector<MPI_Request> reqs;
    if (with_kv) {
      irecv(into.k.mpi(), n, source, tag, comm_, reqs);
      irecv(into.v.mpi(), n, source, tag, comm_, reqs);
    }
    if (with_grads) {
      irecv(into.dk.mpi(), n, source, tag, comm_, reqs);
      irecv(into.dv.mpi(), n, source, tag, comm_, reqs);
    }
    wait_all(reqs);
    if (!pk.held) return;
    if (with_kv) {
      pk.k.stage_in(space_, n);
      pk.v.stage_in(space_, n);
    }
    if (with_grads) {
      pk.dk.stage_in(space_, n);
      pk.dv.stage_in(space_, n);
    }
  }

  void zero_grads(Package& pk) {
    if (!pk.held) return;
    zero_rows(space_, dense_kv(pk.dk.device(), pk.len), f().batch, pk.len, f().heads_kv, f().head_dim);
    zero_rows(space_, dense_kv(pk.dv.device(), pk.len), f().batch, pk.len, f().heads_kv, f().head_dim);
  }

  // Every package g (a run of key chunks of one segment that the same query segments see,
  // tour_plans, numbered in global key order) travels owner(g) -> the owners of the query
  // segments that see it, in descending global order -> owner(g), and the query chunks inside
  // each item go in descending order too, so every dK row adds the query chunks in one fixed
  // order whatever the rank count. Descending, because under a causal mask the last queries see
  // the most keys: the tour starts with the most work and the pipeline fills faster. Item (g, p)
  // (package g at query segment Sq - 1 - p) needs g's previous stop. Every rank works through
  // its items in one global order that respects this, wavefront first: (g + p, p). So the
  // smallest unfinished item can always run (no deadlock), and a rank holding an early and a
  // late query segment (zigzag) works on later packages of one while the other waits. dQ of a
  // query segment still sees the key chunks in ascending order (packages come in increasing g + p).
  struct Item {
    int g, p;  // package, tour position (query segment Sq - 1 - p)
    bool operator<(const Item& o) const {
      return g + p != o.g + o.p ? g + p < o.g + o.p : p != o.p ? p < o.p : g < o.g;
    }
  };

  // Tags of package g's messages: each tag joins one pair of ranks at most once per package, or
  // in tour order (MPI keeps the order of one source's messages of one tag).
  static int start_tag(int g) { return kTagTour + 3 * g; }
  static int hop_tag(int g) { return kTagTour + 3 * g + 1; }
  static int home_tag(int g) { return kTagTour + 3 * g + 2; }

  void run_tour() {
    const std::int64_t C = chunk_of(d_);
    const auto& qsegs = s_.q_layout.segments();
    std::vector<TourPlan> plans;
    for (const Segment& ks : s_.kv_layout.segments())
      for (TourPlan& tp : tour_plans(opt_, s_.q_layout, s_.kv_layout, ks, C)) plans.push_back(std::move(tp));
    const int Sq = static_cast<int>(qsegs.size()), Sk = static_cast<int>(plans.size());
    {
      int* ub = nullptr;
      int found = 0;
      MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &found);
      KATTN_REQUIRE(!found || home_tag(Sk) <= *ub, "ranks: the deterministic backward needs message tags up to ",
                    home_tag(Sk), ", this MPI allows ", *ub, " (a larger chunk needs fewer)");
    }
    // Tour position p visits query segment Sq - 1 - p.
    const auto position = [&](int stop) { return Sq - 1 - stop; };
    // Outgoing packages with the item they are for; waiting on one is safe only while that item
    // comes before the one this rank is about to work on (it cannot depend on this rank then).
    std::deque<std::pair<Item, std::unique_ptr<Package>>> outgoing;
    std::vector<std::unique_ptr<Package>> home(Sk);
    std::map<Item, std::unique_ptr<Package>> carried;  // packages passed between own items
    const auto retire = [&](const Item* before) {
      for (auto it = outgoing.begin(); it != outgoing.end();) {
        if (before == nullptr || (it->first < *before && outgoing.size() > kTourWindow))
          wait_all(it->second->reqs);
        else
          poke(it->second->reqs);
        it = it->second->reqs.empty() ? outgoing.erase(it) : std::next(it);
      }
    };
    const double tw0 = now();
    // This rank's items; the packages whose K/V it sends to their first stop, and those whose
    // gradients come back to it from their last; the longest package it receives on the way.
    std::vector<Item> items;
    std::vector<int> starts, homes;
    std::int64_t sink_len = 0;
    for (int g = 0; g < Sk; ++g) {
      const TourPlan& tp = plans[g];
      if (tp.piece.owner == rank_) {
        if (qsegs[tp.stops.front()].owner != rank_) starts.push_back(g);
        if (qsegs[tp.stops.back()].owner != rank_) homes.push_back(g);
      }
      for (std::size_t i = 0; i < tp.stops.size(); ++i) {
        if (qsegs[tp.stops[i]].owner != rank_) continue;
        items.push_back(Item{g, position(tp.stops[i])});
        const int from = i == 0 ? tp.piece.owner : qsegs[tp.stops[i - 1]].owner;
        if (from != rank_) sink_len = std::max(sink_len, tp.piece.length);
      }
    }
    std::sort(items.begin(), items.end());
    std::vector<std::unique_ptr<Package>> start(Sk);
    collective_check(comm_, [&] {
      std::uint64_t bytes = package_bytes(sink_len);
      std::int64_t longest = sink_len;
      for (const auto* gs : {&starts, &homes})
        for (int g : *gs) bytes += package_bytes(plans[g].piece.length), longest = std::max(longest, plans[g].piece.length);
      kattn::detail::require_memory<Mem>(
          bytes, "kattn::dist::attention_backward (ring): the deterministic tour's buffers",
          kattn::detail::concat(starts.size() + homes.size() + 1, " packages of up to ", longest, " positions"),
          "spread the sequence over more ranks");
      for (int g : starts) start[g] = new_package(plans[g].piece.length);
      for (int g : homes) home[g] = new_package(plans[g].piece.length);
      if (sink_len > 0) sink_ = new_package(sink_len);
    });
    for (int g : starts) {  // K/V to the first stop's owner
      const TourPlan& tp = plans[g];
      pack_local(tp.piece.local, tp.piece.length, start[g]->k, start[g]->v);
      send(*start[g], qsegs[tp.stops.front()].owner, start_tag(g), true, false);
      outgoing.emplace_back(Item{g, position(tp.stops.front())}, std::move(start[g]));
    }
    for (int g : homes) {  // the finished gradients come back from the last stop's owner
      const std::int64_t n = kv_elems(plans[g].piece.length);
      const int last = qsegs[plans[g].stops.back()].owner;
      irecv(home[g]->dk.mpi(), n, last, home_tag(g), comm_, home[g]->reqs);
      irecv(home[g]->dv.mpi(), n, last, home_tag(g), comm_, home[g]->reqs);
    }
    stats_.comm_seconds += now() - tw0;
    for (const Item& item : items) {
      const int g = item.g;
      const TourPlan& tp = plans[g];
      const Segment& kp = tp.piece;
      const Segment& qs = qsegs[Sq - 1 - item.p];
      // This item's place in g's tour, and the stops before and after it.
      const auto at = std::find(tp.stops.begin(), tp.stops.end(), Sq - 1 - item.p);
      const int prev = at == tp.stops.begin() ? -1 : qsegs[*(at - 1)].owner;
      const int next_stop = at + 1 == tp.stops.end() ? -1 : *(at + 1);
      const double tr0 = now();
      retire(&item);
      std::unique_ptr<Package> pk;
      if (prev == rank_) {
        auto it = carried.find(item);
        KATTN_ASSERT(it != carried.end());
        pk = std::move(it->second);
        carried.erase(it);
      } else {
        pk = package_on_the_way(kp.length);
        if (prev < 0) {
          if (kp.owner == rank_) {
            if (pk->held) pack_local(kp.local, kp.length, pk->k, pk->v);
          } else {
            receive(*pk, kp.owner, start_tag(g), true, false);
          }
          zero_grads(*pk);
        } else {
          receive(*pk, prev, hop_tag(g), true, true);
        }
      }
      const double tc0 = now(), cpu0 = cpu_now();
      stats_.comm_seconds += tc0 - tr0;
      // Query chunks in descending global order outside (segments start at chunk multiples),
      // key chunks in ascending order inside (the piece starts at one): every dK row adds the
      // query chunks in one fixed order, every dQ row the key chunks (g after g) in order.
      // After a failure the package still travels its tour (its gradients unfinished).
      latch_.guard([&] {
        const T* k = blocks_.widened(pk->k.device(), kp.length, 0);
        const T* v = blocks_.widened(pk->v.device(), kp.length, 1);
        for (std::int64_t cq = (qs.length - 1) / C * C; cq >= 0; cq -= C) {
          const std::int64_t nq = std::min(C, qs.length - cq);
          for (std::int64_t ck = 0; ck < kp.length; ck += C) {
            const std::int64_t nk = std::min(C, kp.length - ck);
            if (!pair(qs.local + cq, qs.global + cq, nq, k, v, kp.length, ck, kp.global + ck, nk))
              continue;
            add_dq(qs.local + cq, nq);
            blocks_.add_dkv(dense_kv(pk->dk.device(), kp.length), dense_kv(pk->dv.device(), kp.length), ck, nk);
          }
          for (auto& o : outgoing) poke(o.second->reqs);
        }
        space_.fence();
      });
      const double tc1 = now();
      stats_.compute_seconds += tc1 - tc0;
      stats_.compute_cpu_seconds += cpu_now() - cpu0;
      if (next_stop >= 0) {
        const Item next{g, position(next_stop)};
        if (qsegs[next_stop].owner == rank_) {
          carried[next] = std::move(pk);
        } else {
          send(*pk, qsegs[next_stop].owner, hop_tag(g), true, true);
          outgoing.emplace_back(next, std::move(pk));
        }
      } else if (kp.owner == rank_) {
        if (pk->held)
          add_to_outputs(dense_kv(pk->dk.device(), kp.length), dense_kv(pk->dv.device(), kp.length), 0, kp.local,
                         kp.length);
      } else {
        send(*pk, kp.owner, home_tag(g), false, true);
        outgoing.emplace_back(Item{g, Sq}, std::move(pk));
      }
      stats_.comm_seconds += now() - tc1;
      ++stats_.steps;
      latch_.guard([&] {
        if (d_.progress) d_.progress(stats_.steps, static_cast<int>(items.size()));
      });
    }
    const double tw1 = now();
    retire(nullptr);
    for (int g = 0; g < Sk; ++g) {
      if (!home[g]) continue;
      wait_all(home[g]->reqs);
      const Segment& kp = plans[g].piece;
      const std::int64_t n = kv_elems(kp.length);
      home[g]->dk.stage_in(space_, n);
      home[g]->dv.stage_in(space_, n);
      add_to_outputs(dense_kv(home[g]->dk.device(), kp.length), dense_kv(home[g]->dv.device(), kp.length), 0, kp.local,
                     kp.length);
    }
    space_.fence();
    sink_.reset();
    stats_.comm_seconds += now() - tw1;
  }

  MPI_Comm comm_;
  ExecSpace space_;
  BackwardParams<T> p_;
  const KV* k_;
  const KV* v_;
  Options opt_;
  DistOptions d_;
  BackwardOptions bopt_;
  GlobalSplit s_;
  FailureLatch& latch_;
  const RaggedPieces<Mem>* ragged_;
  int rank_ = 0, P_ = 1;
  BlockGradients<ExecSpace, T, KV> blocks_;
  std::uint64_t live_bytes_ = 0;           // of the tour's packages that exist (before sink_: it counts in it)
  std::unique_ptr<Package> sink_;          // where an empty package's messages land
  DistStats stats_;
};

}  // namespace

template <class ExecSpace, class T, class KV>
DistStats ring_backward_impl(MPI_Comm comm, const ExecSpace& space, const BackwardParams<T>& p, const KV* k,
                             const KV* v, const Options& opt, const DistOptions& d, const BackwardOptions& bopt,
                             FailureLatch* outer) {
  // Regions of the area ("kattn::dist", shared helpers) and of this entry point.
  compat::ScopedRegion area("kattn::dist");
  compat::ScopedRegion region("kattn::dist::ring_backward");
  const GlobalSplit split = enter_sharded_call(comm, backward_fields(DistCall::ring_backward, p, opt, d, bopt), opt,
                                              p.fwd.q_len, p.fwd.kv_len, d);
  require_sharded_bias(comm, p.fwd, split.Nk, opt, bopt.dbias);
  return under_latch(comm, outer, [&](FailureLatch& latch) {
    return BackwardRunner<ExecSpace, T, KV>(comm, space, p, k, v, opt, d, bopt, split, latch).run();
  });
}

template <class ExecSpace, class T>
DistStats ring_backward_impl(MPI_Comm comm, const ExecSpace& space, const BackwardParams<T>& p, const Options& opt,
                             const DistOptions& d, const BackwardOptions& bopt, FailureLatch* outer) {
  return ring_backward_impl(comm, space, p, p.fwd.k.data, p.fwd.v.data, opt, d, bopt, outer);
}

template <class ExecSpace, class S>
DistStats ring_ragged_backward_impl(MPI_Comm comm, const ExecSpace& space, const BackwardParams<S>& p,
                                    const BatchLengths& lengths, const Options& opt, const DistOptions& d,
                                    const BackwardOptions& bopt) {
  using Mem = typename ExecSpace::memory_space;
  using T = accumulate_t<S>;  // everything but K/V in the ring; K/V travel in S
  compat::ScopedRegion area("kattn::dist");
  compat::ScopedRegion region("kattn::dist::ring_backward");
  collective_agree(comm, backward_fields(DistCall::ring_ragged_backward, p, opt, d, bopt));
  require_no_block_mask(opt);
  // Deterministic mode: the deterministic dense ring's backward on each sequence in turn.
  if (d.deterministic)
    return backward_each_sequence(comm, space, p, lengths, opt, d, "kattn::dist::attention_backward (ring)",
                                  [&](const auto& seq, const auto* k, const auto* v, const DistOptions& each,
                                      FailureLatch* latch) {
                                    return ring_backward_impl(comm, space, seq, k, v, opt, each, bopt, latch);
                                  });
  const RaggedPieces<Mem> rp = ragged_pieces<Mem>(comm, lengths, d);
  const AttentionParams<S>& f = p.fwd;
  const int H = f.heads_q, Hkv = f.heads_kv, D = f.head_dim;
  const std::int64_t nq = rp.q_local.back(), nk = rp.kv_local.back();
  // Piece-major copies of every array, in one collective step: widened, the gradients rounded once
  // on the way back.
  Kokkos::View<T*, Mem> q, o, dout, dq, lse, dk, dv;
  Kokkos::View<S*, Mem> k, v;
  collective_check(comm, [&] {
    const std::uint64_t q_elems = std::uint64_t(nq) * H * D, kv_elems = std::uint64_t(nk) * Hkv * D;
    require_buffers<Mem>(opt.workspace, "kattn::dist::attention_backward (ring)",
                         4 * q_elems + 2 * kv_elems + std::uint64_t(nq) * H, sizeof(T), 2 * kv_elems, sizeof(S));
    const auto array = [&](const char* label, std::uint64_t n) {
      return piece_major_array<T>(opt.workspace, space, label, n);
    };
    q = array("kattn::dist::ragged::q", q_elems), o = array("kattn::dist::ragged::o", q_elems);
    dout = array("kattn::dist::ragged::dout", q_elems), dq = array("kattn::dist::ragged::dq", q_elems);
    lse = array("kattn::dist::ragged::lse", std::uint64_t(nq) * H);
    k = piece_major_array<S>(opt.workspace, space, "kattn::dist::ragged::k", kv_elems);
    v = piece_major_array<S>(opt.workspace, space, "kattn::dist::ragged::v", kv_elems);
    dk = array("kattn::dist::ragged::dk", kv_elems), dv = array("kattn::dist::ragged::dv", kv_elems);
  });
  to_piece_major(space, rp.q_rows, f.q, q.data(), H, D);
  to_piece_major(space, rp.q_rows, f.o, o.data(), H, D);
  to_piece_major(space, rp.q_rows, p.dout, dout.data(), H, D);
  to_piece_major(space, rp.q_rows, f.lse, lse.data(), H, 1);
  to_piece_major(space, rp.kv_rows, f.k, k.data(), Hkv, D);
  to_piece_major(space, rp.kv_rows, f.v, v.data(), Hkv, D);
  // The float params' k and v are strides only: the runner reads K/V as stored (ring_backward_impl).
  BackwardParams<T> pm;
  pm.fwd = piece_major_params<T, T>(f, nq, nk, q.data(), nullptr, nullptr, o.data(), lse.data());
  pm.dout = same_layout(dout.data(), pm.fwd.q), pm.dq = same_layout(dq.data(), pm.fwd.q);
  pm.dk = same_layout(dk.data(), pm.fwd.k), pm.dv = same_layout(dv.data(), pm.fwd.k);
  FailureLatch latch(comm);
  BackwardRunner<ExecSpace, T, S> runner(comm, space, pm, k.data(), v.data(), opt, d, bopt, rp.split, latch, &rp);
  const DistStats stats = runner.run();
  latch.settle();
  from_piece_major(space, rp.q_rows, dq.data(), p.dq, H, D);
  from_piece_major(space, rp.kv_rows, dk.data(), p.dk, Hkv, D);
  from_piece_major(space, rp.kv_rows, dv.data(), p.dv, Hkv, D);
  space.fence();
  return stats;
}

#define KATTN_INSTANTIATE_RING_BACKWARD_KV(Space, T, KV)                                                          \
  template DistStats ring_backward_impl<Space, T, KV>(MPI_Comm, const Space&, const BackwardParams<T>&, const KV*, \
                                                      const KV*, const Options&, const DistOptions&,              \
                                                      const BackwardOptions&, FailureLatch*);
#define KATTN_INSTANTIATE_RAGGED_RING_BACKWARD(Space, S)                                                      \
  template DistStats ring_ragged_backward_impl<Space, S>(MPI_Comm, const Space&, const BackwardParams<S>&,   \
                                                         const BatchLengths&, const Options&, const DistOptions&, \
                                                         const BackwardOptions&);
#define KATTN_INSTANTIATE_RING_BACKWARD(Space, T)                                                                   \
  KATTN_INSTANTIATE_RING_BACKWARD_KV(Space, T, T)                                                                   \
  template DistStats ring_backward_impl<Space, T>(MPI_Comm, const Space&, const BackwardParams<T>&, const Options&, \
                                                  const DistOptions&, const BackwardOptions&, FailureLatch*);       \
  KATTN_INSTANTIATE_RAGGED_RING_BACKWARD(Space, T)
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_RING_BACKWARD)

#define KATTN_INSTANTIATE_16BIT_RING_BACKWARD(Space, S) \
  KATTN_INSTANTIATE_RING_BACKWARD_KV(Space, float, S) \
  KATTN_INSTANTIATE_RAGGED_RING_BACKWARD(Space, S)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_16BIT_RING_BACKWARD, bf16)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_16BIT_RING_BACKWARD, fp16)

}  // namespace detail
}  // namespace dist
}  // namespace kattn
