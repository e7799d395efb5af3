#include "kattn/merge.hpp"

#include "kattn/detail/backends.hpp"

namespace kattn {
namespace detail {

template <class ExecSpace, class P, class S>
void merge_impl(const ExecSpace& space, const MergeStates<ExecSpace, P, S>& m, std::int64_t rows) {
  compat::ScopedRegion region("kattn::merge");
  if (rows == 0 || m.heads == 0) return;
  Kokkos::TeamPolicy<ExecSpace> policy(space, static_cast<int>(rows), Kokkos::AUTO);
  if (m.scratch_per_thread() > 0) {
    KATTN_REQUIRE(static_cast<int>(m.scratch_per_thread()) <= policy.scratch_size_max(0), "o: a head dim of ",
                  m.head_dim, " needs ", m.scratch_per_thread(),
                  " bytes of team scratch for its float running o, more than the backend's ",
                  policy.scratch_size_max(0), "; merge into a float o and round it");
    policy.set_scratch_size(0, Kokkos::PerThread(static_cast<int>(m.scratch_per_thread())));
  }
  Kokkos::parallel_for("kattn::merge::rows", policy, m);
}

#define KATTN_INSTANTIATE_MERGE(Space, P, S) \
  template void merge_impl<Space, P, S>(const Space&, const MergeStates<Space, P, S>&, std::int64_t);
#define KATTN_INSTANTIATE_MERGE_SAME(Space, T) KATTN_INSTANTIATE_MERGE(Space, T, T)
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_MERGE_SAME)
// 16-bit output: parts in the same type, or float partials rounded once.
#define KATTN_INSTANTIATE_16BIT_MERGE(Space, S) \
  KATTN_INSTANTIATE_MERGE(Space, S, S)          \
  KATTN_INSTANTIATE_MERGE(Space, float, S)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_16BIT_MERGE, bf16)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_16BIT_MERGE, fp16)

}  // namespace detail
}  // namespace kattn
