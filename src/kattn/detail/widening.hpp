// The backward for 16-bit storage: q, k, v, o and dO widened into float copies, the float
// backward (fp32 accumulation throughout, FlashAttention's convention), and dq, dk, dv rounded
// once into the caller's 16-bit views. The copies cost O((Nq Hq + Nk Hkv) D) floats, checked
// against the memory space before they are made (taken from a Workspace when given); the O(N^2 D)
// work runs in float either way.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <string>
#include <type_traits>

#include "kattn/core/storage.hpp"
#include "kattn/detail/backward_nonfinite.hpp"
#include "kattn/detail/memory_check.hpp"
#include "kattn/workspace.hpp"

namespace kattn {
namespace detail {

template <class View>
constexpr bool is_16bit_view = is_16bit_v<typename View::non_const_value_type>;
template <class View, class... Views>
constexpr bool same_storage =
    (std::is_same_v<typename View::non_const_value_type, typename Views::non_const_value_type> && ...);

template <class ExecSpace, std::size_t Rank>
struct FloatCopy;
template <class ExecSpace>
struct FloatCopy<ExecSpace, 3> {
  using type = Kokkos::View<float***, Kokkos::LayoutRight, typename ExecSpace::memory_space>;
};
template <class ExecSpace>
struct FloatCopy<ExecSpace, 4> {
  using type = Kokkos::View<float****, Kokkos::LayoutRight, typename ExecSpace::memory_space>;
};

template <class ExecSpace>
class Widening {
 public:
  // owner names the copies' buffers ("<owner>::widened_q"); they come from ws when set, and are
  // this object's until it is destroyed: the views out() and in() return must not outlive it.
  explicit Widening(const ExecSpace& space, const char* owner = "kattn::backward", Workspace* ws = nullptr)
      : space_(space), owner_(owner), ws_(ws) {}

  // Refuses, naming the copies, when they do not fit: call with every view to be copied.
  template <class... Views>
  void require_fits(const Views&... views) const {
    std::uint64_t values = 0;
    ((values = saturating_add(values, views.size())), ...);
    require_memory<Mem>(ws_, saturating_mul(values, sizeof(float)),
                        "kattn::attention_backward: float copies of the 16-bit arrays",
                        concat(values, " values of 4 bytes (q, k, v, o, dout and the three gradients)"),
                        "run the backward on float arrays, or on fewer sequences at a time");
  }

  // Whether every value of the float copies is finite (one pass over each).
  template <class... Views>
  bool all_finite(const Views&... views) const {
    int bad = 0;
    ((bad += non_finite(views)), ...);
    return bad == 0;
  }

  // A float copy of v (rank 3 or 4, any layout, any storage type).
  template <class View>
  auto in(const View& v, const char* label) const {
    auto f = out(v, label);
    copy(v, f);
    return f;
  }
  // An uninitialised float view with v's extents.
  template <class View>
  auto out(const View& v, const char* label) const {
    using F = typename FloatCopy<ExecSpace, View::rank>::type;
    float* data = held_.take(ws_, space_, std::string(owner_) + "::widened_" + label, v.size());
    if constexpr (View::rank == 3)
      return F(data, v.extent(0), v.extent(1), v.extent(2));
    else
      return F(data, v.extent(0), v.extent(1), v.extent(2), v.extent(3));
  }
  // to = from, element by element, widened or narrowed (round to nearest even) to to's type.
  template <class From, class To>
  void copy(const From& from, const To& to) const {
    using S = typename To::non_const_value_type;
    static_assert(int(From::rank) == int(To::rank) && (From::rank == 3 || From::rank == 4),
                  "kattn: rank-3 or rank-4 views");
    if (from.size() == 0) return;
    if constexpr (From::rank == 3) {
      using Policy = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>, Kokkos::IndexType<std::int64_t>>;
      const std::int64_t e0 = from.extent(0), e1 = from.extent(1), e2 = from.extent(2);
      Kokkos::parallel_for(
          "kattn::widen_or_round", Policy(space_, {0, 0, 0}, {e0, e1, e2}),
          KOKKOS_LAMBDA(std::int64_t a, std::int64_t b, std::int64_t c) {
            to(a, b, c) = narrow<S>(widen(from(a, b, c)));
          });
    } else {
      using Policy = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<4>, Kokkos::IndexType<std::int64_t>>;
      const std::int64_t e0 = from.extent(0), e1 = from.extent(1), e2 = from.extent(2), e3 = from.extent(3);
      Kokkos::parallel_for(
          "kattn::widen_or_round", Policy(space_, {0, 0, 0, 0}, {e0, e1, e2, e3}),
          KOKKOS_LAMBDA(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d) {
            to(a, b, c, d) = narrow<S>(widen(from(a, b, c, d)));
          });
    }
  }

 private:
  template <class View>
  int non_finite(const View& v) const {
    const float* data = v.data();
    int bad = 0;
    Kokkos::parallel_reduce(
        "kattn::widened_finite", Kokkos::RangePolicy<ExecSpace, Kokkos::IndexType<std::int64_t>>(space_, 0, v.size()),
        KOKKOS_LAMBDA(std::int64_t n, int& sum) { sum += is_finite(data[n]) ? 0 : 1; }, bad);
    return bad;
  }

  using Mem = typename ExecSpace::memory_space;
  ExecSpace space_;
  const char* owner_;
  Workspace* ws_;
  mutable HeldBuffers<float, Mem> held_;  // the buffers of the views out() handed out
};

// The 16-bit backward: run(q, k, v, o, dout, dq, dk, dv, pair_products) (the float backward of the
// caller's kv kind) on float copies (from ws when set), the gradients rounded once into dq, dk, dv.
// pair_products: `pairs` (bf16 storage whose products are bf16 dot products) and q, k, v and dout
// all finite (the pairs' spans assume it; backward_key_pass.hpp). Returns what run returns.
template <class ExecSpace, class QView, class KView, class VView, class OView, class DoView, class DqView, class DkView,
          class DvView, class Run>
auto widened_backward(const ExecSpace& space, const QView& q, const KView& k, const VView& v, const OView& o,
                      const DoView& dout, const DqView& dq, const DkView& dk, const DvView& dv, Workspace* ws,
                      bool pairs, const Run& run) {
  static_assert(same_storage<QView, KView, VView, OView, DoView, DqView, DkView, DvView>,
                "kattn::attention_backward: q, k, v, o, dout, dq, dk and dv must have one 16-bit type");
  const Widening<ExecSpace> w(space, "kattn::backward", ws);
  w.require_fits(q, k, v, o, dout, dq, dk, dv);
  // One declaration each: dq and dk have different ranks for ragged and paged keys.
  const auto dqf = w.out(dq, "dq");
  const auto dkf = w.out(dk, "dk");
  const auto dvf = w.out(dv, "dv");
  const auto qf = w.in(q, "q");
  const auto kf = w.in(k, "k");
  const auto vf = w.in(v, "v");
  const auto df = w.in(dout, "dout");
  const auto info = run(qf, kf, vf, w.in(o, "o"), df, dqf, dkf, dvf, pairs && w.all_finite(qf, kf, vf, df));
  w.copy(dqf, dq), w.copy(dkf, dk), w.copy(dvf, dv);
  space.fence();  // the gradients are written on return (workspace copies are not freed, so nothing else waits)
  return info;
}

}  // namespace detail
}  // namespace kattn
