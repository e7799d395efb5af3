// The column layout (column_tiles.hpp) with bf16 storage multiplied as bf16 pairs
// (pair_gemm.hpp): the micro-kernel policy of CPUs with bf16 dot products. Only the operands'
// form and the two products differ from ColumnTiles; the transposed float tiles of S^T and O^T,
// the softmax steps, masks and the NaN rule are ColumnTiles' own:
//
//   S^T = scale * K Q^T       K rows read in place as pairs of dims (or copied, when paged or
//                             short), Q^T held as pairs of dims over the query columns;
//   P^T = 2^(S^T - m)          in float, its column sums into l, then rounded to bf16 pairs of keys;
//   O^T = O^T diag(alpha) + V^T P^T   V packed once per tile as pairs of keys over the head dim.
//
// q keeps its bf16 bits (the scale multiplies the float scores), so S is the float path's up to
// the order of its sums; the one added rounding is P's, as on GPUs (docs/storage.md).
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <cstring>

#include "kattn/cpu_products.hpp"
#include "kattn/detail/column_tiles.hpp"
#include "kattn/detail/exp2.hpp"
#include "kattn/detail/pair_gemm.hpp"

namespace kattn {
namespace detail {

#if KATTN_X86_BF16_DOT
// Columns [0, cols) of S^T (keys x ld floats, keys even) to P^T as pairs of keys (pp, ld per key
// pair), l += the column sums: exponentiate_columns' arithmetic and order (Scaled: S^T times
// scale first), then the pack, without storing P^T in float. cols a multiple of 16.
template <bool Scaled = false>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), noinline)) void exponentiate_pairs_avx512(
    const float* st, int keys, int ld, const float* m_sub, float* l, Pair* pp, int cols, float scale = 1.0f) {
  using V = simd::vec<float>;
  for (int c = 0; c < cols; c += 16) {
    const V m = simd::load(m_sub + c);
    V sum = simd::splat(0.0f);
    for (int j2 = 0; j2 < keys / 2; ++j2) {
      const float* s = st + std::ptrdiff_t(2 * j2) * ld + c;
      V x0 = simd::load(s), x1 = simd::load(s + ld);
      if constexpr (Scaled) x0 *= scale, x1 *= scale;
      const V p0 = exp2_nonpositive<float>(x0 - m);
      sum += p0;
      const V p1 = exp2_nonpositive<float>(x1 - m);
      sum += p1;
      __m512 even, odd;
      std::memcpy(&even, &p0, sizeof even);
      std::memcpy(&odd, &p1, sizeof odd);
      _mm512_storeu_si512(pp + std::ptrdiff_t(j2) * ld + c, pair_vector_avx512(even, odd));
    }
    simd::store(l + c, simd::load(l + c) + sum);
  }
}
#endif

template <class ExecSpace>
struct PairColumnTiles : ColumnTiles<ExecSpace, float, bf16, bf16> {
  using Base = ColumnTiles<ExecSpace, float, bf16, bf16>;
  using Member = typename Base::Member;
  using ScratchBuffer = typename Base::ScratchBuffer;
  using Gemm = TeamPairGemm<Base::R, Base::J>;
  static constexpr int R = Base::R;
  static constexpr int J = Base::J;
  static constexpr int tile_key_factor = Base::Tn::pair_key_factor;

  bool hardware = false;  // the instruction, else its emulation (bf16_dot_on_hardware())

  // Pairs of dims of one row (the head dim rounded up to even) and of keys of a scored tile.
  KOKKOS_INLINE_FUNCTION int dim_pairs() const { return (this->geo.head_dim + 1) / 2; }
  KOKKOS_INLINE_FUNCTION int key_pairs() const { return this->geo.keys_p / 2; }

