// The forward tile loop (FlashAttention's Algorithm 1 with FlashAttention-2's loop order), written
// once for every tile layout: a league over (sequence, KV head group, query-row tile, key split);
// each team keeps its query rows' online-softmax states and output accumulators in scratch and
// folds key tiles into them:
//
//   S = Q K^T (scaled) -> softcap -> ALiBi -> bias -> mask (window, diagonal shift, block mask, padding)
//     -> tile max -> rescale (m, l, alpha) -> P = exp2(S - m) -> O = diag(alpha) O + P V
//
// then finishes each row (o / l, lse). The layout (the policy `Layout`) says only how the tiles
// lie in scratch and how the products and row reductions run over them:
//  - ColumnTiles (column_tiles.hpp): transposed tiles, query rows last, for prefill;
//  - RowTiles (row_tiles.hpp): row-major tiles of few rows, lanes over the head dim,
//    several KV heads per team, for decode.
// So every mask, softcap, window and the NaN rule hold alike in both. Rows are the (position,
// head) pairs of one GQA group, position-major: row t of KV head hk is query position t / G of
// query head hk * G + t % G, so a K/V tile serves the whole group.
//
// With splits > 1, split s of a sequence covers keys [s * chunk, (s + 1) * chunk) and writes its
// finished partial (o / l, lse) to a workspace that MergePartials combines; with one split it
// writes the outputs directly.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <type_traits>

#include "kattn/compat.hpp"
#include "kattn/core/alibi.hpp"
#include "kattn/core/attention_params.hpp"
#include "kattn/core/key_window.hpp"
#include "kattn/core/request_rows.hpp"
#include "kattn/core/score_bias.hpp"
#include "kattn/core/state.hpp"
#include "kattn/core/storage.hpp"
#include "kattn/core/tile_visibility.hpp"
#include "kattn/detail/block_sparse.hpp"
#include "kattn/detail/masked_values.hpp"
#include "kattn/detail/online_softmax.hpp"
#include "kattn/detail/simd.hpp"
#include "kattn/detail/tile_schedule.hpp"

namespace kattn {
namespace detail {

template <class T>
struct SplitWorkspace {
  T* o = nullptr;    // [splits][rows][head_dim], rows = total query positions x heads_q
  T* lse = nullptr;  // [splits][rows]
  std::int64_t rows = 0;
};

// What every layout's kernel holds: the problem, its scaling and mask, and how it is cut. T: the
// accumulation type of scratch, states and workspace; Q, KV: the storage of q/o and of k/v
// (core/storage.hpp), widened on load and o narrowed on the final write.
template <class T, class Q = T, class KV = Q>
struct TileArgs {
  using q_type = Q;
  using kv_type = KV;
  AttentionParams<Q, T, KV> p;
  KeyWindow window;
  T q_scale = 1;   // multiplies q on load: scale * log2(e), or scale alone when softcapping
  T cap_log2 = 0;  // softcap * log2(e); 0 = no softcap
  T inv_cap = 0;
  int row_tiles = 1;  // per (sequence, KV head), from the longest sequence
  int splits = 1;
  std::int64_t chunk = 0;  // keys per split; 0 = ceil(kv_len / splits) per sequence
  int scratch_level = 0;
  SplitWorkspace<T> ws;
  BlockSparse bs;  // inactive: dense
  ScoreBias bias;  // Options::bias; inactive: none

  // Whether the scores are the products' alone (no softcap, ALiBi or bias changes them).
  KOKKOS_INLINE_FUNCTION bool plain_scores() const { return cap_log2 == T(0) && !p.alibi_log2 && !bias.active(); }
};

// The loop. Layout derives from TileArgs<T> and provides, per team: carve (its scratch arrays),
// first_tile / stage / end_tile (K/V rows ready for a tile), scores, and per KV head of the team:
// softcap, tile_max (told whether the tile is masked), exponentiate (told whether the exact path
// below will read P from score()), values (or, when values_of_heads_together(), values_of_heads
// for all heads after their softmax), plus element access q_at(h, r, d) (d < q_dims()),
// score(h, r, j), out(h, r, d), v_row(c, hl, j) and the state vectors of head(s, hl), and
// rows_contiguous (whether score(h, r + 1, j) follows score(h, r, j) in memory).
template <class ExecSpace, class T, class Layout>
struct TileLoop : Layout {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = typename Policy::member_type;
  using Tiles = typename Layout::Tiles;
  using Head = typename Layout::Head;
  using Cursor = typename Layout::Cursor;

