#include "kattn/dist/hybrid_backward.hpp"

#include "kattn/compat.hpp"
#include "kattn/detail/backends.hpp"
#include "kattn/dist/agreement.hpp"
#include "kattn/dist/clock.hpp"
#include "kattn/dist/head_sharded.hpp"
#include "kattn/dist/ring_backward.hpp"

namespace kattn {
namespace dist {
namespace detail {

template <class ExecSpace, class T>
DistStats hybrid_backward_impl(MPI_Comm comm, const ExecSpace& space, const BackwardParams<T>& p, const Options& opt,
                               const DistOptions& d, const BackwardOptions& bopt) {
  compat::ScopedRegion area("kattn::dist");
  compat::ScopedRegion region("kattn::dist::hybrid_backward");
  const double t0 = now();
  const AttentionParams<T>& f = p.fwd;
  collective_agree(comm, problem_fields(DistCall::hybrid_attention_backward, f, opt, d));
  require_no_block_mask(opt);
  int P = 1;
  MPI_Comm_size(comm, &P);
  require_grid(P, f.heads_q, d);
  require_transfers(d);
  const GlobalSplit split = hybrid_split(comm, f.q_len, f.kv_len, d);
  const HybridGrid grid(comm, d);
  require_whole_groups(f.heads_kv, grid.members(), d);
  DistStats stats;
  stats.staged = needs_staging<typename ExecSpace::memory_space>(d.staging);
  // One latch for the whole grid, as in the forward.
  FailureLatch latch(comm);
  head_sharded_backward<ExecSpace, T>(
      grid.heads(), space, p, grid.group_layout(split.Nq), grid.group_layout(split.Nk), stats, latch, opt.workspace,
      [&](const BackwardParams<accumulate_t<T>>& b, DistStats& s) {
        latch.capture([&] { accumulate(s, ring_backward_impl(grid.ring(), space, b, opt, d, bopt, &latch)); });
      });
  space.fence();
  latch.settle();
  stats.seconds = now() - t0;
  return stats;
}

#define KATTN_INSTANTIATE_HYBRID_BACKWARD(Space, T)                                                                   \
  template DistStats hybrid_backward_impl<Space, T>(MPI_Comm, const Space&, const BackwardParams<T>&, const Options&, \
                                                    const DistOptions&, const BackwardOptions&);
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_HYBRID_BACKWARD)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_HYBRID_BACKWARD, bf16)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_HYBRID_BACKWARD, fp16)

}  // namespace detail
}  // namespace dist
}  // namespace kattn
