// The column layout (column_tiles.hpp) with bf16 storage multiplied on AMX tiles (amx_gemm.hpp):
// the micro-kernel policy of CPUs with matrix units. The pair layout (pair_column_tiles.hpp) with
// the products in whole tiles: the softmax, masks and the NaN rule are ColumnTiles' own, P is
// rounded to bf16 pairs of keys as there.
//
//   S^T = scale * K Q^T      K rows in place (or copied) as pairs of dims, Q^T as pairs of dims
//                            over the query columns, dims padded to whole tiles of 32;
//   O^T = O^T diag(alpha) + V^T P^T
//                            V^T as pairs of keys along each dim's row (the tile unit reads A
//                            by rows), packed once per call where that pays (else, and for a
//                            sequence's last tile or one starting at an odd key, per tile),
//                            keys padded to whole tiles of 32.

//
// Where the CPU has no AMX (or Linux refused its registers) the same layouts run the pair
// products (the instruction or its emulation): `kattn run --cpu-products amx` tests this policy
// on every machine.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>

#include "kattn/detail/amx_gemm.hpp"
#include "kattn/detail/memory_check.hpp"
#include "kattn/detail/pair_column_tiles.hpp"
#include "kattn/workspace.hpp"

namespace kattn {
namespace detail {

template <class ExecSpace>
struct AmxColumnTiles : PairColumnTiles<ExecSpace> {
  using Base = PairColumnTiles<ExecSpace>;
  using Member = typename Base::Member;
  using ScratchBuffer = typename Base::ScratchBuffer;
  using Tiles = typename Base::Tiles;
  using Head = typename Base::Head;
  static constexpr int J = Base::J;
  static constexpr int tile_key_factor = Base::tile_key_factor;
  static constexpr int key_multiple = 2 * amx_tile;  // keys per tile: whole tiles of pairs of keys

  bool amx = false;  // the tiles, else the pair products (hardware: the instruction, else emulated)

  // V^T as pairs of keys of every (sequence, KV head), packed once per call (prepare): dims() rows
  // of packed_ld pairs each. Full key tiles that start at an even key read it in place of the
  // tile's own pack; a team would otherwise pack each V tile again for its query rows.
  using Memory = typename ExecSpace::memory_space;
  Kokkos::View<float*, Memory> packed_v;
  std::int64_t packed_ld = 0;

  struct Cursor : Base::Cursor {
    const Pair* v_pairs = nullptr;  // V^T pairs of the tile: packed_v, or the tile's own pack
    std::int64_t v_ld = 0;
  };

  // Whether the tile products leave S^T unscaled, the tile max and the exponent scaling it on the
  // way (one pass over S^T fewer): a positive scale (the max commutes with it) and no softcap
  // (which needs the scaled scores).
  KOKKOS_INLINE_FUNCTION bool scale_deferred() const {
    return amx && this->q_scale > 0.0f && this->plain_scores();
  }

  // Padded sizes: dims in whole tiles of pairs (Q^T, K), of rows (V^T, O^T); keys in whole tiles
  // of pairs (S^T, P^T, V^T).
  KOKKOS_INLINE_FUNCTION int dim_pairs() const { return round_up((this->geo.head_dim + 1) / 2, amx_tile); }
  KOKKOS_INLINE_FUNCTION int dims() const { return round_up(this->geo.dims_p, amx_tile); }
  KOKKOS_INLINE_FUNCTION int keys() const { return round_up(this->geo.keys_p, key_multiple); }
  KOKKOS_INLINE_FUNCTION int score_keys(int n_keys) const { return round_up(n_keys, key_multiple); }

  // The pair layout's scratch at the padded sizes.
  KOKKOS_INLINE_FUNCTION std::size_t scratch_elements() const {
    return Base::elements_of(this->geo.rows_p, keys(), dim_pairs(), dims());
  }
  std::size_t scratch_bytes() const { return ScratchBuffer::shmem_size(scratch_elements()); }
  KOKKOS_INLINE_FUNCTION Tiles carve(const Member& member) const {
    return this->carve_arrays(member, this->geo.rows_p, keys(), dim_pairs(), dims());
  }

