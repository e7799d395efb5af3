// The tiled attention kernel (FlashAttention's Algorithm 1 with FlashAttention-2's loop order):
// a league over (sequence, KV head, query-row tile, key split); each team keeps its query rows'
// online-softmax states and output accumulators in scratch and streams K/V tiles through it.
//
// Query rows are (position, head) pairs of one GQA group, position-major: row t of KV head hk is
// query position t / G of query head hk * G + t % G. So one K/V tile serves the whole group
// (GQA packing), and a tile's rows span few positions, which keeps causal tile skipping tight.
//
// With splits > 1, split s of a sequence covers keys [s * chunk, (s + 1) * chunk) and writes its
// finished partial (o / l, lse) to a workspace that merge_partials() combines; with one split it
// writes the outputs directly.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "kattn/compat.hpp"
#include "kattn/detail/online_softmax.hpp"
#include "kattn/detail/tile_gemm.hpp"
#include "kattn/detail/tile_geometry.hpp"
#include "kattn/detail/tuning.hpp"
#include "kattn/mask.hpp"
#include "kattn/params.hpp"
#include "kattn/state.hpp"

namespace kattn {
namespace detail {

template <class T>
struct SplitWorkspace {
  T* o = nullptr;    // [splits][rows][head_dim], rows = total query rows x heads_q
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

  int league_size() const { return p.batch * p.heads_kv * row_tiles * splits; }
  std::size_t scratch_bytes() const { return ScratchBuffer::shmem_size(geo.scratch_elements()); }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    int rank = member.league_rank();
    const int split = rank % splits;
    rank /= splits;
    const int tile = rank % row_tiles;
    rank /= row_tiles;
    const int hk = rank % p.heads_kv;
    const int b = rank / p.heads_kv;

    const int G = p.group_size();
    const std::int64_t q_len = p.seq_q_len(b);
    const std::int64_t kv_len = p.seq_kv_len(b);
    const std::int64_t t0 = std::int64_t(tile) * geo.block_q;
    if (t0 >= G * q_len) return;  // this sequence has fewer row tiles than the longest
    const int n_rows = static_cast<int>(G * q_len - t0 < geo.block_q ? G * q_len - t0 : geo.block_q);

    // Keys of this split, and the part of them that some row of the tile sees.
    const std::int64_t per_split = chunk > 0 ? chunk : (kv_len + splits - 1) / splits;
    const std::int64_t c0 = split * per_split;
    const std::int64_t c1 = c0 + per_split < kv_len ? c0 + per_split : kv_len;
    const std::int64_t i_first = t0 / G;
    const std::int64_t i_last = (t0 + n_rows - 1) / G;
    const std::int64_t first = window.first(i_first, q_len, kv_len);
    const std::int64_t last = window.last(i_last, q_len, kv_len);
    const std::int64_t lo = first > c0 ? first : c0;
    const std::int64_t hi = last < c1 - 1 ? last : c1 - 1;

    ScratchBuffer buf(member.team_scratch(scratch_level), geo.scratch_elements());
    T* sQ = buf.data();                            // rows_p x dim_p, pre-scaled
    T* sO = sQ + geo.rows_p * geo.dim_p;           // rows_p x dim_p, unnormalised o
    T* sKt = sO + geo.rows_p * geo.dim_p;          // dim_p x keys_p
    T* sV = sKt + geo.dim_p * geo.keys_p;          // keys_p x dim_p
    T* sS = sV + geo.keys_p * geo.dim_p;           // rows_p x keys_p, scores then weights
    T* sM = sS + geo.rows_p * geo.keys_p;          // row max (log2 units)
    T* sL = sM + geo.rows_p;                       // row sum
    T* sAlpha = sL + geo.rows_p;                   // rescale factor of the current tile

    load_queries(member, b, hk, t0, n_rows, sQ, sO, sM, sL);
    member.team_barrier();

    if (lo <= hi) {
      // Tiles are aligned to the split start so the fold order never depends on the rows.
      for (std::int64_t kb = c0 + (lo - c0) / geo.block_k * geo.block_k; kb <= hi; kb += geo.block_k) {
        const int n_keys = static_cast<int>(c1 - kb < geo.block_k ? c1 - kb : geo.block_k);
        load_keys_values(member, b, hk, kb, n_keys, sKt, sV);
        member.team_barrier();
        TeamTileGemm<R, J>::invoke(member, geo.rows_p, geo.keys_p, geo.dim_p, sQ, geo.dim_p, sKt, geo.keys_p, sS,
                                   geo.keys_p, static_cast<const T*>(nullptr));
        member.team_barrier();
        // Only tiles that some row does not see whole need masking (padded keys included).
        const bool full = n_keys == geo.keys_p && kb >= window.first(i_last, q_len, kv_len) &&
                          kb + n_keys - 1 <= window.last(i_first, q_len, kv_len);
        softmax_rows(member, t0, n_rows, kb, n_keys, !full, q_len, kv_len, sS, sM, sL, sAlpha);
        member.team_barrier();
        TeamTileGemm<R, J>::invoke(member, geo.rows_p, geo.dim_p, geo.keys_p, sS, geo.keys_p, sV, geo.dim_p, sO,
                                   geo.dim_p, static_cast<const T*>(sAlpha));
        member.team_barrier();
      }
    }
    write_rows(member, b, hk, t0, n_rows, split, sO, sM, sL);
  }

