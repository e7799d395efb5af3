// O += P V for a masked tile whose V holds a NaN or an Inf. The tile products multiply every
// key's V row by its weight, and a masked key's weight is 0, but 0 * NaN and 0 * Inf are NaN:
// a non-finite value of a key that a row does not see would reach that row, where the textbook
// algorithm never reads it (NaN policy: README, "Hardening"). Such tiles (rare: only tiles that
// some row sees in part, and only with non-finite values) take this exact path, which sums over
// the keys each row sees; every other tile keeps the tile product.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "kattn/core/key_window.hpp"
#include "kattn/core/state.hpp"
#include "kattn/core/storage.hpp"

namespace kattn {
namespace detail {

// Team-level: whether the first `dims` values of V rows 0 .. n_keys - 1 are all finite
// (v_row(j) points at row j). The result is the same on every thread of the team.
template <class Member, class T, class VRow>
KOKKOS_INLINE_FUNCTION bool values_finite(const Member& member, int n_keys, int dims, const VRow& v_row) {
  int bad = 0;
  Kokkos::parallel_reduce(
      Kokkos::TeamThreadRange(member, n_keys),
      [&](const int j, int& count) {
        const auto* v = v_row(j);
        for (int d = 0; d < dims; ++d) {
          const T x = widen(v[d]);
          count += (x - x != T(0));  // NaN and +-Inf: x - x is NaN
        }
      },
      bad);
  return bad == 0;
}

// Team-level: o(r, d) = alpha[r] o(r, d) + sum over the keys j that row r sees of p(r, j) v_row(j)[d],
// for rows 0 .. rows - 1 and dims 0 .. dims - 1. keys_of(r, begin, end) gives row r's window of
// keys, and listed(r, j) whether the block mask (if any) lets it see key j of that window.
template <class Member, class T, class KeysOf, class Listed, class P, class VRow, class O>
KOKKOS_INLINE_FUNCTION void masked_values(const Member& member, int rows, int dims, const KeysOf& keys_of,
                                          const Listed& listed, const P& p, const VRow& v_row, const O& o,
                                          const T* alpha) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, rows), [&](const int r) {
    int begin = 0, end = 0;
    keys_of(r, begin, end);
    Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, dims), [&](const int d) {
      T acc = rescaled_o(o(r, d), alpha[r]);
      for (int j = begin; j < end; ++j)
        if (listed(r, j)) acc += p(r, j) * T(widen(v_row(j)[d]));
      o(r, d) = acc;
    });
  });
}

}  // namespace detail
}  // namespace kattn
