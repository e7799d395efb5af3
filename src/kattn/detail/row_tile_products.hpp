// Tile products and online softmax for tiles with few query rows (decode: one position times the
// GQA group), where the transposed tiles of tile_gemm.hpp would leave most vector lanes idle. Here
// the lanes run over the head dim and the tiles are row-major, query rows first:
//   S (rows x keys) = Q K^T   as dot products, W at a time, whose lanes one shuffle tree sums
//                             (simd_reduce.hpp): K rows are read contiguously, never transposed;
//   P = 2^(S - m) per row      the same state algebra as every kernel (rescale_rows);
//   O (rows x dims) = diag(alpha) O + P V   broadcast P, contiguous V rows.
// K and V rows are reached through one pointer per key (RowPtr, plus an offset per KV head), so a
// dense, ragged or paged cache is read where it lies, in any page order. Rows come in blocks of 1, 2, 4 or 8 so that a
// single head (GQA 1:1) does no work for padding rows.
//
// Barrier contract: no team-level routine barriers on exit; the caller does between steps.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "kattn/compat.hpp"
#include "kattn/detail/exp2.hpp"
#include "kattn/detail/simd.hpp"
#include "kattn/detail/simd_reduce.hpp"
#include "kattn/detail/tile_geometry.hpp"
#include "kattn/core/state.hpp"
#include "kattn/core/storage.hpp"

namespace kattn {
namespace detail {

// One K or V row: head_dim (padded to the lanes) contiguous values.
template <class T>
struct RowPtr {
  const T* p;
};

// Asks for the cache line holding p (host only). A decode reads each K/V row once, so the next
// tile's rows are requested while the current one is folded, a line next to each line it reads:
// spread over the work, never in bursts that would fill the miss buffers and stall the core.
// (Without it a group of 8 heads decodes at about 60% of the speed; perf/RESULTS.md.)
template <class T>
KOKKOS_INLINE_FUNCTION void prefetch_line(const T* p) {
#if KATTN_HOST_SIMD
  // Into L2, not L1 (prefetcht2): a tile ahead is more than L1 holds, and filling L1 with it would
  // evict the tile being folded. Measured against prefetcht0 and prefetchnta in perf/RESULTS.md.
  __builtin_prefetch(p, 0, 1);
#else
  (void)p;
#endif
}

// Vector lanes of the row tiles: the host SIMD width, 1 where there is none.
template <class T>
KOKKOS_INLINE_FUNCTION constexpr int row_lanes() {
#if KATTN_HOST_SIMD
  return simd::width<T>();
#else
  return 1;
#endif
}

struct RowTileGeometry {
  int block_q = 0;    // query rows per tile and KV head
  int block_k = 0;    // keys per tile
  int head_dim = 0;   // D
  int heads = 1;      // KV heads per team (consecutive), each with its own rows
  int row_block = 1;  // rows the micro-kernels take together: 1, 2, 4 or 8
  int rows_p = 0;     // block_q rounded up to row_block
  int keys_p = 0;     // block_k rounded up to the lanes
  int dims_p = 0;     // head_dim rounded up to the lanes
  bool in_place = false;  // K/V rows read where they lie (dims_p == head_dim); else copied, padded

