#include "kattn/merge.hpp"

#include "kattn/detail/backends.hpp"

namespace kattn {
namespace detail {

template <class ExecSpace, class T>
void merge_impl(const ExecSpace& space, const MergeStates<ExecSpace, T>& m, std::int64_t rows) {
  compat::ScopedRegion region("kattn::merge");
  if (rows == 0 || m.heads == 0) return;
  Kokkos::parallel_for("kattn::merge::rows", Kokkos::TeamPolicy<ExecSpace>(space, static_cast<int>(rows), Kokkos::AUTO),
                       m);
}

#define KATTN_INSTANTIATE_MERGE(Space, T) \
  template void merge_impl<Space, T>(const Space&, const MergeStates<Space, T>&, std::int64_t);
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_MERGE)

}  // namespace detail
}  // namespace kattn
