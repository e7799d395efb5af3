// The tiled attention kernel for tiles of few query rows (decode, short appends): the same
// schedule (tile_schedule.hpp) and state algebra as TiledAttention, with row-major tiles whose
// vector lanes run over the head dim (row_tiles.hpp). Rows are the (position, head) pairs of one
// GQA group, so a K/V row is read once per group.
//
// Decode streams the KV cache, and the layout decides how well: one KV head's rows are head_dim
// values out of every Hkv * head_dim (a [seq, heads, dim] cache or page), each in a different 4 KB
// page when Hkv * head_dim * sizeof(T) >= 4 KB, where hardware prefetchers stop and every row costs
// a TLB miss. So a team takes several consecutive KV heads (heads_per_team, all of them on the
// host when the scratch allows) and folds each key tile for each of them in turn: together they
// read the tile's keys whole and in order. K and V rows are read in place through per-key pointers
// (dense, ragged and paged alike; copied and zero-padded only when the head dim is not a multiple
// of the lanes), and the next tile's rows are prefetched while the current one is folded.
//
// With splits > 1 each split writes its finished partial (o / l, lse) to a workspace that
// MergePartials combines in split order; with one split it writes the outputs.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "kattn/compat.hpp"
#include "kattn/detail/online_softmax.hpp"
#include "kattn/detail/row_tiles.hpp"
#include "kattn/detail/tile_schedule.hpp"
#include "kattn/detail/tiled_attention.hpp"
#include "kattn/detail/tuning.hpp"
#include "kattn/core/key_window.hpp"
#include "kattn/params.hpp"
#include "kattn/core/state.hpp"

namespace kattn {
namespace detail {

template <class ExecSpace, class T>
struct RowTiledAttention {
  using Tn = Tuning<ExecSpace, T>;
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = typename Policy::member_type;
  using Scratch = typename ExecSpace::scratch_memory_space;
  using ScratchBuffer = Kokkos::View<T*, Scratch, Kokkos::MemoryUnmanaged>;
  using PointerBuffer = Kokkos::View<RowPtr<T>*, Scratch, Kokkos::MemoryUnmanaged>;

  AttentionParams<T> p;
  KeyWindow window;
  T q_scale = 1;   // multiplies q on load: scale * log2(e), or scale alone when softcapping
  T cap_log2 = 0;  // softcap * log2(e); 0 = no softcap
  T inv_cap = 0;
  RowTileGeometry geo;  // geo.heads: KV heads per team, a divisor of heads_kv
  int row_tiles = 1;
  int splits = 1;
  std::int64_t chunk = 0;  // keys per split; 0 = ceil(kv_len / splits) per sequence
  int scratch_level = 0;
  SplitWorkspace<T> ws;

  int league_size() const { return p.batch * (p.heads_kv / geo.heads) * row_tiles * splits; }
  std::size_t scratch_bytes() const {
    return ScratchBuffer::shmem_size(geo.scratch_elements()) + PointerBuffer::shmem_size(geo.pointer_elements());
  }

  // One KV head's arrays in scratch.
  struct HeadTiles {
    T* q;         // Q, rows_p x dims_p, pre-scaled, zero-padded
    T* o;         // O, rows_p x dims_p, unnormalised
    T* s;         // S, then P, rows_p x keys_p
    T* m;         // row max, log2 units
    T* l;         // row sum
    T* alpha;     // this tile's rescale factor per row
    T* tile_max;  // this tile's max per row, then the value subtracted before exp2
  };
  struct Tiles {
    T* heads;         // geo.heads blocks of head_elements()
    T* k_copy;        // [heads][keys_p][dims_p] (when not read in place)
    T* v_copy;
    RowPtr<T>* rows;  // [2][2][keys_p]: K then V row pointers (of the first head) of two tiles
  };