  static RowTileGeometry make(int block_q, int block_k, int head_dim, int heads, int lanes) {
    RowTileGeometry g;
    g.block_q = block_q;
    g.block_k = block_k;
    g.head_dim = head_dim;
    g.heads = heads;
    g.row_block = lanes == 1 ? 1 : block_q <= 1 ? 1 : block_q <= 2 ? 2 : block_q <= 4 ? 4 : 8;
    g.rows_p = round_up(block_q, g.row_block);
    g.keys_p = round_up(block_k, lanes);
    g.dims_p = round_up(head_dim, lanes);
    g.in_place = g.dims_p == head_dim;
    return g;
  }
  // Per KV head: Q, O (rows_p x dims_p), S/P (rows_p x keys_p), four row vectors (m, l, alpha,
  // tile max), and K/V copies (keys_p x dims_p each) when not read in place.
  KOKKOS_INLINE_FUNCTION std::size_t head_elements() const {
    return 2 * std::size_t(rows_p) * dims_p + std::size_t(rows_p) * keys_p + 4 * std::size_t(rows_p);
  }
  KOKKOS_INLINE_FUNCTION std::size_t copy_elements() const { return in_place ? 0 : std::size_t(keys_p) * dims_p; }
  // Scratch of one team, in the order the kernel carves it: the heads' arrays, the K and V
  // copies ...
  KOKKOS_INLINE_FUNCTION std::size_t scratch_elements() const { return heads * (head_elements() + 2 * copy_elements()); }
  // ... and the row pointers of two tiles (the current one and the prefetched next), K and V.
  KOKKOS_INLINE_FUNCTION std::size_t pointer_elements() const { return 4 * std::size_t(keys_p); }
};

// ---- S = Q K^T ---------------------------------------------------------------------------------

#if KATTN_HOST_SIMD
namespace row_simd {

template <class T, int RB, int KB, std::size_t... I>
inline void fma_block(std::array<simd::vec<T>, RB * KB>& acc, const std::array<simd::vec<T>, RB>& q,
                      const std::array<simd::vec<T>, KB>& k, std::index_sequence<I...>) {
  ((acc[I] += q[I / KB] * k[I % KB]), ...);
}
// N zero vectors, built in registers (a fill() of the array went through a memset on the stack).
template <class T, std::size_t... I>
inline std::array<simd::vec<T>, sizeof...(I)> zeros(std::index_sequence<I...>) {
  return {{(static_cast<void>(I), simd::splat<T>(T(0)))...}};
}
// A loaded vector, pinned in a register (Pin: one used by several FMAs) or left for the compiler
// to fold into the FMA that uses it (pinned, the vectors used once would spill with AVX2).
template <class T, bool Pin>
inline simd::vec<T> operand(simd::vec<T> v) {
  if constexpr (Pin) return simd::pinned<T>(v);
  return v;
}
template <class T, bool Pin, std::size_t N, class KV, std::size_t... I>
inline void load_rows(std::array<simd::vec<T>, N>& v, const KV* const* p, std::ptrdiff_t d, std::index_sequence<I...>) {
  ((v[I] = operand<T, Pin>(simd::load_as<T>(p[I] + d))), ...);
}
template <class T, bool Pin, std::size_t N, std::size_t... I>
inline void load_strided(std::array<simd::vec<T>, N>& v, const T* p, int ld, std::ptrdiff_t d,
                         std::index_sequence<I...>) {
  ((v[I] = operand<T, Pin>(simd::load(p + I * ld + d))), ...);
}
template <class T, std::size_t N, class KV, std::size_t... I>
inline simd::vec<T> dot_row(const std::array<simd::vec<T>, N>& q, const KV* k, std::index_sequence<I...>) {
  constexpr int W = simd::width<T>();
  return ((q[I] * simd::load_as<T>(k + I * W)) + ...);
}
template <class T, std::size_t N, class KV, std::size_t... I>
inline std::array<simd::vec<T>, sizeof...(I)> dot_rows(const std::array<simd::vec<T>, N>& q, const RowPtr<KV>* krow,
                                                       std::ptrdiff_t off, std::index_sequence<I...>) {
  return {{dot_row<T, N>(q, krow[I].p + off, std::make_index_sequence<N>())...}};
}

}  // namespace row_simd
#endif

// s[r * lds + j] = sum_d q[r * ldq + d] k_j[d] for RB rows and KB = W / RB keys (k_j = krow[j].p +
// off): W dot products whose lane sums come out of one shuffle tree. Each loaded vector is used
// RB or KB times from a register.
// knext (or null): rows of the next tile, whose lines are prefetched next to those read here.
// K rows of another storage type than T (16-bit) are widened as they are loaded.
template <class T, int RB, class KV>
KOKKOS_INLINE_FUNCTION void score_block(int dims_p, const T* KOKKOS_RESTRICT q, int ldq, const RowPtr<KV>* krow,
                                        std::ptrdiff_t off, T* KOKKOS_RESTRICT s, int lds,
                                        const RowPtr<KV>* knext = nullptr) {
#if KATTN_HOST_SIMD
  using V = simd::vec<T>;
  constexpr int W = simd::width<T>();
  constexpr int KB = W / RB;
  std::array<V, W> acc = row_simd::zeros<T>(std::make_index_sequence<W>());
  const KV* kp[KB];
  for (int j = 0; j < KB; ++j) kp[j] = krow[j].p + off;
  for (int d = 0; d < dims_p; d += W) {
    if (knext)
      for (int j = 0; j < KB; ++j) prefetch_line(knext[j].p + off + d);
    std::array<V, KB> kv;
    std::array<V, RB> qv;
    row_simd::load_rows<T, (RB > 1)>(kv, kp, d, std::make_index_sequence<KB>());
    row_simd::load_strided<T, (KB > 1)>(qv, q, ldq, d, std::make_index_sequence<RB>());
    row_simd::fma_block<T, RB, KB>(acc, qv, kv, std::make_index_sequence<W>());
  }
  const V sums = simd::sum_lanes<T>(acc);
  if constexpr (KB == W) {
    simd::store(s, sums);
  } else {
    T tmp[W];
    simd::store(tmp, sums);
    for (int r = 0; r < RB; ++r)
      for (int j = 0; j < KB; ++j) s[r * lds + j] = tmp[r * KB + j];
  }
#else
  (void)knext;
  for (int r = 0; r < RB; ++r) {
    T acc = 0;
    for (int d = 0; d < dims_p; ++d) acc += q[r * ldq + d] * T(widen(krow[0].p[off + d]));
    s[r * lds] = acc;
  }
#endif
}

#if KATTN_HOST_SIMD
// One row against W keys with the row's NQ = dims_p / W vectors held in registers: each K row is
// read once, start to end (rows of one KV head lie 4 KB apart or more, and sixteen of them read
// side by side, a vector at a time, fight over the same L1 sets).
template <class T, int NQ, class KV>
inline void score_row(const T* KOKKOS_RESTRICT q, const RowPtr<KV>* krow, std::ptrdiff_t off, T* KOKKOS_RESTRICT s,
                      const RowPtr<KV>* knext) {
  using V = simd::vec<T>;
  constexpr int W = simd::width<T>();
  if (knext)
    for (int j = 0; j < W; ++j)
      for (int d = 0; d < NQ * W; d += 64 / static_cast<int>(sizeof(KV))) prefetch_line(knext[j].p + off + d);
  std::array<V, NQ> qv;
  row_simd::load_strided<T, true>(qv, q, W, 0, std::make_index_sequence<NQ>());
  simd::store(s, simd::sum_lanes<T>(row_simd::dot_rows<T, NQ>(qv, krow, off, std::make_index_sequence<W>())));
}
#endif

// One row against the lanes' worth of keys, the best way for the head dim.
template <class T, class KV>
KOKKOS_INLINE_FUNCTION void score_one_row(int dims_p, const T* q, const RowPtr<KV>* krow, std::ptrdiff_t off, T* s,
                                          const RowPtr<KV>* knext) {
#if KATTN_HOST_SIMD
  switch (dims_p / simd::width<T>()) {
    case 1: return score_row<T, 1>(q, krow, off, s, knext);
    case 2: return score_row<T, 2>(q, krow, off, s, knext);
    case 4: return score_row<T, 4>(q, krow, off, s, knext);
    case 6: return score_row<T, 6>(q, krow, off, s, knext);
    case 8: return score_row<T, 8>(q, krow, off, s, knext);
    default: break;
  }
#endif
  score_block<T, 1>(dims_p, q, dims_p, krow, off, s, 0, knext);
}

// S_h (rows_p x keys, ld keys_p) = Q_h (rows_p x dims_p) K_h^T for the `heads` KV heads of a
// team, K_h rows at krow[j].p + head_off(h), keys a multiple of the lanes; head_q(h) and head_s(h)
// give Q_h and S_h. Key blocks outer, heads and row blocks inner: the keys are read in the order
// they lie in memory (a key's heads side by side), which the hardware prefetchers follow, and a
// block's K rows stay in L1 across the row blocks. knext (or null): the next tile's K rows,
// prefetched block by block (n_next of them).
template <class Member, class T, class HeadQ, class HeadOff, class HeadS, class KV>
KOKKOS_INLINE_FUNCTION void row_scores(const Member& member, const RowTileGeometry& g, int keys, int heads,
                                       const HeadQ& head_q, const HeadOff& head_off, const HeadS& head_s,
                                       const RowPtr<KV>* krow, const RowPtr<KV>* knext, int n_next) {
  constexpr int W = row_lanes<T>();
  // Blocks of 8 rows (a GQA group of 8) where the lanes hold two keys' sums of 8 rows: each K row
  // is then read once per tile, not twice (GQA 8:1 decode 0.68 of the stream against 0.65).
  const int rb = g.row_block < 4 ? g.row_block : W >= 2 * g.row_block ? g.row_block : (W >= 4 ? 4 : 1);
  const int kb = W / rb > 0 ? W / rb : 1;
  const int row_blocks = g.rows_p / rb;
  const int per_key_block = row_blocks * heads;
  const int key_blocks = keys / kb;
  // Key-major when all the heads' Q fit in a third of L1 with room for K; else head by head, so
  // that one head's Q stays in L1 across the tile (a group of 8 rows has 4 KB of Q per head).
  const bool key_major = std::size_t(heads) * g.rows_p * g.dims_p * sizeof(T) <= 16 * 1024;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, per_key_block * key_blocks), [&](const int blk) {
    int j0, hl, r0;
    if (key_major) {
      j0 = (blk / per_key_block) * kb;
      hl = (blk % per_key_block) / row_blocks;
      r0 = (blk % row_blocks) * rb;
    } else {
      hl = blk / (row_blocks * key_blocks);
      j0 = ((blk / row_blocks) % key_blocks) * kb;
      r0 = (blk % row_blocks) * rb;
    }
    const std::ptrdiff_t off = head_off(hl);
    const RowPtr<KV>* pf = knext && r0 == 0 && j0 < n_next ? knext + j0 : nullptr;
    const T* qr = head_q(hl) + r0 * g.dims_p;
    T* sr = head_s(hl) + r0 * g.keys_p + j0;
    if (rb == 1)
      score_one_row<T>(g.dims_p, qr, krow + j0, off, sr, pf);
    else if (rb == 2)
      score_block<T, (W >= 2 ? 2 : 1)>(g.dims_p, qr, g.dims_p, krow + j0, off, sr, g.keys_p, pf);
    else if (rb == 4)
      score_block<T, (W >= 4 ? 4 : 1)>(g.dims_p, qr, g.dims_p, krow + j0, off, sr, g.keys_p, pf);
    else
      score_block<T, (W >= 8 ? 8 : 1)>(g.dims_p, qr, g.dims_p, krow + j0, off, sr, g.keys_p, pf);
  });
}

