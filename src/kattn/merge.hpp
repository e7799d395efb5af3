// Merge of partial attention results from any source (FlashInfer's merge_state / merge_states):
// attention of the same queries over disjoint sets of keys, each part finished as (o, lse), is
// merged into the attention over the union, exactly, with the one merge of the state algebra
// (state.hpp). A part whose lse is -inf saw no key and has no weight; a row whose every part saw
// no key gets o = 0, lse = -inf. Parts are merged in the order given, so the result never depends
// on the schedule. This is the merge of split-KV, cascade attention and distributed decode.
//
// Layout: o [N, H, D], lse [N, H] (rows x heads, natural log), as a ragged batch's outputs
// (ragged.hpp); any layout with a contiguous head dim.
//
// Storage (docs/storage.md): o in float, double, bf16 or fp16, every lse in its accumulation type
// (float for 16-bit o); the parts' o in o's type or in that accumulation type (float partials
// merged into a 16-bit o). The merge runs in the accumulation type and rounds o once.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <type_traits>

#include "kattn/compat.hpp"
#include "kattn/detail/attention_impl.hpp"
#include "kattn/detail/merge_states.hpp"
#include "kattn/detail/shapes.hpp"
#include "kattn/errors.hpp"

namespace kattn {
namespace detail {

template <class View>
bool wanted(const View& v) {
  return v.size() > 0 || v.data() != nullptr;
}

// The storage rule of a merge into o of type S: lse views of S's accumulation type, parts' o of S
// or of that accumulation type (all parts of one type P).
template <class S, class P, class... LseViews>
constexpr void check_merge_types() {
  using Acc = accumulate_t<S>;
  static_assert(std::is_same<S, float>::value || std::is_same<S, double>::value || is_16bit_v<S>,
                "kattn::merge: o must hold float, double, kattn::bf16 or kattn::fp16");
  static_assert(std::is_same<P, S>::value || std::is_same<P, Acc>::value,
                "kattn::merge: the parts' o must have o's scalar type or its accumulation type (float for 16-bit o)");
  static_assert((std::is_same<typename LseViews::non_const_value_type, Acc>::value && ...),
                "kattn::merge: every lse must have the accumulation type of o (float for 16-bit o)");
}

// Checks the output pair o [N, H, D], lse [N, H] (or empty) and fills the functor's output side.
template <class ExecSpace, class P, class S, class OView, class LseView>
void merge_outputs(MergeStates<ExecSpace, P, S>& m, const OView& o, const LseView& lse) {
  static_assert(OView::rank == 3 && LseView::rank == 2,
                "kattn::merge: o must be [rows, heads, dim], lse [rows, heads]");
  require_contiguous_dim(o, "o");
  KATTN_REQUIRE(o.extent(1) <= INT32_MAX && o.extent(2) <= INT32_MAX, "o: heads and head dim must fit in 32 bits");
  if (wanted(lse)) {
    require_extent(lse, "lse", 0, "rows", o.extent(0), "o");
    require_extent(lse, "lse", 1, "heads", o.extent(1), "o");
    m.lse = lse.data();
    m.lse_row = lse.stride(0);
    m.lse_head = lse.stride(1);
  }
  m.o = o.data();
  m.o_row = o.stride(0);
  m.o_head = o.stride(1);
  m.heads = static_cast<int>(o.extent(1));
  m.head_dim = static_cast<int>(o.extent(2));
}

// Instantiated for (P, S) = (float, float), (double, double), (bf16, bf16), (fp16, fp16), (float, bf16)
// and (float, fp16).
template <class ExecSpace, class P, class S>
void merge_impl(const ExecSpace& space, const MergeStates<ExecSpace, P, S>& m, std::int64_t rows);

template <class ExecSpace, class P, class S>
void launch_merge(const ExecSpace& space, const MergeStates<ExecSpace, P, S>& m, std::int64_t rows) {
  KATTN_REQUIRE(rows <= INT32_MAX, "o: more rows than a league holds (2^31 - 1): ", rows);
  merge_impl(space, m, rows);
}

}  // namespace detail

// (o, lse) = the merge of part a (o_a, lse_a) and part b (o_b, lse_b), each the attention of the
// same queries over disjoint key sets. o_a, o_b, o [N, H, D]; lse_a, lse_b [N, H]; lse [N, H] or
// an empty view (not wanted). o may be o_a and lse may be lse_a (merge in place into a); o must
// not be o_b. Asynchronous like every kattn kernel.
template <class ExecSpace, class OAView, class LAView, class OBView, class LBView, class OView, class LseView>
void merge(const ExecSpace& space, const OAView& o_a, const LAView& lse_a, const OBView& o_b, const LBView& lse_b,
           const OView& o, const LseView& lse) {
  using S = typename OView::non_const_value_type;
  using P = typename OAView::non_const_value_type;
  static_assert(detail::accessible_from<ExecSpace, OAView, LAView, OBView, LBView, OView, LseView>(),
                "kattn::merge: the views must be accessible from the execution space");
  static_assert(OAView::rank == 3 && OBView::rank == 3 && LAView::rank == 2 && LBView::rank == 2,
                "kattn::merge: o_a and o_b must be [rows, heads, dim], lse_a and lse_b [rows, heads]");
  static_assert(std::is_same<typename OBView::non_const_value_type, P>::value,
                "kattn::merge: o_a and o_b must have the same scalar type");
  detail::check_merge_types<S, P, LAView, LBView, LseView>();
  detail::MergeStates<ExecSpace, P, S> m;
  detail::merge_outputs(m, o, lse);
  const auto source = [&](const auto& ov, const auto& lv, const char* on, const char* ln) {
    for (int d = 0; d < 3; ++d)
      detail::require_extent(ov, on, d, d == 0 ? "rows" : d == 1 ? "heads" : "head dim", o.extent(d), "o");
    detail::require_extent(lv, ln, 0, "rows", o.extent(0), "o");
    detail::require_extent(lv, ln, 1, "heads", o.extent(1), "o");
    detail::require_contiguous_dim(ov, on);
    detail::PartSource<P, accumulate_t<S>> src;
    src.o = ov.data();
    src.lse = lv.data();
    src.count = 1;
    src.o_row = ov.stride(0);
    src.o_head = ov.stride(1);
    src.lse_row = lv.stride(0);
    src.lse_head = lv.stride(1);
    return src;
  };
  m.a = source(o_a, lse_a, "o_a", "lse_a");
  m.b = source(o_b, lse_b, "o_b", "lse_b");
  KATTN_REQUIRE(o.extent(0) == 0 || static_cast<const void*>(o.data()) != static_cast<const void*>(o_b.data()),
                "o: must not be o_b (o may be o_a, merged in place)");
  detail::launch_merge(space, m, static_cast<std::int64_t>(o.extent(0)));
}

// (o, lse) = the merge of S parts in part order: o_parts [S, N, H, D], lse_parts [S, N, H];
// o [N, H, D], lse [N, H] or an empty view. S = 0 gives o = 0, lse = -inf.
template <class ExecSpace, class OPartsView, class LPartsView, class OView, class LseView>
void merge(const ExecSpace& space, const OPartsView& o_parts, const LPartsView& lse_parts, const OView& o,
           const LseView& lse) {
  using S = typename OView::non_const_value_type;
  using P = typename OPartsView::non_const_value_type;
  static_assert(detail::accessible_from<ExecSpace, OPartsView, LPartsView, OView, LseView>(),
                "kattn::merge: the views must be accessible from the execution space");
  static_assert(OPartsView::rank == 4 && LPartsView::rank == 3,
                "kattn::merge: o_parts must be [parts, rows, heads, dim], lse_parts [parts, rows, heads]");
  detail::check_merge_types<S, P, LPartsView, LseView>();
  detail::MergeStates<ExecSpace, P, S> m;
  detail::merge_outputs(m, o, lse);
  for (int d = 0; d < 3; ++d)
    detail::require_extent(o_parts, "o_parts", d + 1,
                           d == 0   ? "rows"
                           : d == 1 ? "heads"
                                    : "head dim",
                           o.extent(d), "o");
  detail::require_extent(lse_parts, "lse_parts", 0, "parts", o_parts.extent(0), "o_parts");
  detail::require_extent(lse_parts, "lse_parts", 1, "rows", o.extent(0), "o");
  detail::require_extent(lse_parts, "lse_parts", 2, "heads", o.extent(1), "o");
  detail::require_contiguous_dim(o_parts, "o_parts");
  KATTN_REQUIRE(o_parts.extent(0) <= INT32_MAX, "o_parts: more parts than fit in 32 bits: ", o_parts.extent(0));
  m.a.o = o_parts.data();
  m.a.lse = lse_parts.data();
  m.a.count = static_cast<int>(o_parts.extent(0));
  m.a.o_part = o_parts.stride(0);
  m.a.o_row = o_parts.stride(1);
  m.a.o_head = o_parts.stride(2);
  m.a.lse_part = lse_parts.stride(0);
  m.a.lse_row = lse_parts.stride(1);
  m.a.lse_head = lse_parts.stride(2);
  detail::launch_merge(space, m, static_cast<std::int64_t>(o.extent(0)));
}

}  // namespace kattn
