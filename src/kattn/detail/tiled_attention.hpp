// The tiled attention kernel (FlashAttention's Algorithm 1 with FlashAttention-2's loop order):
// a league over (sequence, KV head, query-row tile, key split); each team keeps its query rows'
// online-softmax states and output accumulators in scratch and streams K/V tiles through it.
//
// Query rows are (position, head) pairs of one GQA group, position-major: row t of KV head hk is
// query position t / G of query head hk * G + t % G. So one K/V tile serves the whole group
// (GQA packing), and a tile's rows span few positions, which keeps causal tile skipping tight.
//
// The tiles are transposed, query rows last (see tile_geometry.hpp): S^T = K Q^T, then the
// online softmax per column, then O^T = O^T diag(alpha) + V^T P^T. K and V are the broadcast
// operands of both products, so on the host full tiles are read in place, never copied.
//
// With splits > 1, split s of a sequence covers keys [s * chunk, (s + 1) * chunk) and writes its
// finished partial (o / l, lse) to a workspace that MergePartials combines; with one split it
// writes the outputs directly.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "kattn/compat.hpp"
#include "kattn/detail/block_sparse.hpp"
#include "kattn/detail/masked_values.hpp"
#include "kattn/detail/online_softmax.hpp"
#include "kattn/detail/tile_gemm.hpp"
#include "kattn/detail/tile_schedule.hpp"
#include "kattn/detail/tile_geometry.hpp"
#include "kattn/detail/tuning.hpp"
#include "kattn/core/key_window.hpp"
#include "kattn/params.hpp"
#include "kattn/core/state.hpp"

namespace kattn {
namespace detail {

template <class T>
struct SplitWorkspace {
  T* o = nullptr;    // [splits][rows][head_dim], rows = total query positions x heads_q
  T* lse = nullptr;  // [splits][rows]
  std::int64_t rows = 0;
};

template <class ExecSpace, class T>
struct TiledAttention {
  using Tn = Tuning<ExecSpace, T>;
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = typename Policy::member_type;
  using ScratchBuffer = Kokkos::View<T*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  static constexpr int R = Tn::micro_rows;
  static constexpr int J = Tn::micro_cols;

  AttentionParams<T> p;
  KeyWindow window;
  T q_scale = 1;   // multiplies q on load: scale * log2(e), or scale alone when softcapping
  T cap_log2 = 0;  // softcap * log2(e); 0 = no softcap
  T inv_cap = 0;
  TileGeometry geo;
  int row_tiles = 1;  // per (sequence, KV head), from the longest sequence
  int splits = 1;
  std::int64_t chunk = 0;  // keys per split; 0 = ceil(kv_len / splits) per sequence
  int scratch_level = 0;
  SplitWorkspace<T> ws;
  BlockSparse bs;  // inactive: dense

  int league_size() const { return p.batch * p.heads_kv * row_tiles * splits; }
  std::size_t scratch_bytes() const { return ScratchBuffer::shmem_size(geo.scratch_elements()); }

  // The scratch arrays of one team.
  struct Tiles {
    T* qt;         // Q^T, head_dim x rows_p, pre-scaled
    T* ot;         // O^T, dims_p x rows_p, unnormalised
    T* k;          // K tile, keys_p x head_dim (when not read in place)
    T* v;          // V tile, keys_p x dims_p (when not read in place)
    T* st;         // S^T, then P^T, keys_p x rows_p
    T* m;          // row max, log2 units
    T* l;          // row sum
    T* alpha;      // this tile's rescale factor per row
    T* tile_max;   // this tile's max per row, then the value subtracted before exp2
  };

