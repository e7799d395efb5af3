// The row layout of the forward tile loop (tile_loop.hpp), for tiles of few query rows (decode,
// short appends): row-major tiles whose vector lanes run over the head dim (row_tile_products.hpp).
//
// Decode streams the KV cache, and the layout decides how well: one KV head's rows are head_dim
// values out of every Hkv * head_dim (a [seq, heads, dim] cache or page), each in a different 4 KB
// page when Hkv * head_dim * sizeof(T) >= 4 KB, where hardware prefetchers stop and every row costs
// a TLB miss. So a team takes several consecutive KV heads (heads_per_team, all of them on the
// host when the scratch allows) and folds each key tile for each of them in turn: together they
// read the tile's keys whole. With one row per head (decode without GQA) they read them in memory
// order too, key by key across the heads (the pair order of row_tile_products.hpp). K and V rows are read in place through per-key pointers
// (dense, ragged and paged alike; copied and zero-padded only when the head dim is not a multiple
// of the lanes), and the next tile's rows are prefetched while the current one is folded. A cache
// stored in 16 bits is widened in registers as its rows are loaded, so it streams half the bytes.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>

#include "kattn/compat.hpp"
#include "kattn/core/tile_visibility.hpp"
#include "kattn/detail/row_tile_products.hpp"
#include "kattn/detail/tile_loop.hpp"
#include "kattn/detail/tuning.hpp"

namespace kattn {
namespace detail {

template <class ExecSpace, class T, class Q = T, class KV = Q>
struct RowTiles : TileArgs<T, Q, KV> {
  using Tn = Tuning<ExecSpace, T>;
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using Scratch = typename ExecSpace::scratch_memory_space;
  using ScratchBuffer = Kokkos::View<T*, Scratch, Kokkos::MemoryUnmanaged>;
  using PointerBuffer = Kokkos::View<RowPtr<KV>*, Scratch, Kokkos::MemoryUnmanaged>;

  RowTileGeometry geo;  // geo.heads: KV heads per team, a divisor of heads_kv
  static constexpr bool rows_contiguous = false;  // S: a row's scores are contiguous

  KOKKOS_INLINE_FUNCTION int heads() const { return geo.heads; }
  std::size_t scratch_bytes() const {
    return ScratchBuffer::shmem_size(geo.scratch_elements()) + PointerBuffer::shmem_size(geo.pointer_elements());
  }

  // One KV head's arrays in scratch.
  struct Head {
    T* q;         // Q, rows_p x dims_p, pre-scaled, zero-padded
    T* o;         // O, rows_p x dims_p, unnormalised
    T* s;         // S, then P, rows_p x keys_p
    T* m;         // row max, log2 units
    T* l;         // row sum
    T* alpha;     // this tile's rescale factor per row
    T* tile_max;  // this tile's max per row, then the value subtracted before exp2
  };
  struct Tiles {
    T* heads;          // geo.heads blocks of head_elements()
    KV* k_copy;        // [heads][keys_p][dims_p] (when not read in place), in the cache's type
    KV* v_copy;
    RowPtr<KV>* rows;  // [2][2][keys_p]: K then V row pointers (of the first head) of two tiles
  };
  // Which pointer buffer holds the tile being folded, and the next tile's rows to prefetch.
  struct Cursor {
    int cur = 0;
    int n_next = 0;
    const RowPtr<KV>* krow = nullptr;
    const RowPtr<KV>* vrow = nullptr;
    const RowPtr<KV>* knext = nullptr;
    const RowPtr<KV>* vnext = nullptr;
  };

  KOKKOS_INLINE_FUNCTION Tiles carve(const Member& member) const {
    const ScratchBuffer buf(member.team_scratch(this->scratch_level), geo.scratch_elements());
    const PointerBuffer ptrs(member.team_scratch(this->scratch_level), geo.pointer_elements());
    Tiles t;
    t.heads = buf.data();
    // The copies hold KV values in room counted in T (no larger than T: enough).
    static_assert(sizeof(KV) <= sizeof(T), "kattn: a cache type wider than the accumulation type");
    t.k_copy = reinterpret_cast<KV*>(t.heads + geo.heads * geo.head_elements());
    t.v_copy = t.k_copy + geo.heads * geo.copy_elements();
    t.rows = ptrs.data();
    return t;
  }
  KOKKOS_INLINE_FUNCTION Head head(const Tiles& t, int hl) const {
    Head h;
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
    return geo.in_place ? hl * this->p.k.stride_head : std::ptrdiff_t(hl) * geo.copy_elements();
  }
  KOKKOS_INLINE_FUNCTION std::ptrdiff_t v_head_offset(int hl) const {
    return geo.in_place ? hl * this->p.v.stride_head : std::ptrdiff_t(hl) * geo.copy_elements();
  }

