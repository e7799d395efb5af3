// The column layout of the forward tile loop (tile_loop.hpp), for prefill: one KV head per team,
// tiles transposed with the query rows last (see tile_geometry.hpp): S^T = K Q^T, the online
// softmax per column, O^T = O^T diag(alpha) + V^T P^T. K and V are the broadcast operands of both
// products, so on the host full tiles are read in place, never copied; K and V stored in another
// type than the accumulation type (16-bit) are widened once per tile into the scratch copies.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <type_traits>

#include "kattn/compat.hpp"
#include "kattn/core/state.hpp"
#include "kattn/core/tile_visibility.hpp"
#include "kattn/detail/online_softmax.hpp"
#include "kattn/detail/simd.hpp"
#include "kattn/detail/tile_gemm.hpp"
#include "kattn/detail/tile_geometry.hpp"
#include "kattn/detail/tile_loop.hpp"
#include "kattn/detail/tuning.hpp"

namespace kattn {
namespace detail {

template <class ExecSpace, class T, class Q = T, class KV = Q>
struct ColumnTiles : TileArgs<T, Q, KV> {
  using Tn = Tuning<ExecSpace, T>;
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using ScratchBuffer = Kokkos::View<T*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  static constexpr int R = Tn::micro_rows;
  static constexpr int J = Tn::wide_micro_cols;
  static constexpr int tile_key_factor = 1;  // plan_tiles' key_factor
  static constexpr int key_multiple = 1;     // automatic key tiles are a multiple of this
  static constexpr bool rows_contiguous = true;  // S^T: a key's scores are one column of rows

  TileGeometry geo;

  KOKKOS_INLINE_FUNCTION int heads() const { return 1; }
  std::size_t scratch_bytes() const { return ScratchBuffer::shmem_size(geo.scratch_elements()); }

  // The scratch arrays of one team.
  struct Tiles {
    T* qt;  // Q^T, head_dim x rows_p, pre-scaled
    T* ot;  // O^T, dims_p x rows_p, unnormalised
    T* k;   // K tile, keys_p x head_dim (when not read in place)
    T* v;   // V tile, keys_p x dims_p (when not read in place)
    T* st;  // S^T, then P^T, keys_p x rows_p
    T* m;   // row max, log2 units
    T* l;   // row sum
    T* alpha;     // this tile's rescale factor per row
    T* tile_max;  // this tile's max per row, then the value subtracted before exp2
  };
  using Head = Tiles;
  // The K and V tile being folded: in place or the scratch copies.
  struct Cursor {
    const T* k = nullptr;
    const T* v = nullptr;
    std::ptrdiff_t k_row = 0, v_row = 0;
  };

  KOKKOS_INLINE_FUNCTION Tiles carve(const Member& member) const {
    const ScratchBuffer buf(member.team_scratch(this->scratch_level), geo.scratch_elements());
    Tiles t;
    t.qt = buf.data();
    t.ot = t.qt + geo.q_elements();
    t.k = t.ot + geo.o_elements();
    t.v = t.k + geo.k_elements();
    t.st = t.v + geo.v_elements();
    t.m = t.st + geo.s_elements();
    t.l = t.m + geo.rows_p;
    t.alpha = t.l + geo.rows_p;
    t.tile_max = t.alpha + geo.rows_p;
    return t;
  }
  KOKKOS_INLINE_FUNCTION const Head& head(const Tiles& s, int) const { return s; }

  KOKKOS_INLINE_FUNCTION int q_dims() const { return geo.head_dim; }  // Q^T holds no padding dims
  KOKKOS_INLINE_FUNCTION T& q_at(const Head& h, int r, int d) const { return h.qt[d * geo.rows_p + r]; }
  KOKKOS_INLINE_FUNCTION T& score(const Head& h, int r, int j) const { return h.st[j * geo.rows_p + r]; }
  KOKKOS_INLINE_FUNCTION T& out(const Head& h, int r, int d) const { return h.ot[d * geo.rows_p + r]; }
  KOKKOS_INLINE_FUNCTION const T* v_row(const Cursor& c, int, int j) const { return c.v + std::ptrdiff_t(j) * c.v_row; }
  // Keys scored: n_keys rounded up to the micro-tile rows, not the whole padded tile, so a short
  // sequence (or a split's last tile) costs its keys (the copy's padding keys are zero and masked).
  KOKKOS_INLINE_FUNCTION int score_keys(int n_keys) const { return (n_keys + R - 1) / R * R; }
  KOKKOS_INLINE_FUNCTION int masked_rows(int n_rows) const { return n_rows; }
  KOKKOS_INLINE_FUNCTION void mask_span(const Head& h, int r, int keys, int begin, int end) const {
    mask_column(h.st, keys, geo.rows_p, r, begin, end);
  }

