#include "kattn/dist/ulysses.hpp"

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
DistStats ulysses_forward_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<T>& p, const Options& opt,
                               const DistOptions& d) {
  compat::ScopedRegion area("kattn::dist");
  compat::ScopedRegion region("kattn::dist::ulysses");
  const double t0 = now();
  std::vector<Agreed> fields = problem_fields(DistCall::ulysses_attention, p, opt, d);
  fields.push_back(Agreed::boolean("lse", "an LSE output", p.lse != nullptr));
  collective_agree(comm, fields);
  require_no_block_mask(opt);
  int P = 1;
  MPI_Comm_size(comm, &P);
  require_head_split(p.heads_q, P);
  require_transfers(d);
  const GlobalSplit split = sharded_split(comm, p.q_len, p.kv_len, d);
  DistStats stats;
  stats.staged = needs_staging<typename ExecSpace::memory_space>(d.staging);
  const Options local = local_options<ExecSpace, T>(space, p.head_dim, split.Nq * p.group_size(), opt, d);
  FailureLatch latch(comm);
  head_sharded_forward<ExecSpace, T>(comm, space, p, split.q_layout, split.kv_layout, stats, latch, opt.workspace,
                                     [&](const AttentionParams<T>& a, DistStats& s) {
                                       latch.guard([&] {
                                         local_forward(space, a, local, s);
                                         if (d.progress) d.progress(1, 1);
                                       });
                                     });
  space.fence();
  latch.settle();
  stats.steps = 1;
  stats.seconds = now() - t0;
  return stats;
}

#define KATTN_INSTANTIATE_ULYSSES(Space, T)                                                                            \
  template DistStats ulysses_forward_impl<Space, T>(MPI_Comm, const Space&, const AttentionParams<T>&, const Options&, \
                                                    const DistOptions&);
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_ULYSSES)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_ULYSSES, bf16)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_ULYSSES, fp16)

}  // namespace detail
}  // namespace dist
}  // namespace kattn