// ---- one row per KV head: (key, head) pairs in memory order -----------------------------------
//
// A decode with one query per KV head (GQA 1:1) has one row per head, and the rows of a key's
// heads lie side by side ([seq, heads, dim] caches and pages). Read head by head over a block of
// keys, the reads jump between keys inside each 4 KB page whenever a page holds more than one key
// (a 16-bit cache of 8 heads at D = 128 holds two), and the L2 streamer, which follows one
// direction per page, loses them: such a decode read at about 0.7 of the streaming rate on
// 16-bit caches (perf/RESULTS.md). So these teams read every (key, head) pair in memory order,
// for S and again for P V, and prefetch the pairs `ahead` keys on, running on into the rows read
// next (the tile's V from its K, the next tile's K from its V): one unbroken stream, as a
// streaming read has.

// The rows read after a pass over a tile's K (its V) or V (the next tile's K): where the prefetch
// goes once it reaches the end of the rows being read. Rows read in place: head hl's row of key j
// is rows[j].p + hl * stride_head.
template <class KV>
struct RowsAfter {
  const RowPtr<KV>* rows = nullptr;
  int n = 0;
  std::ptrdiff_t stride_head = 0;
};

// Head hl's row of key j of the `keys` rows being read (at offset off), else of the rows after.
template <class KV>
KOKKOS_INLINE_FUNCTION const KV* row_ahead(const RowPtr<KV>* rows, int keys, std::ptrdiff_t off,
                                           const RowsAfter<KV>& after, int hl, int j) {
  if (j < keys) return rows[j].p + off;
  j -= keys;
  return j < after.n ? after.rows[j].p + hl * after.stride_head : nullptr;
}

