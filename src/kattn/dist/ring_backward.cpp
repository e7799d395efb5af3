#include "kattn/dist/ring_backward.hpp"

#include <algorithm>
#include <chrono>
#include <ctime>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "kattn/compat.hpp"
#include "kattn/dist/clock.hpp"
#include "kattn/detail/backends.hpp"
#include "kattn/dist/agreement.hpp"
#include "kattn/dist/pack.hpp"
#include "kattn/dist/shard_math.hpp"
#include "kattn/dist/transport.hpp"

namespace kattn {
namespace dist {
namespace detail {
namespace {

// Message tags: the ring's K, V, dK, dV; the deterministic tour's hops.
enum : int { kTagK = 0, kTagV = 1, kTagDk = 2, kTagDv = 3, kTagStart = 4, kTagHome = 5, kTagHop = 6 };

// Outgoing packages the tour keeps in flight before it waits for those it safely can (memory).
constexpr std::size_t kTourWindow = 4;

template <class ExecSpace, class T>
class BackwardRunner {
 public:
  using Mem = typename ExecSpace::memory_space;
  using Buffer = MessageBuffer<T, Mem>;

  BackwardRunner(MPI_Comm comm, const ExecSpace& space, const BackwardParams<T>& p, const Options& opt,
                 const DistOptions& d, const BackwardOptions& bopt, const GlobalSplit& split)
      : comm_(comm), space_(space), p_(p), opt_(opt), d_(d), bopt_(bopt), s_(split) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &P_);
    stats_.staged = needs_staging<Mem>(d.staging);
    if (d.deterministic) bopt_.deterministic = true;
  }

