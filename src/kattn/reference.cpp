#include "kattn/reference.hpp"

#include <cmath>
#include <cstdint>
#include <string>

#include "kattn/compat.hpp"
#include "kattn/detail/backends.hpp"
#include "kattn/detail/memory_check.hpp"
#include "kattn/detail/score_matrix.hpp"
#include "kattn/detail/alibi.hpp"
#include "kattn/detail/score_bias_check.hpp"
#include "kattn/detail/sinks.hpp"
#include "kattn/detail/textbook_softmax.hpp"
#include "kattn/core/score_scaling.hpp"
#include "kattn/core/key_window.hpp"
#include "kattn/core/state.hpp"

namespace kattn {
namespace detail {
namespace {

template <class ExecSpace, class T>
struct WeightedValues {
  AttentionParams<T> p;
  ScoreMatrix<ExecSpace, T> s;
  KeyWindow window;

  KOKKOS_INLINE_FUNCTION void operator()(const int b, const int h, const std::int64_t i, const int d) const {
    const std::int64_t q_len = p.seq_q_len(b), kv_len = p.seq_kv_len(b);
    if (i >= q_len) return;
    T acc = 0;
    for (std::int64_t j = 0; j < kv_len; ++j)
      if (window.visible(i, j, q_len, kv_len)) acc += s(b, h, i, j) * p.v_ptr(b, j, h / p.group_size())[d];
    p.o_ptr(b, i, h)[d] = acc;
  }
};

}  // namespace

template <class ExecSpace, class T>
void reference_impl(const ExecSpace& space, const AttentionParams<T>& p, const Options& opt) {
  compat::ScopedRegion region("kattn::reference");
  if (p.batch == 0 || p.q_len == 0) return;
  require_memory<typename ExecSpace::memory_space>(
      saturating_mul(saturating_mul(saturating_mul(p.batch, p.heads_q), saturating_mul(p.q_len, p.kv_len)), sizeof(T)),
      "kattn::reference: the score matrix S (P in place)",
      concat(p.batch, " sequences x ", p.heads_q, " heads x ", p.q_len, " queries x ", p.kv_len, " keys x ", sizeof(T),
             " bytes"),
      "use the tiled algorithm (kattn::attention, kattn run --algo flash) or fewer sequences");
  using Rank3 = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>, Kokkos::IndexType<std::int64_t>>;
  using Rank4 = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<4>, Kokkos::IndexType<std::int64_t>>;
  ScoreMatrix<ExecSpace, T> s(space, "kattn::reference::S", p.batch, p.heads_q, p.q_len, p.kv_len);
  const KeyWindow window = KeyWindow::from(opt);
  const T scale = static_cast<T>(ScoreScaling::make(p.head_dim, opt.scale, opt.softcap).scale);
  require_alibi(opt, p.heads_q);
  require_bias(opt, p);
  const auto alibi = per_head_values<T>(space, opt.alibi_slopes, 1.0, "kattn::reference::alibi_slopes");
  if (p.kv_len > 0) {
    Kokkos::parallel_for("kattn::reference::scores", Rank4(space, {0, 0, 0, 0}, {p.batch, p.heads_q, p.q_len, p.kv_len}),
                         TextbookScores<ExecSpace, T>{p, s, window, scale, static_cast<T>(opt.softcap),
                                                      opt.alibi_slopes.empty() ? nullptr : alibi.data(), opt.bias});
  }
  require_sinks(opt, p.heads_q);
  const auto sinks = device_sinks<T>(space, opt.sinks, 1.0);
  Kokkos::parallel_for("kattn::reference::softmax", Rank3(space, {0, 0, 0}, {p.batch, p.heads_q, p.q_len}),
                       TextbookSoftmax<ExecSpace, T>{p, s, window, opt.sinks.empty() ? nullptr : sinks.data()});
  Kokkos::parallel_for("kattn::reference::pv", Rank4(space, {0, 0, 0, 0}, {p.batch, p.heads_q, p.q_len, p.head_dim}),
                       WeightedValues<ExecSpace, T>{p, s, window});
  compat::fence(space, "kattn::reference: S is freed on return");
}

#define KATTN_INSTANTIATE_REFERENCE(Space, T) \
  template void reference_impl<Space, T>(const Space&, const AttentionParams<T>&, const Options&);
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_REFERENCE)

}  // namespace detail
}  // namespace kattn