template <class KV>
KOKKOS_INLINE_FUNCTION void prefetch_row(const KV* p, int dims) {
  constexpr int line = 64 / static_cast<int>(sizeof(KV));
  for (int d = 0; d < dims; d += line) prefetch_line(p + d);
}

#if KATTN_HOST_SIMD
// Pairs [t_begin, t_end) (t = key * heads + head, multiples of the lanes): W dot products at a
// time whose lane sums come out of one shuffle tree, as score_row's; Q rows are read from L1.
template <class T, int NQ, class KV, class HeadQ, class HeadOff, class HeadS>
inline void score_pairs(int t_begin, int t_end, int keys, int heads, int ahead, const HeadQ& head_q,
                        const HeadOff& head_off, const HeadS& head_s, const RowPtr<KV>* krow,
                        const RowsAfter<KV>& after) {
  using V = simd::vec<T>;
  constexpr int W = simd::width<T>();
  int j = t_begin / heads, hl = t_begin % heads;
  for (int t0 = t_begin; t0 < t_end; t0 += W) {
    std::array<V, W> acc;
    int js[W], hs[W];
    KATTN_UNROLL
    for (int i = 0; i < W; ++i) {
      const std::ptrdiff_t off = head_off(hl);
      if (const KV* a = row_ahead(krow, keys, off, after, hl, j + ahead)) prefetch_row(a, NQ * W);
      std::array<V, NQ> qv;
      // Pinned though used once: GCC then keeps the W sums in registers (with AVX-512).
      row_simd::load_strided<T, true>(qv, head_q(hl), W, 0, std::make_index_sequence<NQ>());
      acc[i] = row_simd::dot_row<T, NQ>(qv, krow[j].p + off, std::make_index_sequence<NQ>());
      js[i] = j, hs[i] = hl;
      if (++hl == heads) hl = 0, ++j;
    }
    T sums[W];
    simd::store(sums, simd::sum_lanes<T>(acc));
    for (int i = 0; i < W; ++i) head_s(hs[i])[js[i]] = sums[i];
  }
}

