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
#include "kattn/detail/online_softmax.hpp"
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
  KOKKOS_INLINE_FUNCTION int score_keys(int) const { return geo.keys_p; }
  KOKKOS_INLINE_FUNCTION int masked_rows(int n_rows) const { return n_rows; }
  KOKKOS_INLINE_FUNCTION void mask_span(const Head& h, int r, int, int begin, int end) const {
    mask_column(h.st, geo.keys_p, geo.rows_p, r, begin, end);
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
        c.k_row = p.k_stride_seq;
        c.v_row = p.v_stride_seq;
        return;
      }
    }
#if KATTN_HOST_SIMD
    if constexpr (!std::is_same_v<KV, T> && Tn::host) {
      // Full tiles of a 16-bit cache, rows widened a vector at a time.
      constexpr int W = simd::width<T>();
      if (n_keys == geo.keys_p && geo.dims_p == D && D % W == 0) {
        Kokkos::parallel_for(Kokkos::TeamThreadRange(member, n_keys), [&](const int j) {
          const KV* k = p.k_ptr(w.b, kb + j, w.hk);
          const KV* v = p.v_ptr(w.b, kb + j, w.hk);
          for (int d = 0; d < D; d += W) {
            simd::store(s.k + j * D + d, simd::load_as<T>(k + d));
            simd::store(s.v + j * D + d, simd::load_as<T>(v + d));
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
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, geo.keys_p), [&](const int j) {
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

  // S^T = K Q^T.
  KOKKOS_INLINE_FUNCTION void scores(const Member& member, const Tiles& s, const Cursor& c, int) const {
    TeamTileGemm<R, J>::invoke(member, geo.keys_p, geo.rows_p, this->p.head_dim, c.k, c.k_row, 1, s.qt, geo.rows_p,
                               s.st, geo.rows_p, static_cast<const T*>(nullptr));
  }
  KOKKOS_INLINE_FUNCTION void softcap(const Member& member, const Head& h, int) const {
    softcap_tile(member, h.st, geo.keys_p * geo.rows_p, this->cap_log2, this->inv_cap);
  }
  KOKKOS_INLINE_FUNCTION void tile_max(const Member& member, const Head& h, int) const {
    column_max(member, h.st, geo.keys_p, geo.rows_p, h.tile_max);
  }
  KOKKOS_INLINE_FUNCTION void exponentiate(const Member& member, const Head& h, int) const {
    exponentiate_columns(member, h.st, geo.keys_p, geo.rows_p, h.tile_max, h.l);
  }
  // Values are folded head by head (TileLoop).
  KOKKOS_INLINE_FUNCTION bool values_of_heads_together() const { return false; }
  KOKKOS_INLINE_FUNCTION void values_of_heads(const Member&, const Tiles&, const Cursor&, int) const {}
  // O^T = O^T diag(alpha) + V^T P^T.
  KOKKOS_INLINE_FUNCTION void values(const Member& member, const Head& h, const Cursor& c, int, int) const {
    TeamTileGemm<R, J>::invoke(member, geo.dims_p, geo.rows_p, geo.keys_p, c.v, 1, c.v_row, h.st, geo.rows_p, h.ot,
                               geo.rows_p, static_cast<const T*>(h.alpha));
  }
};

template <class ExecSpace, class T, class Q = T, class KV = Q>
using TiledAttention = TileLoop<ExecSpace, T, ColumnTiles<ExecSpace, T, Q, KV>>;

}  // namespace detail
}  // namespace kattn
