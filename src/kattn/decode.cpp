#include "kattn/decode.hpp"

#include "kattn/detail/backends.hpp"
#include "kattn/detail/launch.hpp"

namespace kattn {
namespace detail {

template <class ExecSpace, class T>
SplitPlan splitkv_impl(const ExecSpace& space, const AttentionParams<T>& p, const Options& opt,
                       const BatchLengths& lengths) {
  if (p.batch == 0 || p.q_len == 0 || p.heads_q == 0) return SplitPlan{};
  const SplitPlan plan = plan_splits(space, p, opt, lengths);
  run_attention(space, p, opt, SplitSpec{plan.splits, plan.chunk}, "kattn::splitkv");
  return plan;
}

#define KATTN_INSTANTIATE_SPLITKV(Space, T)                                                           \
  template SplitPlan splitkv_impl<Space, T>(const Space&, const AttentionParams<T>&, const Options&, \
                                            const BatchLengths&);
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_SPLITKV)

}  // namespace detail
}  // namespace kattn