// O_h = diag(alpha_h) O_h + P_h V_h for heads [h_begin, h_end), keys outer: the V rows are read in
// memory order and the heads' O rows (one per head) stay in L1.
template <class T, int NV, class KV, class HeadP, class HeadOff, class HeadO, class HeadAlpha>
inline void value_pairs(int keys, int h_begin, int h_end, int ahead, const HeadP& head_p, const HeadOff& head_off,
                        const HeadO& head_o, const HeadAlpha& head_alpha, const RowPtr<KV>* vrow,
                        const RowsAfter<KV>& after) {
  constexpr int W = simd::width<T>();
  for (int hl = h_begin; hl < h_end; ++hl) {
    T* o = head_o(hl);
    const T alpha = head_alpha(hl);
    for (int v = 0; v < NV; ++v) simd::store(o + v * W, rescaled_o(simd::load(o + v * W), alpha));
  }
  for (int j = 0; j < keys; ++j)
    for (int hl = h_begin; hl < h_end; ++hl) {
      const std::ptrdiff_t off = head_off(hl);
      if (const KV* a = row_ahead(vrow, keys, off, after, hl, j + ahead)) prefetch_row(a, NV * W);
      const T a = head_p(hl)[j];
      const KV* vr = vrow[j].p + off;
      T* o = head_o(hl);
      for (int v = 0; v < NV; ++v) simd::store(o + v * W, simd::load(o + v * W) + a * simd::load_as<T>(vr + v * W));
    }
}
#endif