  KOKKOS_INLINE_FUNCTION Tiles carve(const Member& member) const {
    const ScratchBuffer buf(member.team_scratch(scratch_level), geo.scratch_elements());
    const PointerBuffer ptrs(member.team_scratch(scratch_level), geo.pointer_elements());
    Tiles t;
    t.heads = buf.data();
    t.k_copy = t.heads + geo.heads * geo.head_elements();
    t.v_copy = t.k_copy + geo.heads * geo.copy_elements();
    t.rows = ptrs.data();
    return t;
  }
  KOKKOS_INLINE_FUNCTION HeadTiles head(const Tiles& t, int hl) const {
    HeadTiles h;
    h.q = t.heads + hl * geo.head_elements();
    h.o = h.q + std::size_t(geo.rows_p) * geo.dims_p;
    h.s = h.o + std::size_t(geo.rows_p) * geo.dims_p;
    h.m = h.s + std::size_t(geo.rows_p) * geo.keys_p;
    h.l = h.m + geo.rows_p;
    h.alpha = h.l + geo.rows_p;
    h.tile_max = h.alpha + geo.rows_p;
    return h;
  }
  // Offsets from a key's row pointer (first head of the team) to head hl's K and V rows.
  KOKKOS_INLINE_FUNCTION std::ptrdiff_t k_head_offset(int hl) const {
    return geo.in_place ? hl * p.k_stride_head : std::ptrdiff_t(hl) * geo.copy_elements();
  }
  KOKKOS_INLINE_FUNCTION std::ptrdiff_t v_head_offset(int hl) const {
    return geo.in_place ? hl * p.v_stride_head : std::ptrdiff_t(hl) * geo.copy_elements();
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    const TileWork w = schedule_tile(p, window, member.league_rank(), row_tiles, splits, chunk, geo.block_q,
                                     geo.block_k, geo.heads);
    if (w.n_rows == 0) return;
    const Tiles s = carve(member);
    for (int hl = 0; hl < geo.heads; ++hl) load_queries(member, w, w.hk + hl, head(s, hl));
    member.team_barrier();
    // In place, the rows of tile t + 1 are found and prefetched while tile t is folded (two
    // pointer buffers); copied rows have one buffer and are found just before their tile.
    int cur = 0;
    if (geo.in_place && w.kb_begin <= w.hi) find_rows(member, w, w.kb_begin, s, cur);
    for (std::int64_t kb = w.kb_begin; kb <= w.hi; kb += geo.block_k) {
      const std::int64_t next = kb + geo.block_k;
      if (!geo.in_place) {
        find_rows(member, w, kb, s, cur);
      } else if (next <= w.hi) {
        find_rows(member, w, next, s, 1 - cur);
      }
      member.team_barrier();
      // The next tile's rows are prefetched head by head as this one is folded.
      const int n_next = geo.in_place && Tn::row_tile_prefetch && next <= w.hi ? w.keys_at(next, geo.block_k) : 0;
      fold_tile(member, w, kb, s, cur, n_next);
      if (geo.in_place) cur = 1 - cur;
      member.team_barrier();
    }
    for (int hl = 0; hl < geo.heads; ++hl) write_rows(member, w, w.hk + hl, head(s, hl));
  }