  // Q rows scaled into sQ (padding rows and dims zero), o = 0, states empty.
  KOKKOS_INLINE_FUNCTION void load_queries(const Member& member, int b, int hk, std::int64_t t0, int n_rows, T* sQ,
                                           T* sO, T* sM, T* sL) const {
    const int G = p.group_size();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, geo.rows_p), [&](const int r) {
      const T* q = r < n_rows ? p.q_ptr(b, (t0 + r) / G, hk * G + static_cast<int>((t0 + r) % G)) : nullptr;
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, geo.dim_p), [&](const int d) {
        sQ[r * geo.dim_p + d] = (q && d < p.head_dim) ? q[d] * q_scale : T(0);
        sO[r * geo.dim_p + d] = T(0);
      });
      Kokkos::single(Kokkos::PerThread(member), [&]() {
        const RowState<T> e = RowState<T>::empty();
        sM[r] = e.m;
        sL[r] = e.l;
      });
    });
  }

  // K tile transposed (so the score micro-kernel reads keys contiguously) and V tile; keys past
  // n_keys and dims past head_dim are zero, so padding adds nothing and cannot make NaN.
  KOKKOS_INLINE_FUNCTION void load_keys_values(const Member& member, int b, int hk, std::int64_t kb, int n_keys,
                                               T* sKt, T* sV) const {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, geo.keys_p), [&](const int j) {
      const T* k = j < n_keys ? p.k_ptr(b, kb + j, hk) : nullptr;
      const T* v = j < n_keys ? p.v_ptr(b, kb + j, hk) : nullptr;
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, geo.dim_p), [&](const int d) {
        const bool in = k && d < p.head_dim;
        sKt[d * geo.keys_p + j] = in ? k[d] : T(0);
        sV[j * geo.dim_p + d] = in ? v[d] : T(0);
      });
    });
  }

  KOKKOS_INLINE_FUNCTION void softmax_rows(const Member& member, std::int64_t t0, int n_rows, std::int64_t kb,
                                           int n_keys, bool masked, std::int64_t q_len, std::int64_t kv_len, T* sS,
                                           T* sM, T* sL, T* sAlpha) const {
    const int G = p.group_size();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, geo.rows_p), [&](const int r) {
      T* row = sS + r * geo.keys_p;
      // Padding rows see no key; their results are never written.
      int begin = 0, end = 0;
      if (r < n_rows) {
        const std::int64_t i = (t0 + r) / G;
        const std::int64_t f = window.first(i, q_len, kv_len) - kb;
        const std::int64_t l = window.last(i, q_len, kv_len) - kb + 1;
        begin = static_cast<int>(f < 0 ? 0 : (f > n_keys ? n_keys : f));
        end = static_cast<int>(l < begin ? begin : (l > n_keys ? n_keys : l));
      }
      RowState<T> st{sM[r], sL[r]};
      const T alpha = online_softmax_row(row, geo.keys_p, masked || r >= n_rows, begin, end, cap_log2, inv_cap, st);
      Kokkos::single(Kokkos::PerThread(member), [&]() {
        sM[r] = st.m;
        sL[r] = st.l;
        sAlpha[r] = alpha;
      });
    });
  }

  // Finish each row (o / l, lse) into the outputs, or into the split workspace.
  KOKKOS_INLINE_FUNCTION void write_rows(const Member& member, int b, int hk, std::int64_t t0, int n_rows, int split,
                                         const T* sO, const T* sM, const T* sL) const {
    const int G = p.group_size();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, n_rows), [&](const int r) {
      const std::int64_t i = (t0 + r) / G;
      const int h = hk * G + static_cast<int>((t0 + r) % G);
      const Finish<T> fin = finish(RowState<T>{sM[r], sL[r]});
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
                           [&](const int d) { out[d] = sO[r * geo.dim_p + d] * fin.inv_l; });
      Kokkos::single(Kokkos::PerThread(member), [&]() {
        if (lse) *lse = fin.lse;
      });
    });
  }
};

}  // namespace detail
}  // namespace kattn