  int league_size() const {
    return this->p.batch * (this->p.heads_kv / this->heads()) * this->row_tiles * this->splits;
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    const auto& g = this->geo;
    const TileWork w = schedule_tile(this->p, this->window, member.league_rank(), this->row_tiles, this->splits,
                                     this->chunk, g.block_q, g.block_k, this->heads());
    if (w.n_rows == 0) return;
    const Tiles s = this->carve(member);
    const int G = this->p.group_size();
    for (int hl = 0; hl < this->heads(); ++hl) load_queries(member, w, this->head(s, hl), w.hk + hl);
    member.team_barrier();
    const BlockSparse::Rows mrows =
        this->bs.active() ? this->bs.rows_of_heads(w.hk, this->heads(), this->p.group_size(), w.t0, w.n_rows)
                          : BlockSparse::Rows{};
    Cursor c;
    std::int64_t kb = next_tile(w, mrows, w.kb_begin);
    if (kb <= w.hi) this->first_tile(member, w, kb, s, c);
    while (kb <= w.hi) {
      const std::int64_t next = next_tile(w, mrows, kb + g.block_k);
      const int n_keys = w.keys_at(kb, g.block_k);
      const int n_next = next <= w.hi ? w.keys_at(next, g.block_k) : 0;
      this->stage(member, w, kb, n_keys, next, n_next, s, c);
      const int keys = this->score_keys(n_keys);  // scored keys: n_keys and the padding
      // Only tiles that some row does not see whole need masking (padding keys included). On a
      // tile the window cuts (the causal diagonal), layouts skip the products' parts outside what
      // vis says the rows and keys see, which the mask sets to -inf (and P to 0) anyway.
      const TileVisibility vis{this->window, w.t0, G, w.n_rows, kb, n_keys, w.q_len, w.kv_len};
      const bool windowed = !vis.whole();
      const bool masked =
          keys != n_keys || windowed || (this->bs.active() && !this->bs.all_listed(mrows, kb, kb + n_keys - 1));
      this->scores(member, s, c, keys, windowed, vis);
      member.team_barrier();
      // Layouts that read V in one pass for all heads (one-row-per-head decode) fold P V after
      // every head's softmax; masked tiles take the per-head path with its NaN policy.
      const bool together = !masked && this->values_of_heads_together();
      for (int hl = 0; hl < this->heads(); ++hl)
        fold_head(member, w, kb, n_keys, keys, masked, windowed, vis, !together, s, c, hl);
      if (together) {
        this->values_of_heads(member, s, c, n_keys);
        member.team_barrier();
      }
      this->end_tile(c);
      kb = next;
    }
    for (int hl = 0; hl < this->heads(); ++hl) write_rows(member, w, this->head(s, hl), w.hk + hl);
  }

  // The first key tile at or after j (on the grid from kb_begin) that the tile's rows may see: j
  // itself, or under a block mask the tile holding the next key some row lists; tiles no row
  // lists are never loaded. Past w.hi: none.
  KOKKOS_INLINE_FUNCTION std::int64_t next_tile(const TileWork& w, const BlockSparse::Rows& mrows,
                                                std::int64_t j) const {
    if (!this->bs.active() || j > w.hi) return j;
    const std::int64_t key = this->bs.next_key(mrows, j);
    if (key > w.hi) return w.hi + 1;
    return j + (key - j) / this->geo.block_k * this->geo.block_k;
  }