  KOKKOS_INLINE_FUNCTION Tiles carve(const ScratchBuffer& buf) const {
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

  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    const TileWork w =
        schedule_tile(p, window, member.league_rank(), row_tiles, splits, chunk, geo.block_q, geo.block_k);
    if (w.n_rows == 0) return;
    const Tiles s = carve(ScratchBuffer(member.team_scratch(scratch_level), geo.scratch_elements()));
    load_queries(member, w.b, w.hk, w.t0, w.n_rows, s);
    member.team_barrier();
    const BlockSparse::Rows mrows = bs.active() ? bs.rows_of(w.hk, p.group_size(), w.t0, w.n_rows) : BlockSparse::Rows{};
    for (std::int64_t kb = w.kb_begin; kb <= w.hi; kb += geo.block_k) {
      if (bs.active()) {
        // Block-sparse: jump to the first tile (on the same grid) holding a key some row lists;
        // tiles no row lists are never loaded.
        const std::int64_t next = bs.next_key(mrows, kb);
        if (next > w.hi) break;
        kb += (next - kb) / geo.block_k * geo.block_k;
      }
      const int n_keys = w.keys_at(kb, geo.block_k);
      // Only tiles that some row does not see whole need masking (padding keys included).
      const bool full = n_keys == geo.keys_p && window.rows_see_whole_tile(w.i_first, w.i_last, kb, n_keys, w.q_len, w.kv_len) &&
                        (!bs.active() || bs.all_listed(mrows, kb, kb + n_keys - 1));
      fold_tile(member, w.b, w.hk, w.t0, w.n_rows, kb, n_keys, !full, w.q_len, w.kv_len, s);
    }
    write_rows(member, w.b, w.hk, w.t0, w.n_rows, w.split, s);
  }

  // One K/V tile folded into the rows' states: S^T = K Q^T, online softmax, O^T += V^T P^T.
  KOKKOS_INLINE_FUNCTION void fold_tile(const Member& member, int b, int hk, std::int64_t t0, int n_rows,
                                        std::int64_t kb, int n_keys, bool masked, std::int64_t q_len,
                                        std::int64_t kv_len, const Tiles& s) const {
    const int D = p.head_dim;
    const bool in_place = Tn::kv_in_place && !p.kv_page_indptr && n_keys == geo.keys_p && geo.dims_p == D;
    const T* k = s.k;
    const T* v = s.v;
    std::ptrdiff_t k_row = D, v_row = geo.dims_p;
    if (in_place) {
      k = p.k_ptr(b, kb, hk);
      v = p.v_ptr(b, kb, hk);
      k_row = p.k_stride_seq;
      v_row = p.v_stride_seq;
    } else {
      load_keys_values(member, b, hk, kb, n_keys, s);
      member.team_barrier();
    }
    TeamTileGemm<R, J>::invoke(member, geo.keys_p, geo.rows_p, D, k, k_row, 1, s.qt, geo.rows_p, s.st, geo.rows_p,
                               static_cast<const T*>(nullptr));
    member.team_barrier();
    if (cap_log2 != T(0)) {
      softcap_tile(member, s.st, geo.keys_p * geo.rows_p, cap_log2, inv_cap);
      member.team_barrier();
    }
    if (masked) {
      mask_tile(member, hk, t0, n_rows, kb, n_keys, q_len, kv_len, s.st);
      member.team_barrier();
    }
    column_max(member, s.st, geo.keys_p, geo.rows_p, s.tile_max);
    member.team_barrier();
    rescale_rows(member, geo.rows_p, s.m, s.l, s.alpha, s.tile_max);
    member.team_barrier();
    exponentiate_columns(member, s.st, geo.keys_p, geo.rows_p, s.tile_max, s.l);
    member.team_barrier();
    const auto v_at = [&](int j) { return v + std::ptrdiff_t(j) * v_row; };
    if (masked && !values_finite<Member, T>(member, n_keys, D, v_at)) {
      const int G = p.group_size();
      masked_values<Member, T>(
          member, geo.rows_p, geo.dims_p,
          [&](int r, int& begin, int& end) {
            if (r < n_rows) window.tile_keys((t0 + r) / G, kb, n_keys, q_len, kv_len, begin, end);
          },
          [&](int r, int j) { return s.st[j * geo.rows_p + r]; }, v_at,
          [&](int r, int d) -> T& { return s.ot[d * geo.rows_p + r]; }, s.alpha);
    } else {
      TeamTileGemm<R, J>::invoke(member, geo.dims_p, geo.rows_p, geo.keys_p, v, 1, v_row, s.st, geo.rows_p, s.ot,
                                 geo.rows_p, static_cast<const T*>(s.alpha));
    }
    member.team_barrier();
  }