// Whether a team's tiles take the pair order: one row per head, several heads, K/V rows read in
// place, a head dim of 1, 2, 4, 6 or 8 vectors (host SIMD only).
template <class T>
KOKKOS_INLINE_FUNCTION bool pair_order(const RowTileGeometry& g) {
#if KATTN_HOST_SIMD
  const int n = g.dims_p / row_lanes<T>();
  return g.rows_p == 1 && g.heads > 1 && g.in_place && (n == 1 || n == 2 || n == 4 || n == 6 || n == 8);
#else
  (void)g;
  return false;
#endif
}

// S_h (one row, `keys` keys) = q_h K_h^T for every head of the team, the pairs split over the
// team's threads in blocks of the lanes.
template <class Member, class T, class HeadQ, class HeadOff, class HeadS, class KV>
KOKKOS_INLINE_FUNCTION void pair_scores(const Member& member, const RowTileGeometry& g, int keys, int ahead,
                                        const HeadQ& head_q, const HeadOff& head_off, const HeadS& head_s,
                                        const RowPtr<KV>* krow, const RowsAfter<KV>& after) {
#if KATTN_HOST_SIMD
  constexpr int W = simd::width<T>();
  const int blocks = keys * g.heads / W;
  const int per_thread = (blocks + member.team_size() - 1) / member.team_size();
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, member.team_size()), [&](const int part) {
    const int t_begin = part * per_thread * W;
    const int t_end = (part + 1) * per_thread < blocks ? (part + 1) * per_thread * W : blocks * W;
    if (t_begin >= t_end) return;
    switch (g.dims_p / W) {
#define KATTN_PAIR_SCORES(NQ)                                                                                        \
  case NQ:                                                                                                           \
    return score_pairs<T, NQ>(t_begin, t_end, keys, g.heads, ahead, head_q, head_off, head_s, krow, after);
      KATTN_PAIR_SCORES(1) KATTN_PAIR_SCORES(2) KATTN_PAIR_SCORES(4) KATTN_PAIR_SCORES(6) KATTN_PAIR_SCORES(8)
#undef KATTN_PAIR_SCORES
      default: break;
    }
  });
#else
  (void)member, (void)g, (void)keys, (void)ahead, (void)head_q, (void)head_off, (void)head_s, (void)krow, (void)after;
#endif
}

// O_h = diag(alpha_h) O_h + P_h V_h for every head of the team, the heads split over its threads.
template <class Member, class T, class HeadP, class HeadOff, class HeadO, class HeadAlpha, class KV>
KOKKOS_INLINE_FUNCTION void pair_values(const Member& member, const RowTileGeometry& g, int keys, int ahead,
                                        const HeadP& head_p, const HeadOff& head_off, const HeadO& head_o,
                                        const HeadAlpha& head_alpha, const RowPtr<KV>* vrow,
                                        const RowsAfter<KV>& after) {
#if KATTN_HOST_SIMD
  constexpr int W = simd::width<T>();
  const int ts = member.team_size();
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, ts), [&](const int part) {
    const int h_begin = part * g.heads / ts, h_end = (part + 1) * g.heads / ts;
    switch (g.dims_p / W) {
#define KATTN_PAIR_VALUES(NV)                                                                                        \
  case NV:                                                                                                           \
    return value_pairs<T, NV>(keys, h_begin, h_end, ahead, head_p, head_off, head_o, head_alpha, vrow, after);
      KATTN_PAIR_VALUES(1) KATTN_PAIR_VALUES(2) KATTN_PAIR_VALUES(4) KATTN_PAIR_VALUES(6) KATTN_PAIR_VALUES(8)
#undef KATTN_PAIR_VALUES
      default: break;
    }
  });
#else
  (void)member, (void)g, (void)keys, (void)ahead, (void)head_p, (void)head_off, (void)head_o, (void)head_alpha,
      (void)vrow, (void)after;
#endif
}

// ---- online softmax on row-major S -------------------------------------------------------------

