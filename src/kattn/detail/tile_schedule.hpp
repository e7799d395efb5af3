// Which work one team of a tiled kernel does: its league rank names a (sequence, KV head,
// query-row tile, key split), and from the sequence's lengths, the split's chunk and the mask
// follow the rows it owns and the key tiles it folds. Shared by every tiled kernel so that they
// all cut the problem the same way (and a split's tiles never depend on the rows).
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "kattn/core/key_window.hpp"
#include "kattn/core/attention_params.hpp"

namespace kattn {
namespace detail {

struct TileWork {
  int b = 0, hk = 0, split = 0;
  std::int64_t q_len = 0, kv_len = 0;  // this sequence's lengths
  std::int64_t t0 = 0;                 // first query row of the tile (rows = positions x group)
  int n_rows = 0;                      // rows of the tile (0: the sequence has no such tile)
  std::int64_t i_first = 0, i_last = 0;  // query positions of the first and last row
  std::int64_t c1 = 0;                 // end of the split's keys
  std::int64_t kb_begin = 0;           // first key tile; tiles kb_begin, + block_k, ... while kb <= hi
  std::int64_t hi = -1;                // last key some row of the tile sees in the split

  // Keys of the tile starting at kb (the split's last tile may be short).
  KOKKOS_INLINE_FUNCTION int keys_at(std::int64_t kb, int block_k) const {
    return static_cast<int>(c1 - kb < block_k ? c1 - kb : block_k);
  }
};

// rank = ((b * head_groups + g) * row_tiles + tile) * splits + split, where a team takes the
// heads_per_team KV heads hk = g * heads_per_team, ... (w.hk is the first). chunk > 0: keys per
// split; 0: the split count cuts each sequence into equal chunks.
template <class P>
KOKKOS_INLINE_FUNCTION TileWork schedule_tile(const P& p, const KeyWindow& window, int rank,
                                              int row_tiles, int splits, std::int64_t chunk, int block_q, int block_k,
                                              int heads_per_team = 1) {
  TileWork w;
  w.split = rank % splits;
  rank /= splits;
  const int tile = rank % row_tiles;
  rank /= row_tiles;
  const int head_groups = p.heads_kv / heads_per_team;
  w.hk = (rank % head_groups) * heads_per_team;
  w.b = rank / head_groups;

  const int G = p.group_size();
  w.q_len = p.seq_q_len(w.b);
  w.kv_len = p.seq_kv_len(w.b);
  w.t0 = std::int64_t(tile) * block_q;
  if (w.t0 >= G * w.q_len) return w;  // this sequence has fewer row tiles than the longest
  w.n_rows = static_cast<int>(G * w.q_len - w.t0 < block_q ? G * w.q_len - w.t0 : block_q);

  // Keys of this split, and the part of them that some row of the tile sees.
  const std::int64_t per_split = chunk > 0 ? chunk : (w.kv_len + splits - 1) / splits;
  const std::int64_t c0 = w.split * per_split;
  w.c1 = c0 + per_split < w.kv_len ? c0 + per_split : w.kv_len;
  w.i_first = w.t0 / G;
  w.i_last = (w.t0 + w.n_rows - 1) / G;
  const std::int64_t first = window.first(w.i_first, w.q_len, w.kv_len);
  const std::int64_t last = window.last(w.i_last, w.q_len, w.kv_len);
  const std::int64_t lo = first > c0 ? first : c0;
  w.hi = last < w.c1 - 1 ? last : w.c1 - 1;
  // Tiles are aligned to the split start, so the fold order never depends on the rows.
  w.kb_begin = (lo <= w.hi) ? c0 + (lo - c0) / block_k * block_k : w.hi + 1;
  return w;
}

}  // namespace detail
}  // namespace kattn