  // Q^T scaled into scratch (padding rows zero), O^T = 0, states empty.
  KOKKOS_INLINE_FUNCTION void load_queries(const Member& member, int b, int hk, std::int64_t t0, int n_rows,
                                           const Tiles& s) const {
    const int G = p.group_size();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, geo.rows_p), [&](const int r) {
      const T* q = r < n_rows ? p.q_ptr(b, (t0 + r) / G, hk * G + static_cast<int>((t0 + r) % G)) : nullptr;
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, p.head_dim),
                           [&](const int d) { s.qt[d * geo.rows_p + r] = q ? q[d] * q_scale : T(0); });
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, geo.dims_p),
                           [&](const int d) { s.ot[d * geo.rows_p + r] = T(0); });
      Kokkos::single(Kokkos::PerThread(member), [&]() {
        const RowState<T> e = RowState<T>::empty();
        s.m[r] = e.m;
        s.l[r] = e.l;
      });
    });
  }

  // K and V tiles into scratch; keys past n_keys and dims past head_dim are zero, so padding
  // adds nothing and cannot make NaN.
  KOKKOS_INLINE_FUNCTION void load_keys_values(const Member& member, int b, int hk, std::int64_t kb, int n_keys,
                                               const Tiles& s) const {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, geo.keys_p), [&](const int j) {
      const T* k = j < n_keys ? p.k_ptr(b, kb + j, hk) : nullptr;
      const T* v = j < n_keys ? p.v_ptr(b, kb + j, hk) : nullptr;
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, geo.dims_p), [&](const int d) {
        const bool in = k && d < p.head_dim;
        if (d < p.head_dim) s.k[j * p.head_dim + d] = in ? k[d] : T(0);
        s.v[j * geo.dims_p + d] = in ? v[d] : T(0);
      });
    });
  }

  // Keys a row does not see (window, block mask; and padding keys) get -inf.
  KOKKOS_INLINE_FUNCTION void mask_tile(const Member& member, int hk, std::int64_t t0, int n_rows, std::int64_t kb,
                                        int n_keys, std::int64_t q_len, std::int64_t kv_len, T* st) const {
    const int G = p.group_size();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, n_rows), [&](const int r) {
      const std::int64_t i = (t0 + r) / G;
      int begin = 0, end = 0;
      window.tile_keys(i, kb, n_keys, q_len, kv_len, begin, end);
      mask_column(st, geo.keys_p, geo.rows_p, r, begin, end);
      if (bs.active()) {
        const int h = hk * G + static_cast<int>((t0 + r) % G);
        bs.for_unlisted(h, i, kb, n_keys, [&](const int a, const int z) {
          for (int j = a; j < z; ++j) st[j * geo.rows_p + r] = -compat::infinity<T>();
        });
      }
    });
  }

  // Finish each row (o / l, lse) into the outputs, or into the split workspace.
  KOKKOS_INLINE_FUNCTION void write_rows(const Member& member, int b, int hk, std::int64_t t0, int n_rows, int split,
                                         const Tiles& s) const {
    const int G = p.group_size();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, n_rows), [&](const int r) {
      const std::int64_t i = (t0 + r) / G;
      const int h = hk * G + static_cast<int>((t0 + r) % G);
      const Finish<T> fin = finish(RowState<T>{s.m[r], s.l[r]});
      T* out;
      T* lse;
      if (ws.o) {
        const std::int64_t row = p.q_row(b, i) * p.heads_q + h;
        out = ws.o + (split * ws.rows + row) * p.head_dim;
        lse = ws.lse + split * ws.rows + row;
      } else {
        out = p.o_ptr(b, i, h);
        lse = p.lse ? p.lse_ptr(b, i, h) : nullptr;
      }
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, p.head_dim),
                           [&](const int d) { out[d] = finished_o(s.ot[d * geo.rows_p + r], fin); });
      Kokkos::single(Kokkos::PerThread(member), [&]() {
        if (lse) *lse = fin.lse;
      });
    });
  }
};

}  // namespace detail
}  // namespace kattn
