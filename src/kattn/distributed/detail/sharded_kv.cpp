#include "kattn/distributed/detail/schemes.hpp"

#include <algorithm>
#include <chrono>
#include <type_traits>
#include <vector>

#include "kattn/compat.hpp"
#include "kattn/detail/attention_impl.hpp"
#include "kattn/detail/backends.hpp"
#include "kattn/distributed/detail/agreement.hpp"
#include "kattn/distributed/detail/buffer_memory.hpp"
#include "kattn/distributed/detail/chunk_partials.hpp"
#include "kattn/distributed/detail/clock.hpp"
#include "kattn/distributed/detail/fold_kernels.hpp"
#include "kattn/distributed/merge_op.hpp"
#include "kattn/distributed/detail/shard_math.hpp"
#include "kattn/distributed/detail/transport.hpp"
#include "kattn/plan_splits.hpp"

namespace kattn {
namespace dist {
namespace detail {
namespace {

// Finished rows [lse, o] (row (b, i, h) at ((b * Nq + i) * H + h) * (D + 1)) to the caller's o, lse.
template <class ExecSpace, class P>
struct UnpackRows {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using T = typename P::acc_type;
  P p;
  const T* rec = nullptr;
  int league_size() const { return p.batch * static_cast<int>(p.q_len); }
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    const int b = member.league_rank() / static_cast<int>(p.q_len);
    const std::int64_t i = member.league_rank() % p.q_len;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, p.heads_q), [&](const int h) {
      const T* r = rec + ((std::int64_t(b) * p.q_len + i) * p.heads_q + h) * (p.head_dim + 1);
      T* o = p.o_ptr(b, i, h);
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, p.head_dim), [&](const int d) { o[d] = r[1 + d]; });
      Kokkos::single(Kokkos::PerThread(member), [&]() {
        if (p.lse) *p.lse_ptr(b, i, h) = r[0];
      });
    });
  }
};

}  // namespace