  // Q^T of the team's rows (pre-scaled, padding rows zero) and O^T = 0, on the host with whole
  // vectors: W x W blocks of W rows moved through registers (simd::transpose) instead of one
  // strided element at a time, which cost a short sequence a third of its time. False where the
  // head dim is not whole vectors: TileLoop's element loops do it.
  template <class QRow>
  KOKKOS_INLINE_FUNCTION bool load_query_block(const Member& member, const Head& h, const QRow& q_row) const {
#if KATTN_HOST_SIMD
    if constexpr (Tn::host) {
      using V = simd::vec<T>;
      constexpr int W = simd::width<T>();
      const int D = this->p.head_dim;
      if (D % W == 0) {
        Kokkos::parallel_for(Kokkos::TeamThreadRange(member, geo.rows_p / W), [&](const int blk) {
          const int r0 = blk * W;
          decltype(q_row(0)) rows[W];
          for (int i = 0; i < W; ++i) rows[i] = q_row(r0 + i);
          simd::store_columns<T>(rows, D, this->q_scale, h.qt + r0, geo.rows_p);
        });
        Kokkos::parallel_for(Kokkos::TeamThreadRange(member, int(geo.o_elements() / W)),
                             [&](const int i) { simd::store(h.ot + i * W, V{}); });
        return true;
      }
    }
#endif
    (void)member, (void)h, (void)q_row;
    return false;
  }

  // The finished rows o / l from O^T to out_row(r) (null past the tile's rows), on the host with
  // whole vectors and outputs in T (or bf16 from float): W x W blocks, finished across the rows'
  // lanes, transposed, then rounded to the output's type.
  template <class OutRow>
  KOKKOS_INLINE_FUNCTION bool store_row_block(const Member& member, const Head& h, int n_rows,
                                              const OutRow& out_row) const {
#if KATTN_HOST_SIMD
    using S = std::remove_pointer_t<decltype(out_row(0))>;
    if constexpr (Tn::host && (std::is_same_v<S, T> || (std::is_same_v<S, bf16> && std::is_same_v<T, float>))) {
      using V = simd::vec<T>;
      constexpr int W = simd::width<T>();
      const int D = this->p.head_dim;
      if (D % W == 0) {
        Kokkos::parallel_for(Kokkos::TeamThreadRange(member, (n_rows + W - 1) / W), [&](const int blk) {
          const int r0 = blk * W;
          Finish<V> fin{};
          S* rows[W];
          for (int i = 0; i < W; ++i) {
            fin.inv_l[i] = finish(RowState<T>{h.m[r0 + i], h.l[r0 + i]}).inv_l;
            rows[i] = r0 + i < n_rows ? out_row(r0 + i) : nullptr;
          }
          for (int d0 = 0; d0 < D; d0 += W) {
            V v[W];
            KATTN_UNROLL
            for (int k = 0; k < W; ++k) v[k] = finished_o(simd::load(h.ot + (d0 + k) * geo.rows_p + r0), fin);
            simd::transpose<T>(v);
            for (int i = 0; i < W; ++i)
              if (rows[i]) simd::store_as<S, T>(rows[i] + d0, v[i]);
          }
        });
        return true;
      }
    }
#endif
    (void)member, (void)h, (void)n_rows, (void)out_row;
    return false;
  }

  KOKKOS_INLINE_FUNCTION void first_tile(const Member&, const TileWork&, std::int64_t, const Tiles&, Cursor&) const {}
  KOKKOS_INLINE_FUNCTION void end_tile(Cursor&) const {}