  KOKKOS_INLINE_FUNCTION int q_dims() const { return geo.dims_p; }  // zero-padded to the lanes
  KOKKOS_INLINE_FUNCTION T& q_at(const Head& h, int r, int d) const { return h.q[r * geo.dims_p + d]; }
  KOKKOS_INLINE_FUNCTION T& score(const Head& h, int r, int j) const { return h.s[r * geo.keys_p + j]; }
  KOKKOS_INLINE_FUNCTION T& out(const Head& h, int r, int d) const { return h.o[r * geo.dims_p + d]; }
  KOKKOS_INLINE_FUNCTION const KV* v_row(const Cursor& c, int hl, int j) const {
    return c.vrow[j].p + v_head_offset(hl);
  }
  // Keys scored: n_keys rounded up to the lanes (padding keys repeat the last key and are masked).
  KOKKOS_INLINE_FUNCTION int score_keys(int n_keys) const {
    constexpr int W = row_lanes<T>();
    return (n_keys + W - 1) / W * W;
  }
  KOKKOS_INLINE_FUNCTION int masked_rows(int) const { return geo.rows_p; }
  KOKKOS_INLINE_FUNCTION void mask_span(const Head& h, int r, int keys, int begin, int end) const {
    mask_row(h.s + r * geo.keys_p, keys, begin, end);
  }

  // Q, O and the finished rows go through TileLoop's element loops.
  template <class QRow>
  KOKKOS_INLINE_FUNCTION bool load_query_block(const Member&, const Head&, const QRow&) const {
    return false;
  }
  template <class OutRow>
  KOKKOS_INLINE_FUNCTION bool store_row_block(const Member&, const Head&, int, const OutRow&) const {
    return false;
  }

  // In place, the rows of the next tile are found (and prefetched) while this one is folded, in
  // two pointer buffers; copied rows have one buffer and are found just before their tile.
  KOKKOS_INLINE_FUNCTION void first_tile(const Member& member, const TileWork& w, std::int64_t kb, const Tiles& s,
                                         Cursor& c) const {
    if (geo.in_place) find_rows(member, w, kb, s, c.cur);
  }
  KOKKOS_INLINE_FUNCTION void stage(const Member& member, const TileWork& w, std::int64_t kb, int, std::int64_t next,
                                    int n_next, const Tiles& s, Cursor& c) const {
    if (!geo.in_place)
      find_rows(member, w, kb, s, c.cur);
    else if (n_next > 0)
      find_rows(member, w, next, s, 1 - c.cur);
    member.team_barrier();
    c.krow = s.rows + (2 * c.cur) * geo.keys_p;
    c.vrow = c.krow + geo.keys_p;
    c.n_next = geo.in_place && Tn::row_tile_prefetch ? n_next : 0;
    c.knext = c.n_next ? s.rows + (2 * (1 - c.cur)) * geo.keys_p : nullptr;
    c.vnext = c.n_next ? c.knext + geo.keys_p : nullptr;
  }
  KOKKOS_INLINE_FUNCTION void end_tile(Cursor& c) const {
    if (geo.in_place) c.cur = 1 - c.cur;
  }

  // One row per head: S and P V over (key, head) pairs in memory order (row_tile_products.hpp).
  KOKKOS_INLINE_FUNCTION bool values_of_heads_together() const { return pair_order<T>(geo); }
  // Keys the pair order prefetches ahead: about row_tile_prefetch_bytes of K (or V) rows, and no
  // more than a tile's keys: key j's rows then prefetch key j's of the rows read next, never past
  // them (a 16-bit cache or a small tile would otherwise prefetch nothing).
  KOKKOS_INLINE_FUNCTION int keys_ahead() const {
    const std::size_t key_bytes = std::size_t(geo.heads) * geo.dims_p * sizeof(KV);
    const std::size_t ahead = Tn::row_tile_prefetch_bytes / key_bytes;
    return ahead < 1 ? 1 : ahead > std::size_t(geo.keys_p) ? geo.keys_p : static_cast<int>(ahead);
  }

  // S = Q K^T for every head of the team, keys in memory order. The keys each row sees (which
  // the column layout uses to trim its products) are not used: a row tile is one row per head.
  KOKKOS_INLINE_FUNCTION void scores(const Member& member, const Tiles& s, const Cursor& c, int keys, bool,
                                     const TileVisibility&) const {
    if (pair_order<T>(geo)) {
      pair_scores<Member, T>(
          member, geo, keys, keys_ahead(), [&](int hl) { return static_cast<const T*>(head(s, hl).q); },
          [&](int hl) { return k_head_offset(hl); }, [&](int hl) { return head(s, hl).s; }, c.krow,
          RowsAfter<KV>{c.vrow, keys, this->p.v.stride_head});  // this tile's V is read next
      return;
    }
    row_scores<Member, T>(
        member, geo, keys, geo.heads, [&](int hl) { return static_cast<const T*>(head(s, hl).q); },
        [&](int hl) { return k_head_offset(hl); }, [&](int hl) { return head(s, hl).s; }, c.krow, c.knext, c.n_next);
  }
  KOKKOS_INLINE_FUNCTION void softcap(const Member& member, const Head& h, int keys) const {
    softcap_rows(member, geo, keys, h.s, this->cap_log2, this->inv_cap);
  }
  KOKKOS_INLINE_FUNCTION void tile_max(const Member& member, const Head& h, int keys, bool = true) const {
    row_max(member, geo, keys, h.s, h.tile_max);
  }
  KOKKOS_INLINE_FUNCTION void exponentiate(const Member& member, const Head& h, int keys, bool) const {
    exponentiate_rows(member, geo, keys, h.s, h.tile_max, h.l);
  }
  // O = diag(alpha) O + P V, the next tile's V rows prefetched.
  KOKKOS_INLINE_FUNCTION void values(const Member& member, const Head& h, const Cursor& c, int hl, int n_keys, bool,
                                     const TileVisibility&) const {
    row_values(member, geo, n_keys, h.s, c.vrow, v_head_offset(hl), h.o, h.alpha, c.vnext, c.n_next);
  }

