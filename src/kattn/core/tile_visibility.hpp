// Which rows of a query tile and which keys of a key tile see each other: on the tiles a window
// cuts (the causal diagonal, a window's edges) the kernels compute only those parts of their
// products; the mask sets the rest to -inf (P = 0), so the results are the same bits. Written once
// for the forward and the backward. No Kokkos here.
#pragma once

#include <cstdint>

#include "kattn/core/host_device.hpp"
#include "kattn/core/key_window.hpp"

namespace kattn {

// Rows are the (position, head) pairs of a GQA group, position-major: row r of the query tile is
// query position (t0 + r) / G; rows from n_rows on are padding and see no key.
struct TileVisibility {
  KeyWindow window;
  std::int64_t t0 = 0;  // the query tile's first row
  int G = 1;            // rows per query position
  int n_rows = 0;
  std::int64_t kb = 0;  // the key tile's first key
  int n_keys = 0;
  std::int64_t q_len = 0, kv_len = 0;

  // Whether every row sees every key of the tile (then nothing is masked or skipped).
  KATTN_CORE_INLINE bool whole() const {
    return window.rows_see_whole_tile(t0 / G, (t0 + n_rows - 1) / G, kb, n_keys, q_len, kv_len);
  }
  // The keys [lo, hi) of the tile that rows [r0, r1) may see (a superset); false when none.
  KATTN_CORE_INLINE bool keys_of_rows(int r0, int r1, int& lo, int& hi) const {
    r1 = r1 < n_rows ? r1 : n_rows;
    lo = hi = 0;
    if (r0 < r1) window.tile_keys_of_rows((t0 + r0) / G, (t0 + r1 - 1) / G, kb, n_keys, q_len, kv_len, lo, hi);
    return lo < hi;
  }
  // Whether some row of [r0, r1) may see some key of [j0, j1) (a block of a product to compute).
  KATTN_CORE_INLINE bool sees(int r0, int r1, int j0, int j1) const {
    int lo = 0, hi = 0;
    return keys_of_rows(r0, r1, lo, hi) && j0 < hi && j1 > lo;
  }
  // The rows [lo, hi) that see some key of [j0, j1) of the tile (a superset); false when none.
  KATTN_CORE_INLINE bool rows_of_keys(int j0, int j1, int& lo, int& hi) const {
    j1 = j1 < n_keys ? j1 : n_keys;
    lo = hi = 0;
    if (j0 >= j1) return false;
    const std::int64_t first = window.first_query(kb + j0, q_len, kv_len) * G - t0;
    const std::int64_t last = (window.last_query(kb + j1 - 1, q_len, kv_len) + 1) * G - t0;
    lo = static_cast<int>(first < 0 ? 0 : (first < n_rows ? first : n_rows));
    hi = static_cast<int>(last < lo ? lo : (last < n_rows ? last : n_rows));
    return lo < hi;
  }
};

}  // namespace kattn