  // One tile for every head of the team: S = Q K^T (all heads, keys in memory order), then per
  // head the online softmax and O = diag(alpha) O + P V.
  KOKKOS_INLINE_FUNCTION void fold_tile(const Member& member, const TileWork& w, std::int64_t kb, const Tiles& s,
                                        int buf, int n_next) const {
    constexpr int W = row_lanes<T>();
    const int n_keys = w.keys_at(kb, geo.block_k);
    const int keys = (n_keys + W - 1) / W * W;  // padding keys repeat the last key and are masked
    const RowPtr<T>* krow = s.rows + (2 * buf) * geo.keys_p;
    const RowPtr<T>* vrow = krow + geo.keys_p;
    const RowPtr<T>* knext = n_next ? s.rows + (2 * (1 - buf)) * geo.keys_p : nullptr;
    const RowPtr<T>* vnext = n_next ? knext + geo.keys_p : nullptr;
    row_scores<Member, T>(
        member, geo, keys, geo.heads, [&](int hl) { return static_cast<const T*>(head(s, hl).q); },
        [&](int hl) { return k_head_offset(hl); }, [&](int hl) { return head(s, hl).s; }, krow, knext, n_next);
    member.team_barrier();
    const bool masked = keys != n_keys || !window.rows_see_whole_tile(w.i_first, w.i_last, kb, n_keys, w.q_len, w.kv_len);
    for (int hl = 0; hl < geo.heads; ++hl) {
      const HeadTiles h = head(s, hl);
      if (cap_log2 != T(0)) {
        softcap_rows(member, geo, keys, h.s, cap_log2, inv_cap);
        member.team_barrier();
      }
      if (masked) {
        mask_rows(member, w, kb, n_keys, keys, h.s);
        member.team_barrier();
      }
      row_max(member, geo, keys, h.s, h.tile_max);
      member.team_barrier();
      rescale_rows(member, geo.rows_p, h.m, h.l, h.alpha, h.tile_max);
      member.team_barrier();
      exponentiate_rows(member, geo, keys, h.s, h.tile_max, h.l);
      member.team_barrier();
      const std::ptrdiff_t v_off = v_head_offset(hl);
      const auto v_at = [&](int j) { return vrow[j].p + v_off; };
      if (masked && !values_finite<Member, T>(member, n_keys, p.head_dim, v_at)) {
        const int G = p.group_size();
        masked_values<Member, T>(
            member, geo.rows_p, geo.dims_p,
            [&](int r, int& begin, int& end) {
              if (r < w.n_rows) window.tile_keys((w.t0 + r) / G, kb, n_keys, w.q_len, w.kv_len, begin, end);
            },
            [&](int r, int j) { return h.s[r * geo.keys_p + j]; }, v_at,
            [&](int r, int d) -> T& { return h.o[r * geo.dims_p + d]; }, h.alpha);
      } else {
        row_values(member, geo, n_keys, h.s, vrow, v_off, h.o, h.alpha, vnext, n_next);
      }
      member.team_barrier();
    }
  }

