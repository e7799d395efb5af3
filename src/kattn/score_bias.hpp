// kattn::score_bias(view): the Options::bias of a rank-4 view [B or 1, Hq or 1, Nq, Nk] of float,
// double, kattn::bf16, kattn::fp16 or bool whose last dim (the keys) is contiguous; any layout and
// strides otherwise (a broadcast dim of extent 1 may have any stride). The view is not copied: it
// must outlive the calls that use it, in memory their execution space can read.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <type_traits>

#include "kattn/core/score_bias.hpp"
#include "kattn/errors.hpp"

namespace kattn {

template <class View>
ScoreBias score_bias(const View& v) {
  using B = std::remove_const_t<typename View::value_type>;
  static_assert(View::rank == 4, "kattn::score_bias: a rank-4 view [B or 1, Hq or 1, Nq, Nk]");
  static_assert(bias_element_v<B>, "kattn::score_bias: a view of float, double, kattn::bf16, kattn::fp16 or bool");
  KATTN_REQUIRE(v.extent(3) <= 1 || v.stride(3) == 1, "bias: expected contiguous keys (stride 1 along dim 3), got ",
                v.stride(3));
  ScoreBias s;
  s.data = v.data();
  s.type = bias_type_of<B>();
  s.batch = std::int64_t(v.extent(0)), s.heads = std::int64_t(v.extent(1));
  s.q_len = std::int64_t(v.extent(2)), s.kv_len = std::int64_t(v.extent(3));
  s.stride_batch = std::int64_t(v.stride(0)), s.stride_head = std::int64_t(v.stride(1));
  s.stride_q = std::int64_t(v.stride(2));
  return s;
}

}  // namespace kattn