// Row r of S keeps keys [begin, end) of its first `keys`; the others get -inf. Thread-level.
template <class T>
KOKKOS_INLINE_FUNCTION void mask_row(T* s_row, int keys, int begin, int end) {
  const T neg_inf = -compat::infinity<T>();
  for (int j = 0; j < begin; ++j) s_row[j] = neg_inf;
  for (int j = end; j < keys; ++j) s_row[j] = neg_inf;
}

// s <- softcap * tanh(s / softcap) on the first `keys` of every row (see softcap_tile).
template <class Member, class T>
KOKKOS_INLINE_FUNCTION void softcap_rows(const Member& member, const RowTileGeometry& g, int keys, T* s, T cap_log2,
                                         T inv_cap) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, g.rows_p), [&](const int r) {
    T* row = s + r * g.keys_p;
    for (int j = 0; j < keys; ++j) row[j] = cap_log2 * compat::tanh(row[j] * inv_cap);
  });
}

// tile_max[r] = max of the first `keys` scores of row r, NaN-propagating.
template <class Member, class T>
KOKKOS_INLINE_FUNCTION void row_max(const Member& member, const RowTileGeometry& g, int keys, const T* s,
                                    T* tile_max) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, g.rows_p), [&](const int r) {
    const T* row = s + r * g.keys_p;
    T m = -compat::infinity<T>();
#if KATTN_HOST_SIMD
    using V = simd::vec<T>;
    constexpr int W = simd::width<T>();
    V mv = simd::splat<T>(-compat::infinity<T>());
    for (int j = 0; j < keys; j += W) {
      const V x = simd::load(row + j);
      mv = (x > mv || x != x) ? x : mv;
    }
    m = simd::hmax_nan<T>(mv);
#else
    for (int j = 0; j < keys; ++j) m = max_nan(m, row[j]);
#endif
    tile_max[r] = m;
  });
}

// P = 2^(S - m_sub) on the first `keys` of every row, and l += the row sums.
template <class Member, class T>
KOKKOS_INLINE_FUNCTION void exponentiate_rows(const Member& member, const RowTileGeometry& g, int keys, T* s,
                                              const T* m_sub, T* l) {
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, g.rows_p), [&](const int r) {
    T* row = s + r * g.keys_p;
    T sum = 0;
#if KATTN_HOST_SIMD
    using V = simd::vec<T>;
    constexpr int W = simd::width<T>();
    const V m = simd::splat<T>(m_sub[r]);
    V sv = simd::splat<T>(T(0));
    for (int j = 0; j < keys; j += W) {
      const V p = exp2<T>(simd::load(row + j) - m);
      simd::store(row + j, p);
      sv += p;
    }
    sum = simd::hsum<T>(sv);
#else
    for (int j = 0; j < keys; ++j) {
      row[j] = detail::exp2(row[j] - m_sub[r]);
      sum += row[j];
    }
#endif
    l[r] += sum;
  });
}

// ---- O = diag(alpha) O + P V -------------------------------------------------------------------