  // Q of KV head hk scaled into scratch (padding rows and dims zero), O = 0, states empty.
  KOKKOS_INLINE_FUNCTION void load_queries(const Member& member, const TileWork& w, int hk, const HeadTiles& h) const {
    const int G = p.group_size();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, geo.rows_p), [&](const int r) {
      const T* q = r < w.n_rows ? p.q_ptr(w.b, (w.t0 + r) / G, hk * G + static_cast<int>((w.t0 + r) % G)) : nullptr;
      T* qr = h.q + r * geo.dims_p;
      T* orow = h.o + r * geo.dims_p;
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, geo.dims_p), [&](const int d) {
        qr[d] = (q && d < p.head_dim) ? q[d] * q_scale : T(0);
        orow[d] = T(0);
      });
      Kokkos::single(Kokkos::PerThread(member), [&]() {
        const RowState<T> e = RowState<T>::empty();
        h.m[r] = e.m;
        h.l[r] = e.l;
      });
    });
  }

  // Row pointers (first head of the team) of the tile at kb into buffer `buf`, walking pages
  // without a division per key; keys past the tile's end repeat its last key (a row that exists
  // for every head; the mask gives them no weight). Copies the rows of every head of the team
  // when they cannot be read in place.
  KOKKOS_INLINE_FUNCTION void find_rows(const Member& member, const TileWork& w, std::int64_t kb, const Tiles& s,
                                        int buf) const {
    const int n_keys = w.keys_at(kb, geo.block_k);
    RowPtr<T>* krow = s.rows + (2 * buf) * geo.keys_p;
    RowPtr<T>* vrow = krow + geo.keys_p;
    Kokkos::single(Kokkos::PerTeam(member), [&]() {
      if (p.kv_page_indptr) {
        const std::int64_t k_head = std::int64_t(w.hk) * p.k_stride_head;
        const std::int64_t v_head = std::int64_t(w.hk) * p.v_stride_head;
        std::int64_t idx = p.kv_page_indptr[w.b] + kb / p.page_size;
        std::int64_t slot = kb % p.page_size;
        for (int j = 0; j < n_keys; ++j) {
          const std::int64_t page = p.kv_page_indices[idx];
          krow[j].p = p.k + page * p.k_stride_batch + slot * p.k_stride_seq + k_head;
          vrow[j].p = p.v + page * p.v_stride_batch + slot * p.v_stride_seq + v_head;
          if (++slot == p.page_size) slot = 0, ++idx;
        }
      } else {
        const T* k0 = p.k_ptr(w.b, kb, w.hk);
        const T* v0 = p.v_ptr(w.b, kb, w.hk);
        for (int j = 0; j < n_keys; ++j) {
          krow[j].p = k0 + j * p.k_stride_seq;
          vrow[j].p = v0 + j * p.v_stride_seq;
        }
      }
      for (int j = n_keys; j < geo.keys_p; ++j) krow[j] = krow[n_keys - 1], vrow[j] = vrow[n_keys - 1];
    });
    if (!geo.in_place) {
      member.team_barrier();
      // Copies: head hl's rows at hl * copy_elements().
      Kokkos::parallel_for(Kokkos::TeamThreadRange(member, n_keys * geo.heads), [&](const int jh) {
        const int j = jh / geo.heads, hl = jh % geo.heads;
        T* kc = s.k_copy + hl * geo.copy_elements() + std::size_t(j) * geo.dims_p;
        T* vc = s.v_copy + hl * geo.copy_elements() + std::size_t(j) * geo.dims_p;
        const T* k = krow[j].p + hl * p.k_stride_head;
        const T* v = vrow[j].p + hl * p.v_stride_head;
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, geo.dims_p), [&](const int d) {
          kc[d] = d < p.head_dim ? k[d] : T(0);
          vc[d] = d < p.head_dim ? v[d] : T(0);
        });
      });
      member.team_barrier();
      Kokkos::parallel_for(Kokkos::TeamThreadRange(member, geo.keys_p), [&](const int j) {
        const std::size_t row = std::size_t(j < n_keys ? j : n_keys - 1) * geo.dims_p;
        krow[j].p = s.k_copy + row;
        vrow[j].p = s.v_copy + row;
      });
    }
  }

  // Keys a row does not see, and the padding keys, get -inf.
  KOKKOS_INLINE_FUNCTION void mask_rows(const Member& member, const TileWork& w, std::int64_t kb, int n_keys,
                                        int keys, T* st) const {
    const int G = p.group_size();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, geo.rows_p), [&](const int r) {
      int begin = 0, end = 0;  // padding rows see nothing
      if (r < w.n_rows) {
        const std::int64_t i = (w.t0 + r) / G;
        window.tile_keys(i, kb, n_keys, w.q_len, w.kv_len, begin, end);
      }
      mask_row(st + r * geo.keys_p, keys, begin, end);
    });
  }

  // Finish each row of KV head hk (o / l, lse) into the outputs, or into the split workspace.
  KOKKOS_INLINE_FUNCTION void write_rows(const Member& member, const TileWork& w, int hk, const HeadTiles& ht) const {
    const int G = p.group_size();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, w.n_rows), [&](const int r) {
      const std::int64_t i = (w.t0 + r) / G;
      const int h = hk * G + static_cast<int>((w.t0 + r) % G);
      const Finish<T> fin = finish(RowState<T>{ht.m[r], ht.l[r]});
      T* out;
      T* lse;
      if (ws.o) {
        const std::int64_t row = p.q_row(w.b, i) * p.heads_q + h;
        out = ws.o + (w.split * ws.rows + row) * p.head_dim;
        lse = ws.lse + w.split * ws.rows + row;
      } else {
        out = p.o_ptr(w.b, i, h);
        lse = p.lse ? p.lse_ptr(w.b, i, h) : nullptr;
      }
      const T* orow = ht.o + r * geo.dims_p;
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, p.head_dim),
                           [&](const int d) { out[d] = finished_o(orow[d], fin); });
      Kokkos::single(Kokkos::PerThread(member), [&]() {
        if (lse) *lse = fin.lse;
      });
    });
  }
};

}  // namespace detail
}  // namespace kattn
