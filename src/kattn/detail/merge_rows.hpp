// The one merge of partial states, thread-level, used by every merge in kattn: the split-KV merge
// (merge_partials.hpp), the public merge and cascade (merge_states.hpp), and the MPI layer's fold
// of ring steps and key chunks (dist/fold_kernels.hpp). Built on the state algebra's merge and its
// o update (core/state.hpp), so the NaN rule is the textbook's everywhere. Parts are finished rows
// (o normalised, natural-log lse) merged in part order: the result depends on the parts and their
// order only, never on the schedule.
#pragma once

#include <Kokkos_Core.hpp>

#include "kattn/core/state.hpp"
#include "kattn/core/storage.hpp"

namespace kattn {
namespace detail {

// Thread-level (vector lanes over the head dim): folds parts 0 .. n_parts - 1, in order, into the
// running state st with its unnormalised o (head_dim values; not read while st is empty). part_o(s)
// points at part s's head_dim values (T, or 16-bit storage widened as read) and part_lse(s) is its lse. o may be part
// 0's o (read before written, element by element), never a later part's.
template <class Member, class T, class PartO, class PartLse>
KOKKOS_INLINE_FUNCTION void fold_parts(const Member& member, RowState<T>& st, T* o, int n_parts, int head_dim,
                                       const PartO& part_o, const PartLse& part_lse) {
  for (int s = 0; s < n_parts; ++s) {
    const auto* part = part_o(s);
    const Merge<T> mg = merge(st, from_lse(part_lse(s)));
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, head_dim),
                         [&](const int d) { o[d] = merged_o(mg, mg.a_seen ? o[d] : T(0), T(widen(part[d]))); });
    st = mg.state;
  }
}

// Thread-level: finishes the state into out (o / l, from o in place when out == o; narrowed when
// out is stored in 16 bits) and lse_out (may be null).
template <class Member, class T, class S>
KOKKOS_INLINE_FUNCTION void finish_row(const Member& member, const RowState<T>& st, const T* o, int head_dim, S* out,
                                       T* lse_out) {
  const Finish<T> fin = finish(st);
  const bool seen = !st.is_empty();
  Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, head_dim),
                       [&](const int d) { out[d] = narrow<S>(seen ? finished_o(o[d], fin) : T(0)); });
  Kokkos::single(Kokkos::PerThread(member), [&]() {
    if (lse_out) *lse_out = fin.lse;
  });
}

// Thread-level: out = merge of parts 0 .. n_parts - 1 (see fold_parts), lse_out may be null. The
// running o is kept in acc (head_dim values of the accumulation type: out itself, or, when out is
// stored in 16 bits, part 0's float o or a float scratch row, so that out is rounded once, at the end).
template <class Member, class T, class PartO, class PartLse, class S>
KOKKOS_INLINE_FUNCTION void merge_row(const Member& member, int n_parts, int head_dim, const PartO& part_o,
                                      const PartLse& part_lse, T* acc, S* out, T* lse_out) {
  RowState<T> st = RowState<T>::empty();
  fold_parts(member, st, acc, n_parts, head_dim, part_o, part_lse);
  finish_row(member, st, acc, head_dim, out, lse_out);
}

}  // namespace detail
}  // namespace kattn
