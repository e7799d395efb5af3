// The merge kernel of kattn::merge (merge.hpp): parts from up to two sources, strided, merged per
// row and head with merge_row (merge_rows.hpp).
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "kattn/detail/merge_rows.hpp"

namespace kattn {
namespace detail {

// `count` parts of one source: part s, row n, head h at o + s * o_part + n * o_row + h * o_head.
template <class T>
struct PartSource {
  const T* o = nullptr;
  const T* lse = nullptr;
  int count = 0;
  std::int64_t o_part = 0, o_row = 0, o_head = 0;
  std::int64_t lse_part = 0, lse_row = 0, lse_head = 0;
};

// One team per row; threads over heads, lanes over the head dim. Parts of `a`, then of `b`.
template <class ExecSpace, class T>
struct MergeStates {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  PartSource<T> a, b;
  T* o = nullptr;
  std::int64_t o_row = 0, o_head = 0;
  T* lse = nullptr;  // may be null
  std::int64_t lse_row = 0, lse_head = 0;
  int heads = 0, head_dim = 0;

  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    const std::int64_t n = member.league_rank();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, heads), [&](const int h) {
      const auto part = [&](int s) -> const PartSource<T>& { return s < a.count ? a : b; };
      const auto index = [&](int s) { return s < a.count ? s : s - a.count; };
      T* out = o + n * o_row + h * o_head;  // also the running o
      merge_row(
          member, a.count + b.count, head_dim,
          [&](int s) {
            const PartSource<T>& src = part(s);
            return src.o + index(s) * src.o_part + n * src.o_row + h * src.o_head;
          },
          [&](int s) {
            const PartSource<T>& src = part(s);
            return src.lse[index(s) * src.lse_part + n * src.lse_row + h * src.lse_head];
          },
          out, out, lse ? lse + n * lse_row + h * lse_head : nullptr);
    });
  }
};

}  // namespace detail
}  // namespace kattn