// R rows by NV vectors of dims from d0 (V rows at vrow[k].p + off): the accumulators stay in
// registers over the keys.
template <class T, int R, int NV, class KV>
KOKKOS_INLINE_FUNCTION void value_block(int keys, const T* KOKKOS_RESTRICT pr, int ldp, const RowPtr<KV>* vrow,
                                        std::ptrdiff_t off, int d0, T* KOKKOS_RESTRICT o, int ldo,
                                        const T* KOKKOS_RESTRICT alpha, const RowPtr<KV>* vnext, int n_next) {
#if KATTN_HOST_SIMD
  using V = simd::vec<T>;
  constexpr int W = simd::width<T>();
  constexpr int line = 64 / static_cast<int>(sizeof(KV));
  V acc[R][NV];
  KATTN_UNROLL
  for (int r = 0; r < R; ++r)
    KATTN_UNROLL
    for (int v = 0; v < NV; ++v) acc[r][v] = rescaled_o(simd::load(o + r * ldo + d0 + v * W), alpha[r]);
  for (int k = 0; k < keys; ++k) {
    if (k < n_next)
      for (int d = 0; d < NV * W; d += line) prefetch_line(vnext[k].p + off + d0 + d);
    V b[NV];
    KATTN_UNROLL
    for (int v = 0; v < NV; ++v)  // loaded once per key, not once per row (tile_gemm.hpp)
      b[v] = row_simd::operand<T, (R > 1)>(simd::load_as<T>(vrow[k].p + off + d0 + v * W));
    KATTN_UNROLL
    for (int r = 0; r < R; ++r) {
      const T a = pr[r * ldp + k];
      KATTN_UNROLL
      for (int v = 0; v < NV; ++v) acc[r][v] += a * b[v];
    }
  }
  KATTN_UNROLL
  for (int r = 0; r < R; ++r)
    KATTN_UNROLL
    for (int v = 0; v < NV; ++v) simd::store(o + r * ldo + d0 + v * W, acc[r][v]);
#else
  (void)vnext, (void)n_next;
  for (int r = 0; r < R; ++r)
    for (int v = 0; v < NV; ++v) {
      T acc = rescaled_o(o[r * ldo + d0 + v], alpha[r]);
      for (int k = 0; k < keys; ++k) acc += pr[r * ldp + k] * T(widen(vrow[k].p[off + d0 + v]));
      o[r * ldo + d0 + v] = acc;
    }
#endif
}

// The dims of one row block, in panels of NV vectors, the rest one vector at a time.
template <class T, int R, int NV, class KV>
KOKKOS_INLINE_FUNCTION void value_rows(int keys, int dims_p, const T* pr, int ldp, const RowPtr<KV>* vrow,
                                       std::ptrdiff_t off, T* o, int ldo, const T* alpha, const RowPtr<KV>* vnext,
                                       int n_next) {
  constexpr int W = row_lanes<T>();
  int d0 = 0;
  for (; d0 + NV * W <= dims_p; d0 += NV * W)
    value_block<T, R, NV>(keys, pr, ldp, vrow, off, d0, o, ldo, alpha, vnext, n_next);
  for (; d0 < dims_p; d0 += W) value_block<T, R, 1>(keys, pr, ldp, vrow, off, d0, o, ldo, alpha, vnext, n_next);
}

// O (rows_p x dims_p) = diag(alpha) O + P (rows_p x keys, ld keys_p) V (rows at vrow[k].p + off).
// vnext (or null): the next tile's V rows, prefetched with the first row block.
template <class Member, class T, class KV>
KOKKOS_INLINE_FUNCTION void row_values(const Member& member, const RowTileGeometry& g, int keys, const T* pm,
                                       const RowPtr<KV>* vrow, std::ptrdiff_t off, T* o, const T* alpha,
                                       const RowPtr<KV>* vnext, int n_next) {
  const int R = g.row_block;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, g.rows_p / R), [&](const int blk) {
    const int r0 = blk * R;
    const int pf = vnext && r0 == 0 ? n_next : 0;  // the first row block prefetches
    const T* pr = pm + r0 * g.keys_p;
    T* orow = o + r0 * g.dims_p;
    // 16 accumulators from two rows on, one row sweeping 8 vectors of dims per V row load. (With
    // AVX2's 16 registers 8 x 2 spills, yet 8 x 1 read 0.86x as fast on Zen 3: twice the passes
    // over the V rows.)
    if (R == 1)
      value_rows<T, 1, 8>(keys, g.dims_p, pr, g.keys_p, vrow, off, orow, g.dims_p, alpha + r0, vnext, pf);
    else if (R == 2)
      value_rows<T, 2, 8>(keys, g.dims_p, pr, g.keys_p, vrow, off, orow, g.dims_p, alpha + r0, vnext, pf);
    else if (R == 4)
      value_rows<T, 4, 4>(keys, g.dims_p, pr, g.keys_p, vrow, off, orow, g.dims_p, alpha + r0, vnext, pf);
    else
      value_rows<T, 8, 2>(keys, g.dims_p, pr, g.keys_p, vrow, off, orow, g.dims_p, alpha + r0, vnext, pf);
  });
}

}  // namespace detail
}  // namespace kattn