template <class ExecSpace, class Q, class T, class KV>
DistStats sharded_kv_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<Q, T, KV>& p, const Options& opt,
                      const DistOptions& d) {
  static_assert(std::is_same<Q, T>::value, "kattn::dist::sharded_kv: q and o in the accumulation type (rows travel in it)");
  using Mem = typename ExecSpace::memory_space;
  // Regions of the area ("kattn::dist", shared helpers) and of this entry point (its own kernels).
  compat::ScopedRegion area("kattn::dist");
  compat::ScopedRegion region("kattn::dist::sharded_kv");
  const double t0 = now();
  int rank = 0, P = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &P);
  std::vector<Agreed> fields = problem_fields(DistCall::sharded_kv_forward, p, opt, d);
  fields.push_back(Agreed::integer("q", "query positions", p.q_len));
  collective_agree(comm, fields);
  require_no_block_mask(opt);
  require_sharded_bias(comm, p, p.kv_len, opt);  // every query row over this rank's keys: no bias value moves
  KATTN_REQUIRE(d.root < P, "root: expected a rank of the communicator (0 .. ", P - 1, ") or -1, got ", d.root);

  // This rank's keys in the global cache.
  const std::vector<std::int64_t> kv_lens = allgather(comm, p.kv_len);
  std::int64_t offset = 0, Nk = 0;
  for (int r = 0; r < P; ++r) {
    if (r < rank) offset += kv_lens[r];
    Nk += kv_lens[r];
  }
  const std::int64_t C = chunk_of(d);
  if (d.deterministic) {
    for (std::int64_t r = 0, start = 0; r < P; start += kv_lens[r], ++r)
      KATTN_REQUIRE(kv_lens[r] == 0 || start % C == 0, "k: deterministic decode needs every rank's KV shard to start ",
                    "at a multiple of the chunk (", C, " keys); rank ", r, " starts at key ", start);
  }
  const Options local = shard_options(opt, 0, p.q_len, p.q_len, offset, p.kv_len, Nk);
  DistStats stats;
  const double pairs = double(KeyWindow::from(local).visible_pairs(p.q_len, p.kv_len));
  stats.flops = 4.0 * p.head_dim * pairs * p.batch * p.heads_q;
  const std::int64_t rows = std::int64_t(p.batch) * p.q_len * p.heads_q;
  const int D = p.head_dim;
  const bool host_memory = Kokkos::SpaceAccessibility<Kokkos::HostSpace, Mem>::accessible;

  if (!d.deterministic) {
    // Local partial rows [lse, o], written by the kernel straight into the message layout.
    Kokkos::View<T*, Mem> rec;
    const std::int64_t w = D + 1;
    // The operator runs on the host: device rows always go through a host copy.
    const bool staged = !host_memory || d.staging == Staging::host;
    stats.staged = staged;
    HostTwin<T> host;
    const double tc0 = now();
    // Every local step (buffers, the local attention) comes before the reduction: one collective
    // step turns a failure on any rank into the same error on every rank.
    collective_check(comm, [&] {
      require_buffers<Mem>(opt.workspace, "kattn::dist::attention (sharded-kv)", rows * (D + 1), sizeof(T));
      rec = take_buffer<T, Mem>(opt.workspace, space, "kattn::dist::sharded_kv::rows", rows * (D + 1));
      if (staged) host = HostTwin<T>(opt.workspace, "kattn::dist::sharded_kv::rows_host", rec.extent(0));
      AttentionParams<Q, T, KV> pr = p;
      pr.lse = Operand<T>(rec.data(), p.q_len * p.heads_q * w, p.heads_q * w, w);
      pr.o = same_layout(rec.data() + 1, pr.lse);
      Options split = local;
      split.splits = kattn::plan_splits(space, p, opt).splits;
      kattn::detail::attention_impl(space, pr, split, BatchLengths{});
      space.fence();
    });
    const double tc1 = now();
    if (staged) Kokkos::deep_copy(host.view(), rec);
    T* buf = staged ? host.data() : rec.data();
    KATTN_REQUIRE(rows <= INT32_MAX, "q: ", rows, " query rows are more than one reduction carries (2^31 - 1)");
    MPI_Datatype type = finished_row_type<T>(D);
    if (d.root < 0) {
      MPI_Allreduce(MPI_IN_PLACE, buf, static_cast<int>(rows), type, finished_row_merge<T>(), comm);
    } else {
      MPI_Reduce(rank == d.root ? MPI_IN_PLACE : buf, rank == d.root ? buf : nullptr, static_cast<int>(rows), type,
                 finished_row_merge<T>(), d.root, comm);
    }
    MPI_Type_free(&type);
    if (P > 1 && (d.root < 0 || rank != d.root)) {
      stats.bytes_sent += rows * w * std::int64_t(sizeof(T));  // the rows this rank contributes
      ++stats.messages_sent;
    }
    if (d.root < 0 || rank == d.root) {
      if (staged) Kokkos::deep_copy(rec, host.view());
      UnpackRows<ExecSpace, AttentionParams<Q, T, KV>> f{p, rec.data()};
      launch_rows(space, "kattn::dist::sharded_kv::unpack", f);
    }
    space.fence();
    const double tc2 = now();
    stats.compute_seconds = tc1 - tc0;
    stats.comm_seconds = tc2 - tc1;
    stats.steps = 1;
  } else {
    // Deterministic: chunk partials here, then a chain 0 -> 1 -> ... -> P-1 that folds every
    // rank's chunks in global order into one accumulator.
    Options det = local;
    {
      Options plan = opt;
      plan.block_q = 0;
      det.block_k = deterministic_block_k<ExecSpace, T>(space, D, p.q_len * p.group_size(), plan);
    }
    const int chunks = static_cast<int>((p.kv_len + C - 1) / C);
    // Accumulator rows [m, l, o_0 .. o_{D-1}]: what travels along the chain.
    const std::int64_t w = D + 2;
    Kokkos::View<T*, Mem> ws_o, ws_lse, acc_rows;
    MessageBuffer<T, Mem> link;  // the accumulator's host twin when staging
    const bool staged = needs_staging<Mem>(d.staging);
    stats.staged = staged;
    const double tc0 = now();
    // Every buffer and the local chunk partials before the chain's first transfer: one collective
    // step turns a failure on any rank into the same error on every rank.
    collective_check(comm, [&] {
      require_buffers<Mem>(opt.workspace, "kattn::dist::attention (sharded-kv)",
                           std::uint64_t(chunks) * rows * (D + 1) + rows * w, sizeof(T));
      ws_o = take_buffer<T, Mem>(opt.workspace, space, "kattn::dist::sharded_kv::part_o", std::size_t(chunks) * rows * D);
      ws_lse = take_buffer<T, Mem>(opt.workspace, space, "kattn::dist::sharded_kv::part_lse", std::size_t(chunks) * rows);
      acc_rows = take_buffer<T, Mem>(opt.workspace, space, "kattn::dist::sharded_kv::acc", rows * w);
      if (staged) link = MessageBuffer<T, Mem>(opt.workspace, "kattn::dist::sharded_kv::link", rows * w, true);
      chunk_partials(space, p, det, chunks, C, ws_o.data(), ws_lse.data());
      space.fence();
    });
    double compute = now() - tc0, comm_time = 0;
    RowAccumulator<T> acc;
    acc.m = Operand<T>(acc_rows.data(), p.q_len * p.heads_q * w, p.heads_q * w, w);
    acc.l = same_layout(acc_rows.data() + 1, acc.m);
    acc.o = same_layout(acc_rows.data() + 2, acc.m);
    acc.batch = p.batch, acc.heads = p.heads_q, acc.head_dim = D, acc.q_len = p.q_len;

    T* mpi_ptr = staged ? link.mpi() : acc_rows.data();
    const auto to_link = [&]() {
      if (staged) {
        Kokkos::deep_copy(space, link.view(), acc_rows);
        link.stage_out(space, rows * w);
      }
    };
    const auto from_link = [&]() {
      if (staged) {
        link.stage_in(space, rows * w);
        Kokkos::deep_copy(space, acc_rows, link.view());
        space.fence();
      }
    };
    double tw = now();
    std::vector<MPI_Request> reqs;
    if (rank == 0) {
      launch_rows(space, "kattn::dist::sharded_kv::init", InitRows<ExecSpace, T>{acc});
    } else {
      irecv(mpi_ptr, rows * w, rank - 1, 0, comm, reqs);
      wait_all(reqs);
      from_link();
    }
    comm_time += now() - tw;
    tw = now();
    launch_rows(space, "kattn::dist::sharded_kv::fold",
                FoldPartials<ExecSpace, T>{acc, PartialRows<T>{ws_o.data(), ws_lse.data(), p.q_len, 0, chunks}});
    space.fence();
    compute += now() - tw;
    tw = now();
    const int last = P - 1;
    if (rank < last) {
      to_link();
      isend(mpi_ptr, rows * w, rank + 1, 0, comm, reqs, stats);
      wait_all(reqs);
    }
    // The finished accumulator to whoever needs it.
    if (d.root < 0) {
      if (rank == last) to_link();
      if (P > 1) ibcast(mpi_ptr, rows * w, last, comm, reqs, stats);
      wait_all(reqs);
      if (rank != last) from_link();
    } else if (d.root != last) {
      if (rank == last) {
        to_link();
        isend(mpi_ptr, rows * w, d.root, 1, comm, reqs, stats);
      }
      if (rank == d.root) irecv(mpi_ptr, rows * w, last, 1, comm, reqs);
      wait_all(reqs);
      if (rank == d.root) from_link();
    }
    comm_time += now() - tw;
    if (d.root < 0 || rank == d.root) {
      FinishRows<ExecSpace, T> fin{acc};
      fin.lse = p.lse;
      fin.out = p.o;
      launch_rows(space, "kattn::dist::sharded_kv::finish", fin);
    }
    space.fence();
    stats.compute_seconds = compute;
    stats.comm_seconds = comm_time;
    stats.steps = P;
  }
  stats.seconds = now() - t0;
  return stats;
}

#define KATTN_INSTANTIATE_SHARDED_KV_KV(Space, Q, KV)                                                           \
  template DistStats sharded_kv_impl<Space, Q, Q, KV>(MPI_Comm, const Space&, const AttentionParams<Q, Q, KV>&, \
                                                  const Options&, const DistOptions&);
#define KATTN_INSTANTIATE_SHARDED_KV(Space, T) KATTN_INSTANTIATE_SHARDED_KV_KV(Space, T, T)
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_SHARDED_KV)
// A 16-bit KV cache under float queries (16-bit queries are widened first: door.hpp).
#define KATTN_INSTANTIATE_16BIT_CACHE_SHARDED_KV(Space, S) KATTN_INSTANTIATE_SHARDED_KV_KV(Space, float, S)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_16BIT_CACHE_SHARDED_KV, bf16)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_16BIT_CACHE_SHARDED_KV, fp16)

}  // namespace detail
}  // namespace dist
}  // namespace kattn