  // Q^T as pairs of dims (padding rows, the odd dim's partner and the padding pairs zero), O^T = 0
  // over the padded dims.
  template <class QRow>
  KOKKOS_INLINE_FUNCTION bool load_query_block(const Member& member, const Head& h, const QRow& q_row) const {
    const int rows = this->geo.rows_p, D = this->p.head_dim, D2 = dim_pairs(), DV = dims();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, rows), [&](const int r) {
      const bf16* q = q_row(r);
      for (int d2 = 0; d2 < D2; ++d2) h.qp[d2 * rows + r] = row_pair(q, d2, D);
    });
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, DV), [&](const int d) {
      for (int r = 0; r < rows; ++r) h.ot[d * rows + r] = 0.0f;
    });
    return true;
  }

  // Packs V^T for the call (packed_v, from the workspace when ws is set) where it pays and fits:
  // dense keys (a ragged or paged batch would pack every sequence to the longest), each key tile
  // read by two query tiles or more (else each tile packs its own, once), within the budget of
  // optional copies (memory_check.hpp). Otherwise every tile packs its own.
  void prepare(const ExecSpace& space, Workspace* ws, const std::string& name) {
    const auto& p = this->p;
    const int DV = dims();
    packed_v = {};
    if (p.kv_indptr || p.kv_page_indptr || this->row_tiles < 2 || p.kv_len == 0) return;
    // Rows a whole number of tiles plus one apart: a power-of-two stride put the rows of one tile
    // load in few cache sets (0.87x the product's rate at 8 KiB).
    packed_ld = ((p.kv_len + 1) / 2 + amx_tile - 1) / amx_tile * amx_tile + amx_tile;
    const std::uint64_t n = saturating_mul(saturating_mul(std::uint64_t(p.batch) * p.heads_kv, DV), packed_ld);
    if (!fits_copy_budget<Memory>(saturating_mul(n, 4))) return;
    try {
      packed_v = take_buffer<float, Memory>(ws, space, name + "::amx_packed_v", static_cast<std::size_t>(n));
    } catch (const std::exception&) {
      return;  // the memory cannot be had: every tile packs its own
    }
    const std::int64_t blocks = packed_ld / amx_tile;  // of 16 pairs (32 keys)
    const AmxColumnTiles self = *this;
    Kokkos::parallel_for(
        name + "::amx_pack_v", Kokkos::RangePolicy<ExecSpace>(space, 0, std::int64_t(p.batch) * p.heads_kv * blocks),
        [=](const std::int64_t i) {
          const int b = static_cast<int>(i / (blocks * self.p.heads_kv));
          const int hk = static_cast<int>(i / blocks % self.p.heads_kv);
          const std::int64_t kb = i % blocks * key_multiple;
          Pair* out = self.packed_pairs(b, hk) + kb / 2;
          for (int d = 0; d < DV; d += amx_tile)
            self.pack_value_block(b, hk, kb, self.p.seq_kv_len(b) - kb, 0, d, out + d * self.packed_ld, self.packed_ld);
        });
  }
  KOKKOS_INLINE_FUNCTION Pair* packed_pairs(int b, int hk) const {
    return reinterpret_cast<Pair*>(packed_v.data()) + (std::int64_t(b) * this->p.heads_kv + hk) * dims() * packed_ld;
  }

  // Each thread of the team configures its tiles once: the team's tile loop runs no other code.
  KOKKOS_INLINE_FUNCTION void first_tile(const Member&, const TileWork&, std::int64_t, const Tiles&, Cursor&) const {
#if KATTN_X86_AMX
    if (amx) amx_configure();
#endif
  }

  // K in place where whole tiles of pairs lie in its rows (dense or ragged, a full tile of whole
  // key tiles, the head dim whole tiles of 32), else copied as pairs with padding zero; V^T packed
  // as pairs of keys, padding keys and dims zero.
  KOKKOS_INLINE_FUNCTION void stage(const Member& member, const TileWork& w, std::int64_t kb, int n_keys, std::int64_t,
                                    int, const Tiles& s, Cursor& c) const {
    const auto& p = this->p;
    const int D = p.head_dim, D2 = dim_pairs();
    c.b = w.b;
    c.hk = w.hk;
    c.kb = kb;
    const int scored = score_keys(n_keys);
    this->stage_keys(member, w, kb, n_keys, scored, D2,
                     Base::Tn::kv_in_place && !p.kv_page_indptr && n_keys == scored && D == 2 * D2, s, c);
    if (packed_v.data() && n_keys == scored && kb % 2 == 0) {
      c.v_pairs = packed_pairs(w.b, w.hk) + kb / 2;
      c.v_ld = packed_ld;
      member.team_barrier();
      return;
    }
    const int KP = keys() / 2, DV = dims();
    c.v_pairs = s.vp;
    c.v_ld = KP;
    // Blocks of 16 key pairs x 16 dims: 16 rows of pairs (one per key pair) built as the pair
    // layout builds them, transposed in registers to 16 rows of V^T. Dims vary fastest, so the
    // 32 V rows of a block are still in L1 for the next.
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, scored / key_multiple * (DV / amx_tile)), [&](const int i) {
      const int d = i % (DV / amx_tile) * amx_tile, j2 = i / (DV / amx_tile) * amx_tile;
      pack_value_block(w.b, w.hk, kb, n_keys, j2, d, s.vp + std::ptrdiff_t(d) * KP + j2, KP);
    });
    member.team_barrier();
  }

  // out[i * ld + k] = (v[2 (j2 + k)][d + i], v[2 (j2 + k) + 1][d + i]) for i, k < 16: V^T pairs of
  // keys, zero past n_keys and head_dim. The pair layout's pack builds one row per key pair; the
  // 16 x 16 block is then transposed (in registers where vectors are 16 floats wide).
  KOKKOS_INLINE_FUNCTION void pack_value_block(int b, int hk, std::int64_t kb, std::int64_t n_keys, int j2, int d,
                                               Pair* out, std::int64_t ld) const {
    const int D = this->p.head_dim, n = D - d < amx_tile ? D - d : amx_tile;
    const auto v_row = [&](int j) -> const bf16* { return j < n_keys ? this->p.v_ptr(b, kb + j, hk) + d : nullptr; };
    Pair rows[amx_tile][amx_tile];
    for (int k = 0; k < amx_tile; ++k)
      Base::pack_value_pair(v_row(2 * (j2 + k)), v_row(2 * (j2 + k) + 1), n, amx_tile, rows[k]);
#if KATTN_HOST_SIMD
    if constexpr (simd::width<float>() == amx_tile) {
      using V = simd::vec<float>;
      V v[amx_tile];
      std::memcpy(v, rows, sizeof v);
      simd::transpose<float>(v);
      for (int i = 0; i < amx_tile; ++i) std::memcpy(out + std::ptrdiff_t(i) * ld, &v[i], sizeof v[i]);
      return;
    }
#endif
    for (int k = 0; k < amx_tile; ++k)
      for (int i = 0; i < amx_tile; ++i) out[std::ptrdiff_t(i) * ld + k] = rows[k][i];
  }

  // S^T = scale K Q^T; on a tile the window cuts, only the blocks holding a key some query of
  // their columns sees.
  KOKKOS_INLINE_FUNCTION void scores(const Member& member, const Tiles& s, const Cursor& c, int keys, bool windowed,
                                     const TileVisibility& vis) const {
    const int rows = this->geo.rows_p;
    if (amx) {
      amx_team_gemm(member, keys, rows, dim_pairs(), c.pairs, c.pair_row, s.qp, rows, s.st, rows, nullptr,
                    scale_deferred() ? 1.0f : this->q_scale, s.tile_max, [&](int m, int n, int&, int&) {
                      return !windowed || vis.sees(n, n + 2 * amx_tile, m, m + 2 * amx_tile);
                    });
      return;
    }
    Base::Gemm::invoke_blocks(
        member, keys, rows, dim_pairs(), c.pairs, c.pair_row, 1, s.qp, rows, s.st, rows, nullptr, this->q_scale,
        [&](int m, int n, int&, int&) { return !windowed || vis.sees(n, n + J, m, m + Base::R); }, this->hardware);
  }

  // The tile products computed the maxima of an unmasked tile (scores); a masked one, or one the
  // softcap, ALiBi or a bias changed, is read again.
  KOKKOS_INLINE_FUNCTION void tile_max(const Member& member, const Head& h, int keys, bool masked) const {
    const float scale = scale_deferred() ? this->q_scale : 1.0f;
    if (amx && !masked && this->plain_scores()) {
      if (scale != 1.0f)
        Kokkos::parallel_for(Kokkos::TeamThreadRange(member, this->geo.rows_p),
                             [&](const int r) { h.tile_max[r] *= scale; });
      return;
    }
    column_max(member, h.st, keys, this->geo.rows_p, h.tile_max, scale);
  }
  KOKKOS_INLINE_FUNCTION void exponentiate(const Member& member, const Head& h, int keys, bool exact) const {
    if (scale_deferred())
      this->template exponentiate_scaled<true>(member, h, keys, exact, this->q_scale);
    else
      this->template exponentiate_scaled<false>(member, h, keys, exact, 1.0f);
  }

  // O^T = O^T diag(alpha) + V^T P^T; on a tile the window cuts, each block of query columns sums
  // over the key pairs holding the keys its queries see.
  KOKKOS_INLINE_FUNCTION void values(const Member& member, const Head& h, const Cursor& c, int, int n_keys,
                                     bool windowed, const TileVisibility& vis) const {
    const int rows = this->geo.rows_p, K2 = score_keys(n_keys) / 2;
    if (amx) {
      amx_team_gemm(member, dims(), rows, K2, c.v_pairs, c.v_ld, h.pp, rows, h.ot, rows, h.alpha, 1.0f, nullptr,
                    [&](int, int n, int& lo2, int& hi2) {
                      if (windowed) {
                        int lo = 0, hi = 0;
                        vis.keys_of_rows(n, n + 2 * amx_tile, lo, hi);
                        lo2 = lo / 2;
                        hi2 = (hi + 1) / 2;
                      }
                      return true;
                    });
      return;
    }
    Base::Gemm::invoke_blocks(
        member, dims(), rows, K2, c.v_pairs, c.v_ld, 1, h.pp, rows, h.ot, rows, h.alpha, 1.0f,
        [&](int, int n, int& lo, int& hi) {
          if (windowed) vis.keys_of_rows(n, n + J, lo, hi);
          return true;
        },
        this->hardware);
  }
};

template <class ExecSpace>
using AmxTiledAttention = TileLoop<ExecSpace, float, AmxColumnTiles<ExecSpace>>;

}  // namespace detail
}  // namespace kattn
