// Ragged batches one sequence at a time: the ring's deterministic mode and the grid. Internal.
//
// The deterministic mode's key chunks are positions of one sequence (ring.hpp). A ragged batch
// keeps them per sequence: every sequence b is sharded as the deterministic dense ring shards one,
// SequenceLayout(N_b, P, sharding, chunk) (ragged_layout.hpp), and the ring runs the dense
// deterministic call on each sequence's rows in turn, every rank entering every sequence's call
// (with none of its rows, too). A sequence's bits are then those of the deterministic dense ring
// on it alone: the same for every rank count and sharding, whatever else the batch holds. The
// cost, next to the plain ragged ring's pieces: one collective call per sequence (its agreements,
// its own transfers), nothing overlapped across sequences.
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kattn/backward_params.hpp"
#include "kattn/core/storage.hpp"
#include "kattn/distributed/detail/agreement.hpp"
#include "kattn/distributed/detail/buffer_memory.hpp"
#include "kattn/distributed/detail/clock.hpp"
#include "kattn/distributed/options.hpp"
#include "kattn/distributed/detail/failure_latch.hpp"
#include "kattn/distributed/detail/inner_stats.hpp"
#include "kattn/distributed/layout.hpp"
#include "kattn/distributed/detail/pack.hpp"
#include "kattn/distributed/detail/transport.hpp"
#include "kattn/errors.hpp"
#include "kattn/ragged.hpp"

namespace kattn {
namespace dist {
namespace detail {

struct RaggedSequences {
  std::vector<std::int64_t> q_local, kv_local;  // this rank's local indptr [B + 1]
  std::vector<std::int64_t> Nq, Nk;             // every sequence's lengths over all ranks
  int batch() const { return static_cast<int>(Nq.size()); }
};

// Every rank's lengths (`local`: this rank's, after collective_agree gave every rank the same B),
// checked against the sharding (on whole chunks in deterministic mode; the grid's ragged batches
// use it in both modes): every rank sees every rank's lengths, so a mismatch
// throws the same kattn::Error on every rank.
inline RaggedSequences ragged_sequences(MPI_Comm comm, const BatchLengths& local, const DistOptions& d) {
  int P = 1;
  MPI_Comm_size(comm, &P);
  const std::size_t B = local.q_len.size();
  std::vector<std::int64_t> mine(local.q_len);
  mine.insert(mine.end(), local.kv_len.begin(), local.kv_len.end());
  std::vector<std::int64_t> all(mine.size() * P);
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(), static_cast<int>(mine.size()),
                MPI_INT64_T, comm);
  RaggedSequences s;
  s.q_local = kattn::detail::indptr_of(local.q_len);
  s.kv_local = kattn::detail::indptr_of(local.kv_len);
  s.Nq.assign(B, 0), s.Nk.assign(B, 0);
  std::vector<std::int64_t> lens(P);
  for (std::size_t b = 0; b < B; ++b)
    for (const bool keys : {false, true}) {
      std::int64_t& N = keys ? s.Nk[b] : s.Nq[b];
      for (int r = 0; r < P; ++r) N += lens[r] = all[r * 2 * B + (keys ? B : 0) + b];
      require_layout(lens, SequenceLayout(N, P, d.sharding, shard_align(d)), keys ? "kv_indptr" : "q_indptr",
                     keys ? "key positions" : "query positions", "sequence " + std::to_string(b) + " ",
                     d.deterministic ? ": the deterministic mode cuts every sequence on whole chunks; "
                                       "dist::ragged_local_indptr with the call's DistOptions gives each rank its "
                                       "local indptr"
                                     : ": dist::ragged_local_indptr with the call's DistOptions gives each rank its "
                                       "local indptr");
    }
  return s;
}

// The sequences in turn: run(b, each, latch) makes sequence b's inner distributed call with `each`
// (d without the progress callback: the call reports sequences) through `latch`, the one every
// rank shares, and returns its stats; they are summed (the wall clock is the caller's). Settles
// the latch: a failure anywhere is the same error on every rank.
template <class MemorySpace, class Run>
DistStats for_each_sequence(MPI_Comm comm, const RaggedSequences& seqs, const DistOptions& d, const Run& run) {
  DistOptions each = d;
  each.progress = nullptr;
  DistStats stats;
  stats.staged = needs_staging<MemorySpace>(d.staging);
  FailureLatch latch(comm);
  for (int b = 0; b < seqs.batch(); ++b) {
    latch.capture([&] { accumulate(stats, run(b, each, latch)); });
    latch.guard([&] {
      if (d.progress) d.progress(b + 1, seqs.batch());
    });
  }
  latch.settle();
  return stats;
}

// n rows of heads x dim values of the caller's (a ragged operand) as the ring reads or
// writes them in T: the caller's own rows when stored in T, else a dense float copy, widened from
// the caller's by load() and rounded back once by store(). S: the caller's type, const for inputs.
template <class T, class S, class ExecSpace>
class RowsAs {
 public:
  static constexpr bool copies = !std::is_same_v<std::remove_const_t<S>, T>;
  using Value = std::conditional_t<std::is_const_v<S>, const T, T>;