  // The scores of KV head hl of the team folded into its rows' states and output.
  KOKKOS_INLINE_FUNCTION void fold_head(const Member& member, const TileWork& w, std::int64_t kb, int n_keys, int keys,
                                        bool masked, bool windowed, const TileVisibility& vis, bool fold_values,
                                        const Tiles& s, const Cursor& c, int hl) const {
    const Head h = this->head(s, hl);
    if (this->cap_log2 != T(0)) {
      this->softcap(member, h, keys);
      member.team_barrier();
    }
    if (this->p.alibi_log2) {
      add_alibi(member, w, kb, keys, h, w.hk + hl);
      member.team_barrier();
    }
    if (this->bias.active()) {
      add_bias(member, w, kb, n_keys, h, w.hk + hl);
      member.team_barrier();
    }
    if (masked) {
      mask(member, w, kb, n_keys, keys, h, w.hk + hl);
      member.team_barrier();
    }
    this->tile_max(member, h, keys, masked);
    member.team_barrier();
    rescale_rows(member, this->geo.rows_p, h.m, h.l, h.alpha, h.tile_max);
    member.team_barrier();
    // A masked tile whose V holds a NaN or an Inf takes the exact path below, which reads P from
    // score(); the others may keep P in the layout's own form.
    const auto v_at = [&](int j) { return this->v_row(c, hl, j); };
    const bool exact_values = fold_values && masked && !values_finite<Member, T>(member, n_keys, this->p.head_dim, v_at);
    this->exponentiate(member, h, keys, exact_values);
    member.team_barrier();
    if (!fold_values) return;
    if (exact_values)
      values_over_seen_keys(member, w, kb, n_keys, h, w.hk + hl, v_at);
    else
      this->values(member, h, c, hl, n_keys, windowed, vis);
    member.team_barrier();
  }

