// ulysses and hybrid, forward and backward: the steps every head-sharded call shares, written once
// (run_head_sharded), around the exchanges of head_sharded.hpp and the inner attention of each
// scheme: kattn's local attention on the whole sequence (ulysses), or the ring across the groups
// of the grid (hybrid).
#include "kattn/distributed/detail/schemes.hpp"

#include "kattn/compat.hpp"
#include "kattn/detail/backends.hpp"
#include "kattn/distributed/detail/agreement.hpp"
#include "kattn/distributed/detail/clock.hpp"
#include "kattn/distributed/detail/head_sharded.hpp"
#include "kattn/distributed/detail/hybrid_grid.hpp"
#include "kattn/distributed/detail/ulysses_local.hpp"

namespace kattn {
namespace dist {
namespace detail {
namespace {

// The checks agreed on every rank, the split of the positions (the scheme's layout), the
// measurements and one latch for the whole call (in hybrid a failure in any ring group reaches
// every rank, and the rings run through it); body(split, stats, latch) runs the exchanges.
// The bias is that of the scores the rank computes: its query heads (the head split of its group
// of U ranks) over its group's query rows in the ring's local order (hybrid_grid.hpp,
// group_length) and every key in global order, [B or 1, Hq/U or 1, rows, Nk], and dbias the same
// shape. ulysses is one group of U = P ranks: every query row.
template <class ExecSpace, class T, class Body>
DistStats run_head_sharded(MPI_Comm comm, const char* region_name, const std::vector<Agreed>& fields,
                           const AttentionParams<T>& f, const Options& opt, const DistOptions& d, bool backward,
                           const ScoreBiasGradient& dbias, const Body& body) {
  compat::ScopedRegion area("kattn::dist");
  compat::ScopedRegion region(region_name);
  const double t0 = now();
  collective_agree(comm, fields);
  require_no_block_mask(opt);
  int P = 1;
  MPI_Comm_size(comm, &P);
  const bool hybrid = d.scheme == Scheme::hybrid;
  if (hybrid)
    require_grid(P, f.heads_q, d);
  else
    require_head_split(f.heads_q, P);
  if (backward) require_whole_groups(f.heads_kv, hybrid ? ulysses_ranks(P, d) : P, d);
  const GlobalSplit split =
      hybrid ? hybrid_split(comm, f.q_len, f.kv_len, d) : sharded_split(comm, f.q_len, f.kv_len, d);
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  AttentionParams<T> mine = f;
  mine.heads_q = f.heads_q / (hybrid ? ulysses_ranks(P, d) : P);
  mine.q_len = hybrid ? group_length(split.Nq, rank, P, d) : split.Nq;
  require_sharded_bias(comm, mine, split.Nk, opt, dbias);
  DistStats stats;
  stats.staged = needs_staging<typename ExecSpace::memory_space>(d.staging);
  FailureLatch latch(comm);
  body(split, stats, latch);
  latch.settle();
  stats.seconds = now() - t0;
  return stats;
}

// The query heads this rank computes under ulysses (head_split); under hybrid, of its group's
// communicator.
HeadRange query_heads_of_rank(MPI_Comm comm, int heads_q) {
  int rank = 0, P = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &P);
  return {rank * (heads_q / P), heads_q / P};
}

// One head block's ring (hybrid). The ring takes float or double storage, or float queries over
// 16-bit K/V: for 16-bit storage the block's q is widened (exactly) into a dense float copy, the
// ring computes o in float, and o is rounded once into the block.
template <class ExecSpace, class T>
DistStats block_ring(const HybridGrid& grid, const ExecSpace& space, const AttentionParams<T>& a, const Options& opt,
                     const DistOptions& d, FailureLatch& latch) {
  if constexpr (!is_16bit_v<T>) {
    return ring_forward_impl(grid.ring(), space, a, opt, d, &latch);
  } else {
    using Mem = typename ExecSpace::memory_space;
    using Floats = Kokkos::View<float*, Mem>;
    const int hq = a.heads_q, D = a.head_dim;
    const std::int64_t values = std::int64_t(a.batch) * a.q_len * hq * D;
    const Floats q = take_buffer<float, Mem>(opt.workspace, space, "kattn::dist::hybrid::q_float", values),
                 o = take_buffer<float, Mem>(opt.workspace, space, "kattn::dist::hybrid::o_float", values);
    const Operand<float> q_dense = dense_operand(q.data(), a.q_len, hq, D),
                         o_dense = dense_operand(o.data(), a.q_len, hq, D);
    copy_rows(space, a.q, 0, q_dense, a.batch, a.q_len, hq, D);
    // The block's dense problem with float queries and outputs.
    AttentionParams<float, float, T> f;
    f.q = q_dense, f.o = o_dense, f.k = a.k, f.v = a.v, f.lse = a.lse;
    f.batch = a.batch, f.heads_q = hq, f.heads_kv = a.heads_kv, f.head_dim = D;
    f.q_len = a.q_len, f.kv_len = a.kv_len, f.q_total = a.q_total;
    const DistStats stats = ring_forward_impl(grid.ring(), space, f, opt, d, &latch);
    copy_rows(space, Operand<const float>(o_dense), 0, a.o, a.batch, a.q_len, hq, D);
    space.fence();
    return stats;
  }
}

}  // namespace

template <class ExecSpace, class T>
DistStats head_sharded_forward_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<T>& p,
                                    const Options& opt, const DistOptions& d) {
  const bool hybrid = d.scheme == Scheme::hybrid;
  std::vector<Agreed> fields =
      problem_fields(hybrid ? DistCall::hybrid_forward : DistCall::ulysses_forward, p, opt, d);
  fields.push_back(Agreed::boolean("lse", "an LSE output", p.lse.data != nullptr));
  return run_head_sharded<ExecSpace>(
      comm, hybrid ? "kattn::dist::hybrid" : "kattn::dist::ulysses", fields, p, opt, d, false, {},
      [&](const GlobalSplit& split, DistStats& stats, FailureLatch& latch) {
        if (hybrid) {
          const HybridGrid grid(comm, d);
          const int mine = query_heads_of_rank(grid.heads(), p.heads_q).first;
          head_sharded_forward<ExecSpace, T>(
              grid.heads(), space, p, grid.group_layout(split.Nq), grid.group_layout(split.Nk), stats, latch,
              opt.workspace, [&](const AttentionParams<T>& a, int first_head, DistStats& s) {
                Options o = heads_of(opt, first_head, a.heads_q);
                o.bias = bias_heads(o.bias, first_head - mine, a.heads_q);
                latch.capture([&] { accumulate(s, block_ring(grid, space, a, o, d, latch)); });
              });
          space.fence();
          return;
        }
        const Options local = local_options<ExecSpace, T>(space, p.head_dim, split.Nq * p.group_size(), opt, d);
        const int mine = query_heads_of_rank(comm, p.heads_q).first;
        head_sharded_forward<ExecSpace, T>(comm, space, p, split.q_layout, split.kv_layout, stats, latch,
                                           opt.workspace, [&](const AttentionParams<T>& a, int first_head,
                                                              DistStats& s) {
                                             latch.guard([&] {
                                               Options o = heads_of(local, first_head, a.heads_q);
                                               o.bias = bias_heads(o.bias, first_head - mine, a.heads_q);
                                               local_forward(space, a, o, s);
                                               if (d.progress) d.progress(1, 1);
                                             });
                                           });
        space.fence();
        stats.steps = 1;
      });
}

template <class ExecSpace, class T>
DistStats head_sharded_backward_impl(MPI_Comm comm, const ExecSpace& space, const BackwardParams<T>& p,
                                     const Options& opt, const DistOptions& d, const BackwardOptions& bopt) {
  using Acc = accumulate_t<T>;
  const bool hybrid = d.scheme == Scheme::hybrid;
  const AttentionParams<T>& f = p.fwd;
  return run_head_sharded<ExecSpace>(
      comm, hybrid ? "kattn::dist::hybrid_backward" : "kattn::dist::ulysses_backward",
      problem_fields(hybrid ? DistCall::hybrid_backward : DistCall::ulysses_backward, f, opt, d), f, opt, d, true,
      bopt.dbias, [&](const GlobalSplit& split, DistStats& stats, FailureLatch& latch) {
        if (hybrid) {
          const HybridGrid grid(comm, d);
          const HeadRange mine = query_heads_of_rank(grid.heads(), f.heads_q);
          HeadsBiasGradient<ExecSpace, Acc> dbias(space, bopt.dbias, mine.count, opt.workspace);
          head_sharded_backward<ExecSpace, T>(
              grid.heads(), space, p, grid.group_layout(split.Nq), grid.group_layout(split.Nk), stats, latch,
              opt.workspace, [&](const BackwardParams<Acc>& b, int first_head, DistStats& s) {
                const int h = first_head - mine.first, n = b.fwd.heads_q;
                Options o = heads_of(opt, first_head, n);
                o.bias = dbias.bias(o.bias, h, n);
                // The full-head sum's memory is this rank's step: a failure there is latched, and
                // the ring still runs (its compute skipped), with no dbias to write.
                BackwardOptions bo = bopt;
                bo.dbias = {};
                latch.guard([&] { bo.dbias = dbias.block(h, n); });
                latch.capture([&] { accumulate(s, ring_backward_impl(grid.ring(), space, b, o, d, bo, &latch)); });
                if (h + n == dbias.heads()) latch.guard([&] { dbias.finish(); });
              });
          space.fence();
          return;
        }
        // The whole problem's shape in the type the backward computes in, for its planner.
        AttentionParams<Acc> whole;
        whole.batch = f.batch, whole.heads_q = f.heads_q, whole.heads_kv = f.heads_kv, whole.head_dim = f.head_dim;
        whole.q_len = split.Nq, whole.kv_len = split.Nk;
        Options local = opt;
        local.progress = nullptr;  // DistOptions::progress reports the call's progress
        const BackwardOptions local_bopt = local_backward_options(space, whole, opt, d, bopt);
        const HeadRange mine = query_heads_of_rank(comm, f.heads_q);
        HeadsBiasGradient<ExecSpace, Acc> dbias(space, bopt.dbias, mine.count, opt.workspace);
        head_sharded_backward<ExecSpace, T>(comm, space, p, split.q_layout, split.kv_layout, stats, latch,
                                            opt.workspace, [&](const BackwardParams<Acc>& b, int first_head,
                                                               DistStats& s) {
                                              latch.guard([&] {
                                                const int h = first_head - mine.first, n = b.fwd.heads_q;
                                                Options o = heads_of(local, first_head, n);
                                                o.bias = dbias.bias(o.bias, h, n);
                                                BackwardOptions bo = local_bopt;
                                                bo.dbias = dbias.block(h, n);
                                                local_backward(space, b, o, bo, s);
                                                if (h + n == dbias.heads()) dbias.finish();
                                                if (d.progress) d.progress(1, 1);
                                              });
                                            });
        space.fence();
        stats.steps = 1;
      });
}

#define KATTN_INSTANTIATE_HEAD_SHARDED(Space, T)                                                                   \
  template DistStats head_sharded_forward_impl<Space, T>(MPI_Comm, const Space&, const AttentionParams<T>&,       \
                                                         const Options&, const DistOptions&);                     \
  template DistStats head_sharded_backward_impl<Space, T>(MPI_Comm, const Space&, const BackwardParams<T>&,       \
                                                          const Options&, const DistOptions&, const BackwardOptions&);
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_HEAD_SHARDED)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_HEAD_SHARDED, bf16)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_HEAD_SHARDED, fp16)

}  // namespace detail
}  // namespace dist
}  // namespace kattn
