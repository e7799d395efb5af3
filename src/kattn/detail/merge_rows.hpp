// The merge of finished partial rows (o normalised, natural-log lse) into one, in part order, with
// the one merge of the state algebra (state.hpp: from_lse, merge, finish). Shared by the split-KV
// merge (merge_partials.hpp) and the public merge (merge.hpp, cascade.hpp). Fixed order: the result
// depends on the parts and their order only, never on the schedule.
#pragma once

#include <Kokkos_Core.hpp>

#include "kattn/state.hpp"

namespace kattn {
namespace detail {

// Thread-level (vector lanes over the head dim): out = merge of parts 0 .. n_parts - 1, where
// part_o(s) points at part s's head_dim values and part_lse(s) is its lse; lse_out may be null.
// out may be part 0's o (read before written, element by element), never a later part's.
template <class Member, class T, class PartO, class PartLse>
KOKKOS_INLINE_FUNCTION void merge_row(const Member& member, int n_parts, int head_dim, const PartO& part_o,
                                      const PartLse& part_lse, T* out, T* lse_out) {
  RowState<T> st = RowState<T>::empty();
  for (int s = 0; s < n_parts; ++s) {
    const T* part = part_o(s);
    const Merge<T> mg = merge(st, from_lse(part_lse(s)));
    // While st is empty nothing has been merged yet: out holds no value to keep (never read it).
    // Once it is not, out is kept even when alpha_a underflows to 0, so that a NaN in it (a NaN
    // value under a zero weight) stays NaN as in the textbook algorithm.
    const bool fresh = s == 0 || st.is_empty();
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, head_dim), [&](const int d) {
      const T prev = fresh ? T(0) : out[d];
      out[d] = mg.alpha_a * prev + mg.alpha_b * part[d];
    });
    st = mg.state;
  }
  const Finish<T> fin = finish(st);
  Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, head_dim), [&](const int d) {
    out[d] = n_parts > 0 ? out[d] * fin.inv_l : T(0);
  });
  Kokkos::single(Kokkos::PerThread(member), [&]() {
    if (lse_out) *lse_out = fin.lse;
  });
}

}  // namespace detail
}  // namespace kattn
