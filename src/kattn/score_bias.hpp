// kattn::score_bias(view): the Options::bias of a rank-4 view [B or 1, Hq or 1, Nq, Nk] of float,
// double, kattn::bf16, kattn::fp16 or bool whose last dim (the keys) is contiguous; any layout and
// strides otherwise (a broadcast dim of extent 1 may have any stride). The view is not copied: it
// must outlive the calls that use it, in memory their execution space can read.
// kattn::score_bias_gradient(view): where the backward writes the bias's gradient.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <type_traits>

#include "kattn/core/score_bias.hpp"
#include "kattn/errors.hpp"

namespace kattn {

namespace detail {

template <class Bias, class View>
Bias bias_of_view(const View& v, const char* name) {
  using B = std::remove_const_t<typename View::value_type>;
  KATTN_REQUIRE(v.extent(3) <= 1 || v.stride(3) == 1, name, ": expected contiguous keys (stride 1 along dim 3), got ",
                v.stride(3));
  Bias s;
  s.data = v.data();
  s.type = bias_type_of<B>();
  s.batch = std::int64_t(v.extent(0)), s.heads = std::int64_t(v.extent(1));
  s.q_len = std::int64_t(v.extent(2)), s.kv_len = std::int64_t(v.extent(3));
  s.stride_batch = std::int64_t(v.stride(0)), s.stride_head = std::int64_t(v.stride(1));
  s.stride_q = std::int64_t(v.stride(2));
  return s;
}

}  // namespace detail

template <class View>
ScoreBias score_bias(const View& v) {
  using B = std::remove_const_t<typename View::value_type>;
  static_assert(View::rank == 4, "kattn::score_bias: a rank-4 view [B or 1, Hq or 1, Nq, Nk]");
  static_assert(bias_element_v<B>, "kattn::score_bias: a view of float, double, kattn::bf16, kattn::fp16 or bool");
  return detail::bias_of_view<ScoreBias>(v, "bias");
}

// kattn::score_bias_gradient(view): the BackwardOptions::dbias of a writable rank-4 view of the
// bias's shape, of float, double, kattn::bf16 or kattn::fp16, keys contiguous. Every element is
// written (0 where no query sees the key).
template <class View>
ScoreBiasGradient score_bias_gradient(const View& v) {
  using B = typename View::value_type;
  static_assert(View::rank == 4, "kattn::score_bias_gradient: a rank-4 view [B or 1, Hq or 1, Nq, Nk]");
  static_assert(bias_element_v<B> && !std::is_same_v<B, bool>,
                "kattn::score_bias_gradient: a writable view of float, double, kattn::bf16 or kattn::fp16");
  return detail::bias_of_view<ScoreBiasGradient>(v, "dbias");
}

}  // namespace kattn