  // O_h = diag(alpha_h) O_h + P_h V_h for every head at once, when values_of_heads_together().
  KOKKOS_INLINE_FUNCTION void values_of_heads(const Member& member, const Tiles& s, const Cursor& c, int n_keys) const {
    pair_values<Member, T>(
        member, geo, n_keys, keys_ahead(), [&](int hl) { return static_cast<const T*>(head(s, hl).s); },
        [&](int hl) { return v_head_offset(hl); }, [&](int hl) { return head(s, hl).o; },
        [&](int hl) { return head(s, hl).alpha[0]; }, c.vrow,
        RowsAfter<KV>{c.knext, c.n_next, this->p.k.stride_head});  // then the next tile's K
  }

  // Row pointers (first head of the team) of the tile at kb into buffer `buf`, walking pages
  // without a division per key; keys past the tile's end repeat its last key (a row that exists
  // for every head; the mask gives them no weight). Copies the rows of every head of the team
  // when they cannot be read in place.
  KOKKOS_INLINE_FUNCTION void find_rows(const Member& member, const TileWork& w, std::int64_t kb, const Tiles& s,
                                        int buf) const {
    const auto& p = this->p;
    const int n_keys = w.keys_at(kb, geo.block_k);
    RowPtr<KV>* krow = s.rows + (2 * buf) * geo.keys_p;
    RowPtr<KV>* vrow = krow + geo.keys_p;
    Kokkos::single(Kokkos::PerTeam(member), [&]() {
      if (p.kv_page_indptr) {
        const std::int64_t k_head = std::int64_t(w.hk) * p.k.stride_head;
        const std::int64_t v_head = std::int64_t(w.hk) * p.v.stride_head;
        std::int64_t idx = p.kv_page_indptr[w.b] + kb / p.page_size;
        std::int64_t slot = kb % p.page_size;
        for (int j = 0; j < n_keys; ++j) {
          const std::int64_t page = p.kv_page_indices[idx];
          krow[j].p = p.k.data + page * p.k.stride_batch + slot * p.k.stride_seq + k_head;
          vrow[j].p = p.v.data + page * p.v.stride_batch + slot * p.v.stride_seq + v_head;
          if (++slot == p.page_size) slot = 0, ++idx;
        }
      } else {
        const KV* k0 = p.k_ptr(w.b, kb, w.hk);
        const KV* v0 = p.v_ptr(w.b, kb, w.hk);
        for (int j = 0; j < n_keys; ++j) {
          krow[j].p = k0 + j * p.k.stride_seq;
          vrow[j].p = v0 + j * p.v.stride_seq;
        }
      }
      for (int j = n_keys; j < geo.keys_p; ++j) krow[j] = krow[n_keys - 1], vrow[j] = vrow[n_keys - 1];
    });
    if (!geo.in_place) {
      member.team_barrier();
      // Copies: head hl's rows at hl * copy_elements().
      Kokkos::parallel_for(Kokkos::TeamThreadRange(member, n_keys * geo.heads), [&](const int jh) {
        const int j = jh / geo.heads, hl = jh % geo.heads;
        KV* kc = s.k_copy + hl * geo.copy_elements() + std::size_t(j) * geo.dims_p;
        KV* vc = s.v_copy + hl * geo.copy_elements() + std::size_t(j) * geo.dims_p;
        const KV* k = krow[j].p + hl * p.k.stride_head;
        const KV* v = vrow[j].p + hl * p.v.stride_head;
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, geo.dims_p), [&](const int d) {
          kc[d] = d < p.head_dim ? k[d] : KV{};  // KV{}: +0 in every storage type
          vc[d] = d < p.head_dim ? v[d] : KV{};
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
};

template <class ExecSpace, class T, class Q = T, class KV = Q>
using RowTiledAttention = TileLoop<ExecSpace, T, RowTiles<ExecSpace, T, Q, KV>>;

}  // namespace detail
}  // namespace kattn