  struct Tiles : Base::Tiles {
    Pair* qp;  // Q^T as pairs of dims: dim_pairs x rows_p
    Pair* kp;  // K tile as pairs of dims, when not read in place: keys_p x dim_pairs
    Pair* vp;  // V tile as pairs of keys: key_pairs x dims_p
    Pair* pp;  // P^T as pairs of keys: key_pairs x rows_p
  };
  using Head = Tiles;
  // The K rows of the tile being folded (in place or kp) and where V's rows lie, for the exact
  // path of masked tiles with non-finite values (v_row).
  struct Cursor : Base::Cursor {
    const Pair* pairs = nullptr;
    std::ptrdiff_t pair_row = 0;  // in pairs
    int b = 0, hk = 0;
    std::int64_t kb = 0;
  };

  // Scratch in 4-byte elements: Q^T pairs, O^T, K pairs, V pairs, S^T, P^T pairs, four row
  // vectors, at the sizes given (padded layouts pass theirs), and a line's worth to align them.
  KOKKOS_INLINE_FUNCTION static std::size_t elements_of(std::size_t rows, std::size_t keys, std::size_t D2,
                                                        std::size_t dims) {
    return D2 * rows + dims * rows + keys * D2 + keys / 2 * dims + keys * rows + keys / 2 * rows + 4 * rows + 16;
  }
  KOKKOS_INLINE_FUNCTION std::size_t scratch_elements() const {
    return elements_of(this->geo.rows_p, this->geo.keys_p, dim_pairs(), this->geo.dims_p);
  }
  std::size_t scratch_bytes() const { return ScratchBuffer::shmem_size(scratch_elements()); }

  KOKKOS_INLINE_FUNCTION Tiles carve(const Member& member) const {
    return carve_arrays(member, this->geo.rows_p, this->geo.keys_p, dim_pairs(), this->geo.dims_p);
  }
  // The arrays of elements_of, each on a 64-byte line: the AMX tiles load whole lines (a tile load
  // of rows that straddle lines cost three times as much on Emerald Rapids).
  KOKKOS_INLINE_FUNCTION Tiles carve_arrays(const Member& member, std::size_t rows, std::size_t keys, std::size_t D2,
                                            std::size_t dims) const {
    const ScratchBuffer buf(member.team_scratch(this->scratch_level), elements_of(rows, keys, D2, dims));
    float* next = buf.data() + (64 - reinterpret_cast<std::uintptr_t>(buf.data()) % 64) % 64 / sizeof(float);
    const auto take = [&](std::size_t n) {
      float* p = next;
      next += n;
      return p;
    };
    Tiles t;
    t.qt = t.k = t.v = nullptr;
    t.qp = reinterpret_cast<Pair*>(take(D2 * rows));
    t.ot = take(dims * rows);
    t.kp = reinterpret_cast<Pair*>(take(keys * D2));
    t.vp = reinterpret_cast<Pair*>(take(keys / 2 * dims));
    t.st = take(keys * rows);
    t.pp = reinterpret_cast<Pair*>(take(keys / 2 * rows));
    t.m = take(rows);
    t.l = take(rows);
    t.alpha = take(rows);
    t.tile_max = take(rows);
    return t;
  }
  KOKKOS_INLINE_FUNCTION const Head& head(const Tiles& s, int) const { return s; }

  // V row j of the tile where it lies (the exact path of masked tiles reads it widened).
  KOKKOS_INLINE_FUNCTION const bf16* v_row(const Cursor& c, int, int j) const {
    return this->p.v_ptr(c.b, c.kb + j, c.hk);
  }

