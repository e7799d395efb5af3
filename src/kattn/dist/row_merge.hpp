// Partial states of query rows meeting across ranks and chunks, on top of state.hpp's algebra
// (from_lse, merge, finish): the distributed code never re-derives it.
//
// A finished partial is (o normalised, lse natural log); seen as a state it is from_lse(lse) with
// o as its (l = 1) output. An accumulator is a state (m, l) with its unnormalised o.
#pragma once

#include <Kokkos_Core.hpp>

#include "kattn/state.hpp"

namespace kattn {
namespace dist {
namespace detail {

// Folds a finished partial into an accumulator (state `acc`, output o_acc):
//   o_acc[d] <- alpha_a o_acc[d] + alpha_b part[d]; returns the merged state.
// o_acc is not read while the accumulator is empty (alpha_a = 0), so it may hold anything then.
// Thread-level: the caller spreads d over vector lanes through `for_each_dim`.
template <class T>
KOKKOS_INLINE_FUNCTION Merge<T> fold_finished(const RowState<T>& acc, T part_lse) {
  return merge(acc, from_lse(part_lse));
}

template <class T>
KOKKOS_INLINE_FUNCTION T folded_value(const Merge<T>& mg, T acc, T part) {
  return (mg.alpha_a == T(0) ? T(0) : mg.alpha_a * acc) + mg.alpha_b * part;
}

// Merge of two finished rows into a finished row, in place on b: the reduction operator of
// distributed decode. A row is [lse, o_0 .. o_{D-1}].
template <class T>
KOKKOS_INLINE_FUNCTION void merge_finished_rows(const T* a, T* b, int D) {
  const Merge<T> mg = fold_finished(from_lse(a[0]), b[0]);
  const Finish<T> fin = finish(mg.state);
  for (int d = 0; d < D; ++d) b[1 + d] = folded_value(mg, a[1 + d], b[1 + d]) * fin.inv_l;
  b[0] = fin.lse;
}

}  // namespace detail
}  // namespace dist
}  // namespace kattn
