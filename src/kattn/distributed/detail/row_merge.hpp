// The reduction operator of distributed decode on finished rows, on the state algebra's merge and
// o update (core/state.hpp): the distributed code never re-derives it, and follows its NaN rule.
// A row is [lse, o_0 .. o_{D-1}] (o normalised, natural-log lse).
#pragma once

#include "kattn/core/state.hpp"

namespace kattn {
namespace dist {
namespace detail {

// Merge of two finished rows into a finished row, in place on b (a holds the lower ranks' part).
template <class T>
KATTN_CORE_INLINE void merge_finished_rows(const T* a, T* b, int D) {
  const Merge<T> mg = merge(from_lse(a[0]), from_lse(b[0]));
  const Finish<T> fin = finish(mg.state);
  const bool seen = mg.a_seen || mg.b_seen;
  for (int d = 0; d < D; ++d) b[1 + d] = seen ? finished_o(merged_o(mg, a[1 + d], b[1 + d]), fin) : T(0);
  b[0] = fin.lse;
}

}  // namespace detail
}  // namespace dist
}  // namespace kattn