  // Q of KV head hk scaled into scratch (padding rows, and dims past head_dim, zero), O = 0, the
  // rows' states empty. Layouts that move whole vectors do Q and O themselves (load_query_block).
  KOKKOS_INLINE_FUNCTION void load_queries(const Member& member, const TileWork& w, const Head& h, int hk) const {
    const auto& p = this->p;
    const int G = p.group_size();
    const auto q_row = [&](int r) {  // null past the tile's rows
      return r < w.n_rows ? p.q_ptr(w.b, (w.t0 + r) / G, hk * G + static_cast<int>((w.t0 + r) % G)) : nullptr;
    };
    const bool blocked = this->load_query_block(member, h, q_row);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, this->geo.rows_p), [&](const int r) {
      if (!blocked) {
        const auto* q = q_row(r);
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, this->q_dims()), [&](const int d) {
          this->q_at(h, r, d) = (q && d < p.head_dim) ? T(widen(q[d])) * this->q_scale : T(0);
        });
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, this->geo.dims_p),
                             [&](const int d) { this->out(h, r, d) = T(0); });
      }
      Kokkos::single(Kokkos::PerThread(member), [&]() {
        const RowState<T> e = RowState<T>::empty();
        h.m[r] = e.m;
        h.l[r] = e.l;
      });
    });
  }

  // Query position i of the tile's sequence as the score variants place it (core/request_rows.hpp):
  // itself, or in a cascade's prefix pass the query of its own request.
  KOKKOS_INLINE_FUNCTION QueryAt query_at(const TileWork& w, std::int64_t i) const {
    return this->p.query_at(w.b, i, w.q_len, w.kv_len);
  }

  // ALiBi (core/alibi.hpp) on the tile's scores: each row's slope and diagonal (as an offset from
  // kb) staged in alpha and tile_max, which are free until the tile max and the rescale fill them,
  // then the bias added along the layout's contiguous direction. Padding rows get slope 0;
  // padding keys a finite bias that the mask then replaces.
  KOKKOS_INLINE_FUNCTION void add_alibi(const Member& member, const TileWork& w, std::int64_t kb, int keys,
                                        const Head& h, int hk) const {
    const int G = this->p.group_size(), rows = this->geo.rows_p;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, rows), [&](const int r) {
      Kokkos::single(Kokkos::PerThread(member), [&]() {
        const bool real = r < w.n_rows;
        const QueryAt at = real ? query_at(w, (w.t0 + r) / G) : QueryAt{};
        h.alpha[r] = real ? this->p.alibi_log2[hk * G + static_cast<int>((w.t0 + r) % G)] : T(0);
        h.tile_max[r] = real ? static_cast<T>(this->window.diagonal(at.position, at.q_len, at.kv_len) - kb) : T(0);
      });
    });
    member.team_barrier();
    const T* slope = h.alpha;
    const T* diagonal = h.tile_max;
    if constexpr (Layout::rows_contiguous) {
      Kokkos::parallel_for(Kokkos::TeamThreadRange(member, keys), [&](const int j) {
        T* column = &this->score(h, 0, j);
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, rows), [&](const int r) {
          column[r] += alibi_bias(slope[r], diagonal[r] - T(j));
        });
      });
    } else {
      Kokkos::parallel_for(Kokkos::TeamThreadRange(member, rows), [&](const int r) {
        T* row = &this->score(h, r, 0);
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, keys),
                             [&](const int j) { row[j] += alibi_bias(slope[r], diagonal[r] - T(j)); });
      });
    }
  }

  // The bias tensor (core/score_bias.hpp) on the tile's scores, in log2 units: each row's keys read
  // in place, in order; padding rows and keys are left to the mask. Where a key's scores are a
  // column of rows (rows_contiguous), blocks of rows walk their keys together, so that each key's
  // sums are one contiguous store and each row's bias still streams through its own cache lines.
  KOKKOS_INLINE_FUNCTION void add_bias(const Member& member, const TileWork& w, std::int64_t kb, int n_keys,
                                       const Head& h, int hk) const {
    const int G = this->p.group_size();
    const T log2e = static_cast<T>(kLog2e);
    this->bias.dispatch([&](auto tag) {
      using B = decltype(tag);
      const auto row_of = [&](int r) {
        const QueryAt at = query_at(w, (w.t0 + r) / G);
        return this->bias.template row<B>(at.seq, hk * G + static_cast<int>((w.t0 + r) % G), at.position) + kb;
      };
#if KATTN_HOST_SIMD
      // On the host, W x W blocks (W rows, W keys) loaded a row of keys at a time, widened, and
      // transposed in registers into W columns: vector loads and stores only.
      if constexpr (Layout::rows_contiguous && Layout::Tn::host &&
                    (std::is_same_v<B, T> || (std::is_same_v<T, float> && is_16bit_v<B>))) {
        using V = simd::vec<T>;
        constexpr int W = simd::width<T>();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(member, (w.n_rows + W - 1) / W), [&](const int blk) {
          const int r0 = blk * W, nr = w.n_rows - r0 < W ? w.n_rows - r0 : W;
          const B* rows[W];
          for (int k = 0; k < W; ++k) rows[k] = k < nr ? row_of(r0 + k) : nullptr;
          int j = 0;
          for (; j + W <= n_keys; j += W) {
            V v[W];
            for (int k = 0; k < W; ++k) v[k] = rows[k] ? simd::load_as<T>(rows[k] + j) : V{};
            simd::transpose<T>(v);
            for (int c = 0; c < W; ++c) {
              T* column = &this->score(h, r0, j + c);
              simd::store(column, simd::load(column) + v[c] * log2e);
            }
          }
          for (; j < n_keys; ++j)
            for (int k = 0; k < nr; ++k) this->score(h, r0 + k, j) += bias_value<T>(rows[k][j]) * log2e;
        });
        return;
      }
#endif
      if constexpr (Layout::rows_contiguous) {
        constexpr int RB = 16;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(member, (w.n_rows + RB - 1) / RB), [&](const int blk) {
          const int r0 = blk * RB, nr = w.n_rows - r0 < RB ? w.n_rows - r0 : RB;
          const B* rows[RB];
          for (int k = 0; k < nr; ++k) rows[k] = row_of(r0 + k);
          for (int j = 0; j < n_keys; ++j) {
            T* column = &this->score(h, r0, j);
            for (int k = 0; k < nr; ++k) column[k] += bias_value<T>(rows[k][j]) * log2e;
          }
        });
      } else {
        Kokkos::parallel_for(Kokkos::TeamThreadRange(member, w.n_rows), [&](const int r) {
          const B* row = row_of(r);
          T* scores = &this->score(h, r, 0);
          Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, n_keys),
                               [&](const int j) { scores[j] += bias_value<T>(row[j]) * log2e; });
        });
      }
    });
  }

  // Scores of keys a row does not see (window, diagonal shift, block mask; padding keys, and
  // every key of a padding row where the layout folds them) get -inf.
  KOKKOS_INLINE_FUNCTION void mask(const Member& member, const TileWork& w, std::int64_t kb, int n_keys, int keys,
                                   const Head& h, int hk) const {
    const int G = this->p.group_size();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, this->masked_rows(w.n_rows)), [&](const int r) {
      int begin = 0, end = 0;  // padding rows see nothing
      const std::int64_t i = (w.t0 + r) / G;
      if (r < w.n_rows) this->window.tile_keys(i, kb, n_keys, w.q_len, w.kv_len, begin, end);
      this->mask_span(h, r, keys, begin, end);
      if (this->bs.active() && r < w.n_rows) {
        const int hq = hk * G + static_cast<int>((w.t0 + r) % G);
        this->bs.for_unlisted(hq, i, kb, n_keys, [&](const int a, const int z) {
          for (int j = a; j < z; ++j) this->score(h, r, j) = -compat::infinity<T>();
        });
      }
    });
  }

  // O += P V summed over exactly the keys each row sees: for masked tiles whose V holds a NaN or
  // an Inf, which the tile product would carry into rows that do not see them (0 * NaN).
  template <class VAt>
  KOKKOS_INLINE_FUNCTION void values_over_seen_keys(const Member& member, const TileWork& w, std::int64_t kb,
                                                    int n_keys, const Head& h, int hk, const VAt& v_at) const {
    const int G = this->p.group_size();
    // Over the head dim alone: the 16-bit layouts' v_row is the caller's row, which has no padding.
    masked_values<Member, T>(
        member, this->geo.rows_p, this->p.head_dim,
        [&](int r, int& begin, int& end) {
          if (r < w.n_rows) this->window.tile_keys((w.t0 + r) / G, kb, n_keys, w.q_len, w.kv_len, begin, end);
        },
        [&](int r, int j) {
          return !this->bs.active() || this->bs.listed(hk * G + static_cast<int>((w.t0 + r) % G),
                                                       (w.t0 + r) / G / this->bs.block, (kb + j) / this->bs.block);
        },
        [&](int r, int j) { return this->score(h, r, j); }, v_at, [&](int r, int d) -> T& { return this->out(h, r, d); },
        h.alpha);
  }

  // Finish each row of KV head hk (o / l, lse) into the outputs, or into the split workspace.
  KOKKOS_INLINE_FUNCTION void write_rows(const Member& member, const TileWork& w, const Head& h, int hk) const {
    const auto& p = this->p;
    const int G = p.group_size();
    const auto position = [&](int r) { return (w.t0 + r) / G; };
    const auto head = [&](int r) { return hk * G + static_cast<int>((w.t0 + r) % G); };
    if (this->ws.o) {  // a split's partial: in the accumulation type
      const auto row = [&](int r) { return w.split * this->ws.rows + p.q_row(w.b, position(r)) * p.heads_q + head(r); };
      write_finished(
          member, w.n_rows, h, [&](int r) { return this->ws.o + row(r) * p.head_dim; },
          [&](int r) { return this->ws.lse + row(r); });
    } else {
      write_finished(
          member, w.n_rows, h, [&](int r) { return p.o_ptr(w.b, position(r), head(r)); },
          [&](int r) { return p.lse ? p.lse_ptr(w.b, position(r), head(r)) : nullptr; });
    }
  }

  // Row r's o / l to out_row(r), its lse to lse_at(r) (when not null). Layouts that move whole
  // vectors write o themselves (store_row_block).
  template <class OutRow, class LseAt>
  KOKKOS_INLINE_FUNCTION void write_finished(const Member& member, int n_rows, const Head& h, const OutRow& out_row,
                                             const LseAt& lse_at) const {
    const bool blocked = this->store_row_block(member, h, n_rows, out_row);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, n_rows), [&](const int r) {
      const Finish<T> fin = finish(RowState<T>{h.m[r], h.l[r]});
      if (!blocked) {
        auto* out = out_row(r);
        using S = std::remove_pointer_t<decltype(out)>;
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, this->p.head_dim),
                             [&](const int d) { out[d] = narrow<S>(finished_o(this->out(h, r, d), fin)); });
      }
      Kokkos::single(Kokkos::PerThread(member), [&]() {
        if (auto* lse = lse_at(r)) *lse = fin.lse;
      });
    });
  }
};

}  // namespace detail
}  // namespace kattn
