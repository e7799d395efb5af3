#include "kattn/dist/ulysses_backward.hpp"

#include "kattn/compat.hpp"
#include "kattn/detail/backends.hpp"
#include "kattn/dist/agreement.hpp"
#include "kattn/dist/clock.hpp"
#include "kattn/dist/head_sharded.hpp"
#include "kattn/dist/ulysses_local.hpp"

namespace kattn {
namespace dist {
namespace detail {

template <class ExecSpace, class T>
DistStats ulysses_backward_impl(MPI_Comm comm, const ExecSpace& space, const BackwardParams<T>& p, const Options& opt,
                                const DistOptions& d, const BackwardOptions& bopt) {
  compat::ScopedRegion area("kattn::dist");
  compat::ScopedRegion region("kattn::dist::ulysses_backward");
  const double t0 = now();
  const AttentionParams<T>& f = p.fwd;
  collective_agree(comm, problem_fields(DistCall::ulysses_attention_backward, f, opt, d));
  require_no_block_mask(opt);
  int P = 1;
  MPI_Comm_size(comm, &P);
  require_head_split(f.heads_q, P);
  require_whole_groups(f.heads_kv, P, d);
  require_transfers(d);
  const GlobalSplit split = sharded_split(comm, f.q_len, f.kv_len, d);
  DistStats stats;
  stats.staged = needs_staging<typename ExecSpace::memory_space>(d.staging);
  // The whole problem's shape in the type the backward computes in, for its planner.
  using Acc = accumulate_t<T>;
  AttentionParams<Acc> whole;
  whole.batch = f.batch, whole.heads_q = f.heads_q, whole.heads_kv = f.heads_kv, whole.head_dim = f.head_dim;
  whole.q_len = split.Nq, whole.kv_len = split.Nk;
  Options local = opt;
  local.progress = nullptr;  // DistOptions::progress reports the call's progress
  const BackwardOptions local_bopt = local_backward_options(space, whole, opt, d, bopt);
  FailureLatch latch(comm);
  head_sharded_backward<ExecSpace, T>(comm, space, p, split.q_layout, split.kv_layout, stats, latch, opt.workspace,
                                      [&](const BackwardParams<Acc>& b, DistStats& s) {
                                        latch.guard([&] {
                                          local_backward(space, b, local, local_bopt, s);
                                          if (d.progress) d.progress(1, 1);
                                        });
                                      });
  space.fence();
  latch.settle();
  stats.steps = 1;
  stats.seconds = now() - t0;
  return stats;
}

#define KATTN_INSTANTIATE_ULYSSES_BACKWARD(Space, T)                                                                   \
  template DistStats ulysses_backward_impl<Space, T>(MPI_Comm, const Space&, const BackwardParams<T>&, const Options&, \
                                                     const DistOptions&, const BackwardOptions&);
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_ULYSSES_BACKWARD)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_ULYSSES_BACKWARD, bf16)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_ULYSSES_BACKWARD, fp16)

}  // namespace detail
}  // namespace dist
}  // namespace kattn
