#include "kattn/dist/hybrid.hpp"

#include "kattn/compat.hpp"
#include "kattn/detail/backends.hpp"
#include "kattn/dist/agreement.hpp"
#include "kattn/dist/clock.hpp"
#include "kattn/dist/head_sharded.hpp"
#include "kattn/dist/ring.hpp"

namespace kattn {
namespace dist {
namespace detail {

template <class ExecSpace, class T>
DistStats hybrid_forward_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<T>& p, const Options& opt,
                              const DistOptions& d) {
  compat::ScopedRegion area("kattn::dist");
  compat::ScopedRegion region("kattn::dist::hybrid");
  const double t0 = now();
  std::vector<Agreed> fields = problem_fields(DistCall::hybrid_attention, p, opt, d);
  fields.push_back(Agreed::boolean("lse", "an LSE output", p.lse != nullptr));
  collective_agree(comm, fields);
  require_no_block_mask(opt);
  int P = 1;
  MPI_Comm_size(comm, &P);
  require_grid(P, p.heads_q, d);
  require_transfers(d);
  const GlobalSplit split = hybrid_split(comm, p.q_len, p.kv_len, d);
  const HybridGrid grid(comm, d);
  DistStats stats;
  stats.staged = needs_staging<typename ExecSpace::memory_space>(d.staging);
  // One latch for the whole grid: a failure in any ring group reaches every rank, and the rings
  // run through it (every group member enters every ring, skipping its compute after a failure).
  FailureLatch latch(comm);
  head_sharded_forward<ExecSpace, T>(
      grid.heads(), space, p, grid.group_layout(split.Nq), grid.group_layout(split.Nk), stats, latch,
      [&](const AttentionParams<T>& a, DistStats& s) {
        latch.capture([&] { accumulate(s, ring_forward_impl(grid.ring(), space, a, opt, d, &latch)); });
      });
  space.fence();
  latch.settle();
  stats.seconds = now() - t0;
  return stats;
}

#define KATTN_INSTANTIATE_HYBRID(Space, T)                                                                            \
  template DistStats hybrid_forward_impl<Space, T>(MPI_Comm, const Space&, const AttentionParams<T>&, const Options&, \
                                                   const DistOptions&);
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_HYBRID)

}  // namespace detail
}  // namespace dist
}  // namespace kattn