  RowsAs() = default;
  // Allocates the copy (inside the caller's collective memory check) without filling it.
  RowsAs(Workspace* ws, const ExecSpace& space, const char* label, const Operand<S>& caller, std::int64_t n, int heads,
         int dim)
      : caller_(caller), n_(n), heads_(heads), dim_(dim) {
    if constexpr (copies) {
      copy_ = take_buffer<T, typename ExecSpace::memory_space>(ws, space, label, n * heads * dim);
      rows_ = dense_operand(copy_.data(), 0, heads, dim);
    } else {
      rows_ = caller;
    }
  }

  void load(const ExecSpace& space) const {
    if constexpr (copies)
      copy_rows(space, Operand<const std::remove_const_t<S>>(caller_), 0, dense_operand(copy_.data(), 0, heads_, dim_),
                1, n_, heads_, dim_);
  }
  void store(const ExecSpace& space) const {
    if constexpr (copies)
      copy_rows(space, dense_operand<const T>(copy_.data(), 0, heads_, dim_), 0, caller_, 1, n_, heads_, dim_);
  }

  // The rows from row i on.
  Operand<Value> from_row(std::int64_t i) const { return rows_.from_row(i); }

 private:
  Operand<S> caller_;
  Operand<Value> rows_;
  Kokkos::View<T*, typename ExecSpace::memory_space> copy_;
  std::int64_t n_ = 0;
  int heads_ = 0, dim_ = 0;
};

// The dense problem (batch 1) of sequence b's local rows: q and o as the ring reads them, k and v
// (KV) and lse the caller's. P: the caller's ragged params (their k, v, lse and strides).
template <class T, class KV, class Q, class O, class Params>
AttentionParams<T, T, KV> sequence_params(const Params& p, const RaggedSequences& s, int b, const Q& q, const O& o,
                                          const Operand<const KV>& k, const Operand<const KV>& v) {
  const std::int64_t q0 = s.q_local[b], k0 = s.kv_local[b];
  AttentionParams<T, T, KV> a;
  a.batch = 1;
  a.heads_q = p.heads_q, a.heads_kv = p.heads_kv, a.head_dim = p.head_dim;
  a.q_len = a.q_total = s.q_local[b + 1] - q0;
  a.kv_len = s.kv_local[b + 1] - k0;
  a.q = q.from_row(q0), a.o = o.from_row(q0);
  a.k = k ? k.from_row(k0) : k, a.v = v ? v.from_row(k0) : v;
  a.lse = p.lse ? p.lse.from_row(q0) : p.lse;
  return a;
}

// A ragged batch's forward as one dense distributed call per sequence in turn: forward(params,
// each, latch) is the scheme's dense forward of one sequence's rows (q and o as it reads them, in
// T: copies when stored in S, taken inside one collective check), every rank entering every
// sequence's call; the stats summed, the wall clock the whole batch's. `call` names it in memory
// errors.
template <class ExecSpace, class S, class Forward>
DistStats forward_each_sequence(MPI_Comm comm, const ExecSpace& space, const AttentionParams<S>& p,
                                const BatchLengths& lengths, const Options& opt, const DistOptions& d, const char* call,
                                const Forward& forward) {
  using T = accumulate_t<S>;  // q, o and lse in the inner calls; K/V travel in S
  const double t0 = now();
  const RaggedSequences seqs = ragged_sequences(comm, lengths, d);
  const int H = p.heads_q, D = p.head_dim;
  const std::int64_t nq = seqs.q_local.back();
  RowsAs<T, const S, ExecSpace> q;
  RowsAs<T, S, ExecSpace> o;
  collective_check(comm, [&] {
    if (RowsAs<T, S, ExecSpace>::copies)
      require_buffers<typename ExecSpace::memory_space>(opt.workspace, call, 2 * std::uint64_t(nq) * H * D, sizeof(T));
    q = RowsAs<T, const S, ExecSpace>(opt.workspace, space, "kattn::dist::ragged::q", p.q, nq, H, D);
    o = RowsAs<T, S, ExecSpace>(opt.workspace, space, "kattn::dist::ragged::o", p.o, nq, H, D);
  });
  q.load(space);
  DistStats stats = for_each_sequence<typename ExecSpace::memory_space>(
      comm, seqs, d, [&](int b, const DistOptions& each, FailureLatch& latch) {
        if (seqs.Nq[b] == 0) return DistStats();  // no rows to compute, on any rank
        return forward(sequence_params<T>(p, seqs, b, q, o, p.k, p.v), each, &latch);
      });
  o.store(space);
  space.fence();
  stats.seconds = now() - t0;
  return stats;
}

// A ragged batch's backward as one dense distributed call per sequence in turn, as
// forward_each_sequence: backward(params, k, v, each, latch) is the scheme's dense backward of one
// sequence's rows (q, o, dout and the gradients in T, K/V as stored at k, v), every rank entering
// every sequence's call. A sequence no query of which is anywhere gets zero dK/dV.
template <class ExecSpace, class S, class Backward>
DistStats backward_each_sequence(MPI_Comm comm, const ExecSpace& space, const BackwardParams<S>& p,
                                 const BatchLengths& lengths, const Options& opt, const DistOptions& d,
                                 const char* call, const Backward& backward) {
  using T = accumulate_t<S>;  // everything but K/V in the inner calls; K/V travel in S
  using In = RowsAs<T, const S, ExecSpace>;
  using Out = RowsAs<T, S, ExecSpace>;
  const double t0 = now();
  const RaggedSequences seqs = ragged_sequences(comm, lengths, d);
  const AttentionParams<S>& f = p.fwd;
  const int H = f.heads_q, Hkv = f.heads_kv, D = f.head_dim;
  const std::int64_t nq = seqs.q_local.back(), nk = seqs.kv_local.back();
  In q, dout;
  Out o, dq, dk, dv;
  collective_check(comm, [&] {
    if (Out::copies)
      require_buffers<typename ExecSpace::memory_space>(
          opt.workspace, call, 4 * std::uint64_t(nq) * H * D + 2 * std::uint64_t(nk) * Hkv * D, sizeof(T));
    q = In(opt.workspace, space, "kattn::dist::ragged::q", f.q, nq, H, D);
    o = Out(opt.workspace, space, "kattn::dist::ragged::o", f.o, nq, H, D);
    dout = In(opt.workspace, space, "kattn::dist::ragged::dout", p.dout, nq, H, D);
    dq = Out(opt.workspace, space, "kattn::dist::ragged::dq", p.dq, nq, H, D);
    dk = Out(opt.workspace, space, "kattn::dist::ragged::dk", p.dk, nk, Hkv, D);
    dv = Out(opt.workspace, space, "kattn::dist::ragged::dv", p.dv, nk, Hkv, D);
  });
  q.load(space), o.load(space), dout.load(space);
  DistStats stats = for_each_sequence<typename ExecSpace::memory_space>(
      comm, seqs, d, [&](int b, const DistOptions& each, FailureLatch& latch) {
        const std::int64_t q0 = seqs.q_local[b], k0 = seqs.kv_local[b];
        if (seqs.Nq[b] == 0) {  // keys no query sees: zero gradients
          for (const Out* g : {&dk, &dv})
            zero_rows(space, g->from_row(k0), 1, seqs.kv_local[b + 1] - k0, Hkv, D);
          return DistStats();
        }
        BackwardParams<T> a;
        // K and V go to the scheme as stored (the float params' are strides only).
        a.fwd =
            sequence_params<T>(f, seqs, b, q, o, same_layout<const T>(nullptr, f.k), same_layout<const T>(nullptr, f.v));
        a.dout = dout.from_row(q0), a.dq = dq.from_row(q0), a.dk = dk.from_row(k0), a.dv = dv.from_row(k0);
        return backward(a, f.k.from_row(k0).data, f.v.from_row(k0).data, each, &latch);
      });
  dq.store(space), dk.store(space), dv.store(space);
  space.fence();
  stats.seconds = now() - t0;
  return stats;
}

}  // namespace detail
}  // namespace dist
}  // namespace kattn