  // The K/V tile at kb: full tiles of a dense or ragged cache in place (on the host), the others
  // copied into scratch with keys past n_keys and dims past head_dim zero, so padding adds nothing
  // and cannot make NaN.
  KOKKOS_INLINE_FUNCTION void stage(const Member& member, const TileWork& w, std::int64_t kb, int n_keys, std::int64_t,
                                    int, const Tiles& s, Cursor& c) const {
    const auto& p = this->p;
    const int D = p.head_dim;
    if constexpr (std::is_same_v<KV, T>) {
      if (Tn::kv_in_place && !p.kv_page_indptr && n_keys == geo.keys_p && geo.dims_p == D) {
        c.k = p.k_ptr(w.b, kb, w.hk);
        c.v = p.v_ptr(w.b, kb, w.hk);
        c.k_row = p.k.stride_seq;
        c.v_row = p.v.stride_seq;
        return;
      }
    }
#if KATTN_HOST_SIMD
    if constexpr (Tn::host) {
      // Rows copied (a 16-bit cache: widened) a vector at a time, padding keys zero.
      constexpr int W = simd::width<T>();
      if (geo.dims_p == D && D % W == 0) {
        Kokkos::parallel_for(Kokkos::TeamThreadRange(member, score_keys(n_keys)), [&](const int j) {
          const KV* k = j < n_keys ? p.k_ptr(w.b, kb + j, w.hk) : nullptr;
          const KV* v = j < n_keys ? p.v_ptr(w.b, kb + j, w.hk) : nullptr;
          for (int d = 0; d < D; d += W) {
            simd::store(s.k + j * D + d, k ? simd::load_as<T>(k + d) : simd::vec<T>{});
            simd::store(s.v + j * D + d, v ? simd::load_as<T>(v + d) : simd::vec<T>{});
          }
        });
        c.k = s.k;
        c.v = s.v;
        c.k_row = c.v_row = D;
        member.team_barrier();
        return;
      }
    }
#endif
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, score_keys(n_keys)), [&](const int j) {
      const KV* k = j < n_keys ? p.k_ptr(w.b, kb + j, w.hk) : nullptr;
      const KV* v = j < n_keys ? p.v_ptr(w.b, kb + j, w.hk) : nullptr;
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, geo.dims_p), [&](const int d) {
        const bool in = k && d < D;
        if (d < D) s.k[j * D + d] = in ? T(widen(k[d])) : T(0);
        s.v[j * geo.dims_p + d] = in ? T(widen(v[d])) : T(0);
      });
    });
    c.k = s.k;
    c.v = s.v;
    c.k_row = D;
    c.v_row = geo.dims_p;
    member.team_barrier();
  }

  // S^T = K Q^T; on a tile the window cuts (windowed), only the micro-tiles holding a key some
  // query of their columns sees: the mask sets the rest.
  KOKKOS_INLINE_FUNCTION void scores(const Member& member, const Tiles& s, const Cursor& c, int keys, bool windowed,
                                     const TileVisibility& vis) const {
    TeamTileGemm<R, J>::template invoke_blocks<false>(
        member, keys, geo.rows_p, this->p.head_dim, c.k, c.k_row, 1, s.qt, geo.rows_p, s.st, geo.rows_p,
        static_cast<const T*>(nullptr),
        [&](int m, int n, int&, int&) { return !windowed || vis.sees(n, n + J, m, m + R); });
  }
  KOKKOS_INLINE_FUNCTION void softcap(const Member& member, const Head& h, int keys) const {
    softcap_tile(member, h.st, keys * geo.rows_p, this->cap_log2, this->inv_cap);
  }
  KOKKOS_INLINE_FUNCTION void tile_max(const Member& member, const Head& h, int keys, bool = true) const {
    column_max(member, h.st, keys, geo.rows_p, h.tile_max);
  }
  KOKKOS_INLINE_FUNCTION void exponentiate(const Member& member, const Head& h, int keys, bool = true) const {
    exponentiate_columns(member, h.st, keys, geo.rows_p, h.tile_max, h.l);
  }
  // Values are folded head by head (TileLoop).
  KOKKOS_INLINE_FUNCTION bool values_of_heads_together() const { return false; }
  KOKKOS_INLINE_FUNCTION void values_of_heads(const Member&, const Tiles&, const Cursor&, int) const {}
  // O^T = O^T diag(alpha) + V^T P^T; on a tile the window cuts, each block of query columns sums
  // over the keys its queries see (P^T is 0 elsewhere).
  KOKKOS_INLINE_FUNCTION void values(const Member& member, const Head& h, const Cursor& c, int, int n_keys,
                                     bool windowed, const TileVisibility& vis) const {
    TeamTileGemm<R, J>::template invoke_blocks<false>(member, geo.dims_p, geo.rows_p, n_keys, c.v, 1, c.v_row, h.st,
                                                      geo.rows_p, h.ot, geo.rows_p, static_cast<const T*>(h.alpha),
                                                      [&](int, int n, int& lo, int& hi) {
                                                        if (windowed) vis.keys_of_rows(n, n + J, lo, hi);
                                                        return true;
                                                      });
  }
};

template <class ExecSpace, class T, class Q = T, class KV = Q>
using TiledAttention = TileLoop<ExecSpace, T, ColumnTiles<ExecSpace, T, Q, KV>>;

}  // namespace detail
}  // namespace kattn