  DistStats run() {
    const double t0 = now();
    const AttentionParams<T>& f = p_.fwd;
    zero_rows(space_, Strided<T>{p_.dq, p_.dq_stride_batch, p_.dq_stride_seq, p_.dq_stride_head}, f.batch, f.q_len,
              f.heads_q, f.head_dim);
    zero_rows(space_, dk_out(), f.batch, f.kv_len, f.heads_kv, f.head_dim);
    zero_rows(space_, dv_out(), f.batch, f.kv_len, f.heads_kv, f.head_dim);
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
  std::int64_t kv_elems(std::int64_t n) const { return std::int64_t(f().batch) * n * f().heads_kv * f().head_dim; }
  Strided<T> dk_out() const { return Strided<T>{p_.dk, p_.dk_stride_batch, p_.dk_stride_seq, p_.dk_stride_head}; }
  Strided<T> dv_out() const { return Strided<T>{p_.dv, p_.dv_stride_batch, p_.dv_stride_seq, p_.dv_stride_head}; }
  Strided<T> dense_kv(T* base, std::int64_t n) const { return dense(base, n, f().heads_kv, f().head_dim); }

  Buffer buffer(const char* label, std::int64_t n) const { return Buffer(label, kv_elems(n), stats_.staged); }

  void pack_local(std::int64_t j0, std::int64_t n, const Buffer& k, const Buffer& v) {
    const int Hkv = f().heads_kv, D = f().head_dim;
    copy_rows(space_, Strided<const T>{f().k, f().k_stride_batch, f().k_stride_seq, f().k_stride_head}, j0,
              dense_kv(k.device(), n), f().batch, n, Hkv, D);
    copy_rows(space_, Strided<const T>{f().v, f().v_stride_batch, f().v_stride_seq, f().v_stride_head}, j0,
              dense_kv(v.device(), n), f().batch, n, Hkv, D);
  }

  void ensure_pair_workspace(std::int64_t nq, std::int64_t nk) {
    const std::size_t q = std::size_t(f().batch) * nq * f().heads_q * f().head_dim, k = std::size_t(kv_elems(nk));
    if (pair_dq_.extent(0) < q)
      pair_dq_ =
          Kokkos::View<T*, Mem>(Kokkos::view_alloc(space_, Kokkos::WithoutInitializing, "kattn::dist::pair_dq"), q);
    if (pair_dk_.extent(0) < k) {
      pair_dk_ =
          Kokkos::View<T*, Mem>(Kokkos::view_alloc(space_, Kokkos::WithoutInitializing, "kattn::dist::pair_dk"), k);
      pair_dv_ =
          Kokkos::View<T*, Mem>(Kokkos::view_alloc(space_, Kokkos::WithoutInitializing, "kattn::dist::pair_dv"), k);
    }
  }

  // Gradients of local query rows [qi, qi + nq) (global qg) against keys [kj, kj + nk) (global kg)
  // of dense K/V buffers holding `held` positions per sequence: dq into pair_dq_ ([B][nq][Hq][D]),
  // dk, dv into pair_dk_, pair_dv_ ([B][nk][Hkv][D]). False (nothing written) when no pair is visible.
  bool pair(std::int64_t qi, std::int64_t qg, std::int64_t nq, const T* k, const T* v, std::int64_t held,
            std::int64_t kj, std::int64_t kg, std::int64_t nk) {
    const int H = f().heads_q, Hkv = f().heads_kv, D = f().head_dim;
    const Options o = shard_options(opt_, qg, nq, s_.Nq, kg, nk, s_.Nk);
    const std::int64_t pairs = visible_pairs(o, nq, nk);
    if (pairs == 0) return false;
    stats_.flops += 10.0 * D * double(pairs) * f().batch * H;  // 5 tile products of 2 D flops per pair
    ensure_pair_workspace(nq, nk);
    BackwardParams<T> b = p_;
    AttentionParams<T>& a = b.fwd;
    a.q = f().q + qi * f().q_stride_seq;
    a.o = f().o + qi * f().o_stride_seq;
    a.lse = f().lse + qi * f().lse_stride_seq;
    a.q_len = nq;
    a.q_total = std::int64_t(f().batch) * nq;
    a.k = k + kj * Hkv * D;
    a.v = v + kj * Hkv * D;
    a.k_stride_batch = a.v_stride_batch = held * Hkv * D;
    a.k_stride_seq = a.v_stride_seq = std::int64_t(Hkv) * D;
    a.k_stride_head = a.v_stride_head = D;
    a.kv_len = nk;
    b.dout = p_.dout + qi * p_.do_stride_seq;
    b.dq = pair_dq_.data();
    b.dq_stride_batch = nq * H * D, b.dq_stride_seq = std::int64_t(H) * D, b.dq_stride_head = D;
    b.dk = pair_dk_.data();
    b.dv = pair_dv_.data();
    b.dk_stride_batch = b.dv_stride_batch = nk * Hkv * D;
    b.dk_stride_seq = b.dv_stride_seq = std::int64_t(Hkv) * D;
    b.dk_stride_head = b.dv_stride_head = D;
    kattn::detail::backward_impl(space_, b, o, bopt_);
    return true;
  }

  // dq rows [qi, qi + nq) += the pair's dq.
  void add_dq(std::int64_t qi, std::int64_t nq) {
    const int H = f().heads_q, D = f().head_dim;
    add_rows(space_, Strided<const T>{pair_dq_.data(), nq * H * D, std::int64_t(H) * D, D},
             Strided<T>{p_.dq, p_.dq_stride_batch, p_.dq_stride_seq, p_.dq_stride_head}, qi, f().batch, nq, H, D);
  }
  // Accumulators (dense, `held` positions per sequence) rows [kj, kj + nk) += the pair's dk, dv.
  void add_dkv(T* dk, T* dv, std::int64_t held, std::int64_t kj, std::int64_t nk) {
    const int Hkv = f().heads_kv, D = f().head_dim;
    add_rows(space_, Strided<const T>{pair_dk_.data(), nk * Hkv * D, std::int64_t(Hkv) * D, D}, dense_kv(dk, held), kj,
             f().batch, nk, Hkv, D);
    add_rows(space_, Strided<const T>{pair_dv_.data(), nk * Hkv * D, std::int64_t(Hkv) * D, D}, dense_kv(dv, held), kj,
             f().batch, nk, Hkv, D);
  }
  // The caller's dk, dv rows [j0, j0 + n) += dense accumulators of n positions.
  void add_to_outputs(const T* dk, const T* dv, std::int64_t j0, std::int64_t n) {
    const int Hkv = f().heads_kv, D = f().head_dim;
    add_rows(space_, Strided<const T>{dk, n * Hkv * D, std::int64_t(Hkv) * D, D}, dk_out(), j0, f().batch, n, Hkv, D);
    add_rows(space_, Strided<const T>{dv, n * Hkv * D, std::int64_t(Hkv) * D, D}, dv_out(), j0, f().batch, n, Hkv, D);
  }

  // ---- the ring -----------------------------------------------------------------------------
  // Step t: this rank holds K/V of rank s = (rank - t) mod P. It sends them on at once, computes
  // its pairs with them into a step buffer, then adds the step buffer to the accumulator of s
  // that the left neighbour sent at the end of its step t - 1 (received meanwhile) and sends the
  // sum on. After P steps every accumulator has visited every rank and is back home.
  void run_ring() {
    std::int64_t cap = 0;
    for (std::int64_t n : s_.kv_lens) cap = std::max(cap, n);
    Buffer kb[2] = {buffer("kattn::dist::ring_bw::k0", cap), buffer("kattn::dist::ring_bw::k1", cap)};
    Buffer vb[2] = {buffer("kattn::dist::ring_bw::v0", cap), buffer("kattn::dist::ring_bw::v1", cap)};
    Buffer dkb[2] = {buffer("kattn::dist::ring_bw::dk0", cap), buffer("kattn::dist::ring_bw::dk1", cap)};
    Buffer dvb[2] = {buffer("kattn::dist::ring_bw::dv0", cap), buffer("kattn::dist::ring_bw::dv1", cap)};
    Kokkos::View<T*, Mem> step_dk("kattn::dist::ring_bw::step_dk", kv_elems(cap)),
        step_dv("kattn::dist::ring_bw::step_dv", kv_elems(cap));
    pack_local(0, f().kv_len, kb[0], vb[0]);
    space_.fence();
    const int right = (rank_ + 1) % P_, left = (rank_ - 1 + P_) % P_;
    const auto q_segs = s_.q_layout.segments_of(rank_);
    std::vector<MPI_Request> acc_out[2];  // accumulator sends, per buffer
    int cur = 0;
    for (int t = 0; t < P_; ++t) {
      const int owner = (rank_ - t + P_) % P_;
      const std::int64_t held = s_.kv_lens[owner], n = kv_elems(held);
      const double tw0 = now();
      std::vector<MPI_Request> kv_reqs, acc_in;
      if (t + 1 < P_) {
        const std::int64_t n_in = kv_elems(s_.kv_lens[(rank_ - t - 1 + P_) % P_]);
        irecv(kb[1 - cur].mpi(), n_in, left, kTagK, comm_, kv_reqs);
        irecv(vb[1 - cur].mpi(), n_in, left, kTagV, comm_, kv_reqs);
        kb[cur].stage_out(space_, n);
        vb[cur].stage_out(space_, n);
        isend(kb[cur].mpi(), n, right, kTagK, comm_, kv_reqs, stats_);
        isend(vb[cur].mpi(), n, right, kTagV, comm_, kv_reqs, stats_);
      }
      const int a = t % 2;   // the accumulator buffer of this step
      wait_all(acc_out[a]);  // its send of two steps ago
      if (t > 0) {
        irecv(dkb[a].mpi(), n, left, kTagDk, comm_, acc_in);
        irecv(dvb[a].mpi(), n, left, kTagDv, comm_, acc_in);
      }
      const double tc0 = now(), cpu0 = cpu_now();
      Kokkos::deep_copy(space_, step_dk, T(0));
      Kokkos::deep_copy(space_, step_dv, T(0));
      for (const Segment& qs : q_segs)
        for (const Segment& ks : s_.kv_layout.segments_of(owner)) {
          if (!pair(qs.local, qs.global, qs.length, kb[cur].device(), vb[cur].device(), held, ks.local, ks.global,
                    ks.length))
            continue;
          add_dq(qs.local, qs.length);
          add_dkv(step_dk.data(), step_dv.data(), held, ks.local, ks.length);
          poke(kv_reqs);
          poke(acc_in);
        }
      space_.fence();
      const double tc1 = now();
      stats_.compute_cpu_seconds += cpu_now() - cpu0;
      wait_all(acc_in);  // exposed: the left neighbour's accumulator
      if (t > 0) {
        dkb[a].stage_in(space_, n);
        dvb[a].stage_in(space_, n);
      }
      const double tc2 = now(), cpu2 = cpu_now();
      if (t > 0) {
        add_rows(space_,
                 Strided<const T>{step_dk.data(), held * f().heads_kv * f().head_dim,
                                  std::int64_t(f().heads_kv) * f().head_dim, f().head_dim},
                 dense_kv(dkb[a].device(), held), 0, f().batch, held, f().heads_kv, f().head_dim);
        add_rows(space_,
                 Strided<const T>{step_dv.data(), held * f().heads_kv * f().head_dim,
                                  std::int64_t(f().heads_kv) * f().head_dim, f().head_dim},
                 dense_kv(dvb[a].device(), held), 0, f().batch, held, f().heads_kv, f().head_dim);
      } else {
        Kokkos::deep_copy(space_, Kokkos::subview(dkb[a].view(), std::pair<std::size_t, std::size_t>(0, n)),
                          Kokkos::subview(step_dk, std::pair<std::size_t, std::size_t>(0, n)));
        Kokkos::deep_copy(space_, Kokkos::subview(dvb[a].view(), std::pair<std::size_t, std::size_t>(0, n)),
                          Kokkos::subview(step_dv, std::pair<std::size_t, std::size_t>(0, n)));
      }
      if (P_ == 1) add_to_outputs(dkb[a].device(), dvb[a].device(), 0, held);
      space_.fence();
      const double tc3 = now();
      stats_.compute_cpu_seconds += cpu_now() - cpu2;
      if (P_ > 1) {
        dkb[a].stage_out(space_, n);
        dvb[a].stage_out(space_, n);
        isend(dkb[a].mpi(), n, right, kTagDk, comm_, acc_out[a], stats_);
        isend(dvb[a].mpi(), n, right, kTagDv, comm_, acc_out[a], stats_);
      }
      wait_all(kv_reqs);
      if (t + 1 < P_) {
        const std::int64_t n_in = kv_elems(s_.kv_lens[(rank_ - t - 1 + P_) % P_]);
        kb[1 - cur].stage_in(space_, n_in);
        vb[1 - cur].stage_in(space_, n_in);
        cur = 1 - cur;
      }
      const double tw1 = now();
      // Compute: the pairs and the accumulator update; everything else is exposed communication.
      stats_.compute_seconds += (tc1 - tc0) + (tc3 - tc2);
      stats_.comm_seconds += (tw1 - tw0) - (tc1 - tc0) - (tc3 - tc2);
      ++stats_.steps;
      if (d_.progress) d_.progress(t + 1, P_);
    }
    if (P_ > 1) {
      // This rank's own accumulators, back from their tour.
      const double tw0 = now();
      const int a = P_ % 2;
      wait_all(acc_out[a]);
      std::vector<MPI_Request> home;
      const std::int64_t n = kv_elems(f().kv_len);
      irecv(dkb[a].mpi(), n, left, kTagDk, comm_, home);
      irecv(dvb[a].mpi(), n, left, kTagDv, comm_, home);
      wait_all(home);
      dkb[a].stage_in(space_, n);
      dvb[a].stage_in(space_, n);
      add_to_outputs(dkb[a].device(), dvb[a].device(), 0, f().kv_len);
      wait_all(acc_out[1 - a]);
      space_.fence();
      stats_.comm_seconds += now() - tw0;
    }
  }

  // ---- the deterministic tour ---------------------------------------------------------------
  struct Package {
    Buffer k, v, dk, dv;
    std::int64_t len = 0;
    std::vector<MPI_Request> reqs;
  };

  std::unique_ptr<Package> new_package(std::int64_t len) {
    auto pk = std::make_unique<Package>();
    pk->k = buffer("kattn::dist::tour::k", len);
    pk->v = buffer("kattn::dist::tour::v", len);
    pk->dk = buffer("kattn::dist::tour::dk", len);
    pk->dv = buffer("kattn::dist::tour::dv", len);
    pk->len = len;
    return pk;
  }

  void send(Package& pk, int dest, int tag, bool with_kv, bool with_grads) {
    const std::int64_t n = kv_elems(pk.len);
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

  void receive(Package& pk, int source, int tag, bool with_kv, bool with_grads) {
    const std::int64_t n = kv_elems(pk.len);
    std::vector<MPI_Request> reqs;
    if (with_kv) {
      irecv(pk.k.mpi(), n, source, tag, comm_, reqs);
      irecv(pk.v.mpi(), n, source, tag, comm_, reqs);
    }
    if (with_grads) {
      irecv(pk.dk.mpi(), n, source, tag, comm_, reqs);
      irecv(pk.dv.mpi(), n, source, tag, comm_, reqs);
    }
    wait_all(reqs);
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
    zero_rows(space_, dense_kv(pk.dk.device(), pk.len), f().batch, pk.len, f().heads_kv, f().head_dim);
    zero_rows(space_, dense_kv(pk.dv.device(), pk.len), f().batch, pk.len, f().heads_kv, f().head_dim);
  }

  // Every key segment g travels owner(g) -> owner(q_last) -> ... -> owner(q_0) -> owner(g): the
  // query segments in descending global order, and the query chunks inside each item too, so
  // every dK row adds the query chunks in one fixed order (descending) whatever the rank count.
  // Descending, because under a causal mask the last queries see the most keys: the tour starts
  // with the most work and the pipeline fills faster. Item (g, p) (key segment g at tour
  // position p) needs item (g, p - 1). Every rank works through its items in one global order
  // that respects this, wavefront first: (g + p, p). So the smallest unfinished item can always
  // run (no deadlock), and a rank holding an early and a late query segment (zigzag) works on
  // later key segments of one while the other waits for its packages. dQ of a query segment
  // still sees the key segments in order g = 0, 1, ... (they come in increasing g + p).
  struct Item {
    int g, p;  // key segment, tour position (query segment Sq - 1 - p)
    bool operator<(const Item& o) const {
      return g + p != o.g + o.p ? g + p < o.g + o.p : p != o.p ? p < o.p : g < o.g;
    }
  };

  void run_tour() {
    const std::int64_t C = chunk_of(d_);
    const auto& qsegs = s_.q_layout.segments();
    const auto& ksegs = s_.kv_layout.segments();
    const int Sq = static_cast<int>(qsegs.size()), Sk = static_cast<int>(ksegs.size());
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
    // Tour position p visits query segment Sq - 1 - p.
    const auto tour = [&](int p) -> const Segment& { return qsegs[Sq - 1 - p]; };
    if (Sq > 0) {
      const int first = tour(0).owner, last = tour(Sq - 1).owner;
      for (int g = 0; g < Sk; ++g) {
        const Segment& ks = ksegs[g];
        if (ks.owner != rank_) continue;
        if (first != rank_) {  // K/V to the first query segment's owner
          auto pk = new_package(ks.length);
          pack_local(ks.local, ks.length, pk->k, pk->v);
          send(*pk, first, kTagStart, true, false);
          outgoing.emplace_back(Item{g, 0}, std::move(pk));
        }
        if (last != rank_) {  // the finished gradients come back from the last one
          home[g] = new_package(ks.length);
          const std::int64_t n = kv_elems(ks.length);
          irecv(home[g]->dk.mpi(), n, last, kTagHome, comm_, home[g]->reqs);
          irecv(home[g]->dv.mpi(), n, last, kTagHome, comm_, home[g]->reqs);
        }
      }
    }
    std::vector<Item> items;
    for (int p = 0; p < Sq; ++p)
      if (tour(p).owner == rank_)
        for (int g = 0; g < Sk; ++g) items.push_back(Item{g, p});
    std::sort(items.begin(), items.end());
    stats_.comm_seconds += now() - tw0;
    for (const Item& item : items) {
      const int g = item.g, j = item.p;  // j: tour position
      const Segment& ks = ksegs[g];
      const Segment& qs = tour(j);
      const double tr0 = now();
      retire(&item);
      std::unique_ptr<Package> pk;
      if (j > 0 && tour(j - 1).owner == rank_) {
        auto it = carried.find(item);
        KATTN_ASSERT(it != carried.end());
        pk = std::move(it->second);
        carried.erase(it);
      } else {
        pk = new_package(ks.length);
        if (j == 0) {
          if (ks.owner == rank_)
            pack_local(ks.local, ks.length, pk->k, pk->v);
          else
            receive(*pk, ks.owner, kTagStart, true, false);
          zero_grads(*pk);
        } else {
          receive(*pk, tour(j - 1).owner, kTagHop + j, true, true);
        }
      }
      const double tc0 = now(), cpu0 = cpu_now();
      stats_.comm_seconds += tc0 - tr0;
      // Query chunks in descending global order outside (segments start at chunk multiples),
      // key chunks in ascending order inside: every dK row adds the query chunks in one fixed
      // order, every dQ row the key chunks (g after g) in order.
      for (std::int64_t cq = (qs.length - 1) / C * C; cq >= 0; cq -= C) {
        const std::int64_t nq = std::min(C, qs.length - cq);
        for (std::int64_t ck = 0; ck < ks.length; ck += C) {
          const std::int64_t nk = std::min(C, ks.length - ck);
          if (!pair(qs.local + cq, qs.global + cq, nq, pk->k.device(), pk->v.device(), ks.length, ck, ks.global + ck,
                    nk))
            continue;
          add_dq(qs.local + cq, nq);
          add_dkv(pk->dk.device(), pk->dv.device(), ks.length, ck, nk);
        }
        for (auto& o : outgoing) poke(o.second->reqs);
      }
      space_.fence();
      const double tc1 = now();
      stats_.compute_seconds += tc1 - tc0;
      stats_.compute_cpu_seconds += cpu_now() - cpu0;
      if (j + 1 < Sq) {
        const Item next{g, j + 1};
        if (tour(j + 1).owner == rank_) {
          carried[next] = std::move(pk);
        } else {
          send(*pk, tour(j + 1).owner, kTagHop + j + 1, true, true);
          outgoing.emplace_back(next, std::move(pk));
        }
      } else if (ks.owner == rank_) {
        add_to_outputs(pk->dk.device(), pk->dv.device(), ks.local, ks.length);
      } else {
        send(*pk, ks.owner, kTagHome, false, true);
        outgoing.emplace_back(Item{g, Sq}, std::move(pk));
      }
      stats_.comm_seconds += now() - tc1;
      ++stats_.steps;
      if (d_.progress) d_.progress(stats_.steps, static_cast<int>(items.size()));
    }
    const double tw1 = now();
    retire(nullptr);
    for (int g = 0; g < Sk; ++g) {
      if (!home[g]) continue;
      wait_all(home[g]->reqs);
      const std::int64_t n = kv_elems(ksegs[g].length);
      home[g]->dk.stage_in(space_, n);
      home[g]->dv.stage_in(space_, n);
      add_to_outputs(home[g]->dk.device(), home[g]->dv.device(), ksegs[g].local, ksegs[g].length);
    }
    space_.fence();
    stats_.comm_seconds += now() - tw1;
  }

  MPI_Comm comm_;
  ExecSpace space_;
  BackwardParams<T> p_;
  Options opt_;
  DistOptions d_;
  BackwardOptions bopt_;
  GlobalSplit s_;
  int rank_ = 0, P_ = 1;
  Kokkos::View<T*, Mem> pair_dq_, pair_dk_, pair_dv_;
  DistStats stats_;
};

}  // namespace

template <class ExecSpace, class T>
DistStats ring_backward_impl(MPI_Comm comm, const ExecSpace& space, const BackwardParams<T>& p, const Options& opt,
                             const DistOptions& d, const BackwardOptions& bopt) {
  // Regions of the area ("kattn::dist", shared helpers) and of this entry point.
  compat::ScopedRegion area("kattn::dist");
  compat::ScopedRegion region("kattn::dist::ring_backward");
  std::vector<Agreed> fields = problem_fields(DistCall::ring_attention_backward, p.fwd, opt, d);
  fields.push_back(Agreed::boolean("backward options", "deterministic", bopt.deterministic));
  fields.push_back(Agreed::integer("backward options", "dq strategy", static_cast<int>(bopt.dq)));
  fields.push_back(Agreed::integer("backward options", "dq_chunks", bopt.dq_chunks));
  fields.push_back(Agreed::integer("options", "block_q", opt.block_q));
  collective_agree(comm, fields);
  require_no_block_mask(opt);
  const GlobalSplit split = sharded_split(comm, p.fwd.q_len, p.fwd.kv_len, d);
  BackwardRunner<ExecSpace, T> runner(comm, space, p, opt, d, bopt, split);
  return runner.run();
}

#define KATTN_INSTANTIATE_RING_BACKWARD(Space, T)                                                                   \
  template DistStats ring_backward_impl<Space, T>(MPI_Comm, const Space&, const BackwardParams<T>&, const Options&, \
                                                  const DistOptions&, const BackwardOptions&);
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_RING_BACKWARD)

}  // namespace detail
}  // namespace dist
}  // namespace kattn
