// The kernels' view of a block mask (block_mask.hpp): raw pointers to its BSR arrays in memory the
// execution space reads, and the questions a tile asks of it. A tile's rows are (position, head)
// pairs of one GQA group, position-major, so its rows touch the mask rows (head, query block) for
// query blocks i_first / B .. i_last / B and the group's heads (one head when shared); the tile
// asks the union of those rows. Inactive (indptr null): every block is listed.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

namespace kattn {
namespace detail {

struct BlockSparse {
  const std::int64_t* indptr = nullptr;   // [heads * q_blocks + 1]
  const std::int64_t* indices = nullptr;  // sorted key blocks of each (head, query block)
  int heads = 1;                          // 1: shared by every query head
  std::int64_t q_blocks = 0, k_blocks = 0;
  std::int64_t block = 1;

  KOKKOS_INLINE_FUNCTION bool active() const { return indptr != nullptr; }

  // First listed key block >= c of mask row (h, r), or k_blocks.
  KOKKOS_INLINE_FUNCTION std::int64_t next_block(int h, std::int64_t r, std::int64_t c) const {
    const std::int64_t row = (heads == 1 ? 0 : h) * q_blocks + r;
    std::int64_t lo = indptr[row], hi = indptr[row + 1];
    const std::int64_t end = hi;
    while (lo < hi) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      if (indices[mid] < c)
        lo = mid + 1;
      else
        hi = mid;
    }
    return lo < end ? indices[lo] : k_blocks;
  }
  KOKKOS_INLINE_FUNCTION bool listed(int h, std::int64_t r, std::int64_t c) const { return next_block(h, r, c) == c; }

  // The mask rows a tile's rows touch: heads h0 .. h1 (query heads), query blocks r0 .. r1.
  struct Rows {
    int h0 = 0, h1 = 0;
    std::int64_t r0 = 0, r1 = -1;
  };
  // Rows t0 .. t0 + n_rows - 1 of KV head hk with group G (row t: position t / G, head hk G + t % G).
  KOKKOS_INLINE_FUNCTION Rows rows_of(int hk, int G, std::int64_t t0, int n_rows) const {
    Rows m;
    if (heads == 1) {
      m.h0 = m.h1 = 0;
    } else if (n_rows >= G) {
      m.h0 = hk * G;
      m.h1 = hk * G + G - 1;
    } else {  // fewer rows than the group: the heads they hold (may wrap to the next position)
      const int a = static_cast<int>(t0 % G), z = static_cast<int>((t0 + n_rows - 1) % G);
      m.h0 = hk * G + (a <= z ? a : 0);
      m.h1 = hk * G + (a <= z ? z : G - 1);
    }
    m.r0 = (t0 / G) / block;
    m.r1 = ((t0 + n_rows - 1) / G) / block;
    return m;
  }

  // The rows of KV heads hk .. hk + heads - 1 (one team of the row tiles): a superset of each
  // head's rows, which is all the tile tests need (a tile is skipped only if none of them lists it).
  KOKKOS_INLINE_FUNCTION Rows rows_of_heads(int hk, int heads, int G, std::int64_t t0, int n_rows) const {
    Rows m = rows_of(hk, G, t0, n_rows);
    if (heads > 1) m.h1 = rows_of(hk + heads - 1, G, t0, n_rows).h1;
    return m;
  }

  // The first key >= j in a block that some of the rows list (j itself when its block is listed),
  // or a value past every key.
  KOKKOS_INLINE_FUNCTION std::int64_t next_key(const Rows& m, std::int64_t j) const {
    const std::int64_t c = j / block;
    std::int64_t best = k_blocks;
    for (int h = m.h0; h <= m.h1; ++h)
      for (std::int64_t r = m.r0; r <= m.r1; ++r) {
        const std::int64_t n = next_block(h, r, c);
        best = n < best ? n : best;
      }
    if (best == c) return j;
    return best * block;
  }

  // Whether every one of the rows lists every key block of keys [kb, ke] (no element masking needed).
  KOKKOS_INLINE_FUNCTION bool all_listed(const Rows& m, std::int64_t kb, std::int64_t ke) const {
    for (std::int64_t c = kb / block; c <= ke / block; ++c)
      for (int h = m.h0; h <= m.h1; ++h)
        for (std::int64_t r = m.r0; r <= m.r1; ++r)
          if (!listed(h, r, c)) return false;
    return true;
  }

  // Whether some of the rows list some key block of keys [kb, ke].
  KOKKOS_INLINE_FUNCTION bool any_listed(const Rows& m, std::int64_t kb, std::int64_t ke) const {
    return next_key(m, kb) <= ke;
  }

  // Calls f(begin, end) for each run [begin, end) of tile keys (offsets from kb, within n_keys)
  // that query position i of head h does not see through the mask.
  template <class F>
  KOKKOS_INLINE_FUNCTION void for_unlisted(int h, std::int64_t i, std::int64_t kb, int n_keys, const F& f) const {
    const std::int64_t r = i / block;
    for (std::int64_t c = kb / block; c * block < kb + n_keys; ++c) {
      if (listed(h, r, c)) continue;
      const std::int64_t b0 = c * block - kb, b1 = (c + 1) * block - kb;
      f(static_cast<int>(b0 < 0 ? 0 : b0), static_cast<int>(b1 > n_keys ? n_keys : b1));
    }
  }
};

}  // namespace detail
}  // namespace kattn
