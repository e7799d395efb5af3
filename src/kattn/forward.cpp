#include "kattn/forward.hpp"

#include "kattn/detail/backends.hpp"
#include "kattn/detail/launch.hpp"

namespace kattn {
namespace detail {

template <class ExecSpace, class T>
void forward_impl(const ExecSpace& space, const AttentionParams<T>& p, const Options& opt) {
  run_attention(space, p, opt, 1, "kattn::forward");
}

#define KATTN_INSTANTIATE_FORWARD(Space, T) \
  template void forward_impl<Space, T>(const Space&, const AttentionParams<T>&, const Options&);
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_FORWARD)

}  // namespace detail
}  // namespace kattn