  // Q^T as pairs of dims (padding rows and the odd dim's partner zero), O^T = 0. q keeps its bits:
  // the scale multiplies the scores.
  template <class QRow>
  KOKKOS_INLINE_FUNCTION bool load_query_block(const Member& member, const Head& h, const QRow& q_row) const {
    const auto& g = this->geo;
    const int D = this->p.head_dim, D2 = dim_pairs();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, g.rows_p), [&](const int r) {
      const bf16* q = q_row(r);
      for (int d2 = 0; d2 < D2; ++d2) h.qp[d2 * g.rows_p + r] = row_pair(q, d2, D);
      for (int d = 0; d < g.dims_p; ++d) h.ot[d * g.rows_p + r] = 0.0f;
    });
    return true;
  }

  KOKKOS_INLINE_FUNCTION void first_tile(const Member&, const TileWork&, std::int64_t, const Tiles&, Cursor&) const {}
  KOKKOS_INLINE_FUNCTION void end_tile(Cursor&) const {}

  // K of the tile in place as pairs where its rows are (dense or ragged, full tile, even head dim
  // and strides), else copied as pairs (keys past n_keys zero); V packed as pairs of keys (keys
  // past n_keys and dims past head_dim zero).
  KOKKOS_INLINE_FUNCTION void stage(const Member& member, const TileWork& w, std::int64_t kb, int n_keys, std::int64_t,
                                    int, const Tiles& s, Cursor& c) const {
    const auto& p = this->p;
    const auto& g = this->geo;
    const int D = p.head_dim, D2 = dim_pairs();
    c.b = w.b;
    c.hk = w.hk;
    c.kb = kb;
    const int scored = this->score_keys(n_keys);
    // In place needs whole pairs in each row (an odd head dim's last pair would reach past it).
    stage_keys(member, w, kb, n_keys, scored, D2,
               Base::Tn::kv_in_place && !p.kv_page_indptr && n_keys == g.keys_p && D % 2 == 0, s, c);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, (scored + 1) / 2), [&](const int j2) {
      const bf16* v0 = 2 * j2 < n_keys ? p.v_ptr(w.b, kb + 2 * j2, w.hk) : nullptr;
      const bf16* v1 = 2 * j2 + 1 < n_keys ? p.v_ptr(w.b, kb + 2 * j2 + 1, w.hk) : nullptr;
      pack_value_pair(v0, v1, D, g.dims_p, s.vp + std::ptrdiff_t(j2) * g.dims_p);
    });
    member.team_barrier();
  }

  // K of the tile as rows of D2 pairs of dims: in place where its rows are (in_place, and rows a
  // whole number of pairs apart), else copied with the padding keys and pairs zero.
  KOKKOS_INLINE_FUNCTION void stage_keys(const Member& member, const TileWork& w, std::int64_t kb, int n_keys,
                                         int scored, int D2, bool in_place, const Tiles& s, Cursor& c) const {
    const auto& p = this->p;
    if (in_place && p.k.stride_seq % 2 == 0) {
      c.pairs = reinterpret_cast<const Pair*>(p.k_ptr(w.b, kb, w.hk));
      c.pair_row = p.k.stride_seq / 2;
      return;
    }
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, scored), [&](const int j) {
      const bf16* k = j < n_keys ? p.k_ptr(w.b, kb + j, w.hk) : nullptr;
      for (int d2 = 0; d2 < D2; ++d2) s.kp[j * D2 + d2] = row_pair(k, d2, p.head_dim);
    });
    c.pairs = s.kp;
    c.pair_row = D2;
  }

  // out[d] = (v0[d], v1[d]) for d < D, zero up to dims (a null row is zeros).
  KOKKOS_INLINE_FUNCTION static void pack_value_pair(const bf16* v0, const bf16* v1, int D, int dims, Pair* out) {
    int d = 0;
#if KATTN_HOST_SIMD
    typedef std::uint16_t half_vec __attribute__((vector_size(32)));
    typedef std::uint32_t word_vec __attribute__((vector_size(64)));
    if (v0 && v1)
      for (; d + 16 <= D; d += 16) {
        half_vec a, b;
        std::memcpy(&a, v0 + d, sizeof a);
        std::memcpy(&b, v1 + d, sizeof b);
        const word_vec w = __builtin_convertvector(a, word_vec) | (__builtin_convertvector(b, word_vec) << 16);
        std::memcpy(out + d, &w, sizeof w);
      }
#endif
    for (; d < dims; ++d) out[d] = key_pair(v0, v1, d, D);
  }

  // S^T = scale K Q^T over pairs of dims; on a tile the window cuts, only the micro-tiles holding
  // a key some query of their columns sees.
  KOKKOS_INLINE_FUNCTION void scores(const Member& member, const Tiles& s, const Cursor& c, int keys, bool windowed,
                                     const TileVisibility& vis) const {
    Gemm::invoke_blocks(
        member, keys, this->geo.rows_p, dim_pairs(), c.pairs, c.pair_row, 1, s.qp, this->geo.rows_p, s.st,
        this->geo.rows_p, nullptr, this->q_scale,
        [&](int m, int n, int&, int&) { return !windowed || vis.sees(n, n + J, m, m + R); }, hardware);
  }

  // P^T = 2^(S^T - m) and its column sums into l, P^T rounded to pairs of keys for the values. A
  // tile the exact path of masked values reads (exact) also keeps P^T in float (score()); the
  // others go from S^T to the pairs in one pass. Both give the same bits.
  KOKKOS_INLINE_FUNCTION void exponentiate(const Member& member, const Head& h, int keys, bool exact) const {
    exponentiate_scaled<false>(member, h, keys, exact, 1.0f);
  }
  // The same of scale S^T, with Scaled (a layout that leaves S^T unscaled).
  template <bool Scaled>
  KOKKOS_INLINE_FUNCTION void exponentiate_scaled(const Member& member, const Head& h, int keys, bool exact,
                                                  float scale) const {
    const int rows = this->geo.rows_p;
#if KATTN_X86_BF16_DOT
    if (hardware && !exact) {
      Kokkos::parallel_for(Kokkos::TeamThreadRange(member, rows / J), [&](const int cb) {
        exponentiate_pairs_avx512<Scaled>(h.st + cb * J, keys, rows, h.tile_max + cb * J, h.l + cb * J,
                                          h.pp + cb * J, J, scale);
      });
      return;
    }
#endif
    (void)exact;
    exponentiate_columns<Scaled>(member, h.st, keys, rows, h.tile_max, h.l, scale);
    member.team_barrier();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, rows / J), [&](const int cb) {
      // Each thread packs whole columns of J query rows (a block its values product reads).
      for (int j2 = 0; j2 < keys / 2; ++j2) {
        const float* even = h.st + std::ptrdiff_t(2 * j2) * rows + cb * J;
        Pair* out = h.pp + std::ptrdiff_t(j2) * rows + cb * J;
        pack_columns(even, even + rows, out);
      }
    });
  }

  // out[c] = (even[c], odd[c]) rounded, for the J columns of one block.
  KOKKOS_INLINE_FUNCTION void pack_columns(const float* even, const float* odd, Pair* out) const {
#if KATTN_X86_BF16_DOT
    if (hardware) {
      pack_pairs_avx512(even, odd, out, J);
      return;
    }
#endif
    pack_pairs_emulated(even, odd, out, J);
  }

  // O^T = O^T diag(alpha) + V^T P^T over pairs of keys; on a tile the window cuts, each block of
  // query columns sums over the key pairs holding the keys its queries see.
  KOKKOS_INLINE_FUNCTION void values(const Member& member, const Head& h, const Cursor&, int, int n_keys, bool windowed,
                                     const TileVisibility& vis) const {
    const int rows = this->geo.rows_p;
    Gemm::invoke_blocks(
        member, this->geo.dims_p, rows, (n_keys + 1) / 2, h.vp, 1, this->geo.dims_p, h.pp, rows, h.ot, rows, h.alpha,
        1.0f,
        [&](int, int n, int& lo, int& hi) {
          if (windowed) vis.keys_of_rows(n, n + J, lo, hi);
          return true;
        },
        hardware);
  }
};

template <class ExecSpace>
using PairTiledAttention = TileLoop<ExecSpace, float, PairColumnTiles<ExecSpace>>;

}  // namespace detail
}  // namespace kattn
