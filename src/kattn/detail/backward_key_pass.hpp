// The backward's key pass (FlashAttention-2's backward loop order): a league over (sequence,
// KV head, key chunk); a team takes the key tiles of its chunk one at a time, keeps dK and dV of
// the tile in scratch, and streams every query tile that sees the tile through it:
//
//   S = Q K^T, dP = dO V^T                 (rows x keys: the keys are the vector lanes)
//   P = 2^(S - lse2), dS = scale P (dP - D) [x softcap derivative]   (backward_steps.hpp)
//   [d(bias) = P (dP - D), to memory]      (BackwardOptions::dbias: bias_gradient.hpp)
//   dV += P^T dO, dK += dS^T Q             (keys x dims: the head dim is the lanes)
//   dQ = dS K, added to memory             (rows x dims; key_chunks / atomic only: chunk 0 into
//                                          dQ itself, chunks 1, 2, ... into partials)
//
// Rows are (position, head) pairs of the KV head's GQA group, so dK and dV sum over the group's
// query heads inside the team, with no atomics and in a fixed order. Query tiles are aligned to
// row 0 and visited in order; key tiles of a chunk in order (chunk c takes one tile of each round
// of C consecutive tiles, in snake order: chunk_tile).
// K^T, V^T, K are copied once per key tile; Q and dO once per (key tile, query tile); every
// product is one micro-kernel call (tile_gemm.hpp) with contiguous B and C rows.
//
// bf16 pairs (BackwardParams::pair_products: the float copies of bf16 storage, on a CPU whose
// products are bf16 dot products): the same loop with every operand held as pairs of bf16 values
// (pair_gemm.hpp) in the layout its product reads, and P and dS rounded to bf16 for the products
// that read them, as FlashAttention's backward does on GPUs; S, P, dP, dS and the accumulators of
// dK, dV and dQ stay float.
#pragma once

#include <Kokkos_Core.hpp>
#include <climits>
#include <cstdint>

#include "kattn/backward_options.hpp"
#include "kattn/backward_params.hpp"
#include "kattn/compat.hpp"
#include "kattn/core/key_window.hpp"
#include "kattn/core/score_bias.hpp"
#include "kattn/core/tile_visibility.hpp"
#include "kattn/detail/backward_nonfinite.hpp"
#include "kattn/detail/backward_plan.hpp"
#include "kattn/detail/backward_steps.hpp"
#include "kattn/detail/backward_workspace.hpp"
#include "kattn/detail/block_sparse.hpp"
#include "kattn/detail/pair_gemm.hpp"
#include "kattn/detail/simd.hpp"
#include "kattn/detail/tile_gemm.hpp"
#include "kattn/detail/tuning.hpp"

namespace kattn {
namespace detail {

template <class ExecSpace, class T>
struct BackwardKeyPass {
  using Tn = Tuning<ExecSpace, T>;
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = typename Policy::member_type;
  using ScratchBuffer = Kokkos::View<T*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  using KeyLanesGemm = TeamTileGemm<Tn::micro_rows, Tn::wide_micro_cols>;  // S, dP: keys on the lanes
  using DimLanesGemm = TeamTileGemm<Tn::tall_micro_rows, Tn::micro_cols>;  // dV, dK, dQ: head dim on the lanes
  static constexpr int R = backward_micro_tiles<ExecSpace, T>().key_pass_rows();  // M of S, dP and dQ
  // Pairs run on host tuning in float: the micro-tiles are whole 16-lane vectors there.
  static constexpr bool pairs_compile = Tn::host && std::is_same_v<T, float>;
  using KeyLanesPairs = TeamPairGemm<Tn::micro_rows, Tn::wide_micro_cols>;
  using DimLanesPairs = TeamPairGemm<Tn::tall_micro_rows, Tn::micro_cols>;

  BackwardParams<T> p;
  KeyWindow window;
  T k_scale = 1;  // multiplies K^T on load: scale * log2(e), or scale alone when softcapping
  GradientScales<T> g;
  BackwardGeometry geo;
  DqStrategy dq = DqStrategy::key_chunks;
  int chunks = 1;
  int scratch_level = 0;
  BackwardWorkspace<T> ws;
  BlockSparse bs;  // inactive: dense
  ScoreBias bias;  // Options::bias; inactive: none
  ScoreBiasGradient dbias;  // where P (dP - D) goes, of type T and the full shape (bias_gradient.hpp); inactive: none
  // Only key tiles [tile_begin, tile_end) of each sequence (a piece of a call with progress
  // reports); each chunk still takes its tiles in order, so pieces give the same bits as one launch.
  std::int64_t tile_begin = 0, tile_end = INT64_MAX;

  bool hardware = false;  // pairs on the instruction, else its emulation (bf16_dot_on_hardware())

  KOKKOS_INLINE_FUNCTION bool raw_k() const { return dq != DqStrategy::query_pass; }
  KOKKOS_INLINE_FUNCTION bool dq_tile() const { return dq != DqStrategy::query_pass; }
  KOKKOS_INLINE_FUNCTION bool pairs() const { return pairs_compile && p.pair_products; }
  int league_size() const { return p.fwd.batch * p.fwd.heads_kv * chunks; }
  KOKKOS_INLINE_FUNCTION std::size_t scratch_elements() const {
    return pairs() ? geo.key_pass_pair_elements(raw_k(), dq_tile()) : geo.key_pass_elements(raw_k(), dq_tile());
  }
  std::size_t scratch_bytes() const { return ScratchBuffer::shmem_size(scratch_elements()); }

  struct Tiles {
    T* kt;    // K^T scaled, head_dim x keys
    T* vt;    // V^T, head_dim x keys
    T* k;     // K, keys x dims (null for query_pass)
    T* dk;    // dK accumulator, keys x dims
    T* dv;    // dV accumulator, keys x dims
    T* q;     // Q, rows x dims
    T* dout;  // dO, rows x dims
    T* s;     // S, then P; rows x keys
    T* dp;    // dP, then dS; rows x keys
    T* dq;    // dQ tile, rows x dims (null for query_pass)
    T* lse2;  // per row
    T* di;    // per row
    // Pairs only (the float K^T, V^T, K, Q and dO are then null). Pairs of dims: D2 = kp_dims / 2.
    Pair* ktp = nullptr;  // K^T as pairs of dims over keys, D2 x keys (B of S)
    Pair* vtp = nullptr;  // V^T likewise (B of dP)
    Pair* kvn = nullptr;  // K as pairs of keys over dims, keys / 2 x dims (B of dQ; null for query_pass)
    Pair* qb = nullptr;   // Q rows as pairs of dims, rows x D2 (A of S)
    Pair* dob = nullptr;  // dO rows likewise (A of dP)
    Pair* qvn = nullptr;  // Q as pairs of rows over dims, rows / 2 x dims (B of dK)
    Pair* dovn = nullptr; // dO likewise (B of dV)
    Pair* pt = nullptr;   // P as pairs of rows over keys, rows / 2 x keys (A of dV, transposed)
    Pair* dst = nullptr;  // dS likewise (A of dK, transposed)
    Pair* dsb = nullptr;  // dS rows as pairs of keys, rows x keys / 2 (A of dQ; null for query_pass)
  };

  KOKKOS_INLINE_FUNCTION Tiles carve(const ScratchBuffer& buf) const {
    if (pairs()) return carve_pairs(buf);
    const std::size_t kd = std::size_t(geo.kp_keys) * geo.kp_dims, rd = std::size_t(geo.kp_rows) * geo.kp_dims;
    const std::size_t rk = std::size_t(geo.kp_rows) * geo.kp_keys;
    Tiles t;
    t.kt = buf.data();
    t.vt = t.kt + std::size_t(geo.head_dim) * geo.kp_keys;
    T* next = t.vt + std::size_t(geo.head_dim) * geo.kp_keys;
    t.k = raw_k() ? next : nullptr;
    next += raw_k() ? kd : 0;
    t.dk = next;
    t.dv = t.dk + kd;
    t.q = t.dv + kd;
    t.dout = t.q + rd;
    t.s = t.dout + rd;
    t.dp = t.s + rk;
    next = t.dp + rk;
    t.dq = dq_tile() ? next : nullptr;
    next += dq_tile() ? rd : 0;
    t.lse2 = next;
    t.di = t.lse2 + geo.kp_rows;
    return t;
  }

  // The pairs' carve, in the order of BackwardGeometry::key_pass_pair_elements.
  KOKKOS_INLINE_FUNCTION Tiles carve_pairs(const ScratchBuffer& buf) const {
    const std::size_t keys = geo.kp_keys, rows = geo.kp_rows, dims = geo.kp_dims, d2 = dims / 2;
    T* next = buf.data();
    const auto take = [&](std::size_t n) {
      T* at = next;
      next += n;
      return at;
    };
    const auto take_pairs = [&](std::size_t n) { return reinterpret_cast<Pair*>(take(n)); };
    Tiles t;
    t.kt = t.vt = t.k = t.q = t.dout = nullptr;
    t.ktp = take_pairs(d2 * keys);
    t.vtp = take_pairs(d2 * keys);
    t.kvn = raw_k() ? take_pairs(keys / 2 * dims) : nullptr;
    t.dk = take(keys * dims);
    t.dv = take(keys * dims);
    t.qb = take_pairs(rows * d2);
    t.dob = take_pairs(rows * d2);
    t.qvn = take_pairs(rows / 2 * dims);
    t.dovn = take_pairs(rows / 2 * dims);
    t.s = take(rows * keys);
    t.dp = take(rows * keys);
    t.pt = take_pairs(rows / 2 * keys);
    t.dst = take_pairs(rows / 2 * keys);
    t.dsb = dq_tile() ? take_pairs(rows * keys / 2) : nullptr;
    t.dq = dq_tile() ? take(rows * dims) : nullptr;
    t.lse2 = take(rows);
    t.di = take(rows);
    return t;
  }

  // Chunk c's key tile in round r (rounds of `chunks` consecutive tiles), in snake order: tile
  // c of even rounds, chunks - 1 - c of odd ones. Under a causal mask a key tile's work falls with
  // its index, so every two rounds give each chunk the same work, and the threads that share the
  // chunks finish together (in round-robin order chunk 0 had the most, 1.5x chunk 7's at N = 4096).
  KOKKOS_INLINE_FUNCTION std::int64_t chunk_tile(std::int64_t r, int c) const {
    return r * chunks + (r % 2 == 0 ? c : chunks - 1 - c);
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    int rank = member.league_rank();
    const int c = rank % chunks;
    rank /= chunks;
    const int hk = rank % p.fwd.heads_kv;
    const int b = rank / p.fwd.heads_kv;
    const std::int64_t q_len = p.fwd.seq_q_len(b);
    const std::int64_t kv_len = p.fwd.seq_kv_len(b);
    const std::int64_t all_tiles = (kv_len + geo.block_k - 1) / geo.block_k;
    const std::int64_t tiles = all_tiles < tile_end ? all_tiles : tile_end;
    // This chunk's tiles in [tile_begin, tiles), one per round: the first, then the rest.
    const auto in_range = [&](std::int64_t kt) { return kt >= tile_begin && kt < tiles; };
    std::int64_t r = tile_begin / chunks;
    while (r * chunks < tiles && !in_range(chunk_tile(r, c))) ++r;
    if (r * chunks >= tiles) return;
    const Tiles s = carve(ScratchBuffer(member.team_scratch(scratch_level), scratch_elements()));
    const MaskedSpreads nan = masked_spreads(member, p, ws, window, b, hk, q_len, kv_len);
    for (; r * chunks < tiles; ++r) {
      const std::int64_t kt = chunk_tile(r, c);
      if (!in_range(kt)) continue;
      const std::int64_t kb = kt * geo.block_k;
      const int n_keys = static_cast<int>(kv_len - kb < geo.block_k ? kv_len - kb : geo.block_k);
      key_tile(member, b, hk, c, kb, n_keys, q_len, kv_len, nan, s);
    }
  }

  // dK and dV of keys [kb, kb + n_keys): every query tile with a row that sees one of them.
  KOKKOS_INLINE_FUNCTION void key_tile(const Member& member, int b, int hk, int c, std::int64_t kb, int n_keys,
                                       std::int64_t q_len, std::int64_t kv_len, const MaskedSpreads& nan,
                                       const Tiles& s) const {
    load_keys(member, b, hk, kb, n_keys, s);
    member.team_barrier();
    if (q_len > 0) {
      const int G = p.fwd.group_size();
      const std::int64_t i_lo = window.first_query(kb, q_len, kv_len);
      const std::int64_t i_hi = window.last_query(kb + n_keys - 1, q_len, kv_len);
      if (i_lo <= i_hi) {
        const std::int64_t tq_end = (i_hi * G + G - 1) / geo.block_q;
        for (std::int64_t tq = i_lo * G / geo.block_q; tq <= tq_end; ++tq) {
          const std::int64_t t0 = tq * geo.block_q;
          const int n_rows = static_cast<int>(G * q_len - t0 < geo.block_q ? G * q_len - t0 : geo.block_q);
          // Block-sparse: a query tile none of whose rows lists a block of these keys is skipped.
          if (bs.active() && !bs.any_listed(bs.rows_of(hk, G, t0, n_rows), kb, kb + n_keys - 1)) continue;
          query_tile(member, b, hk, c, kb, n_keys, t0, n_rows, q_len, kv_len, s);
        }
      }
    }
    store_keys(member, b, hk, kb, n_keys, q_len, kv_len, nan, s);
    member.team_barrier();
  }

  // One query tile against the team's key tile.
  KOKKOS_INLINE_FUNCTION void query_tile(const Member& member, int b, int hk, int c, std::int64_t kb, int n_keys,
                                         std::int64_t t0, int n_rows, std::int64_t q_len, std::int64_t kv_len,
                                         const Tiles& s) const {
    const int D = p.fwd.head_dim;
    const int m_rows = (n_rows + R - 1) / R * R;  // rows the products compute (padding rows give P = 0)
    load_rows(member, b, hk, t0, m_rows, n_rows, s);
    member.team_barrier();
    // On a tile the window cuts (the causal diagonal), each product computes only the keys (or
    // rows) the other side can see: the gradient rows set the rest of S to -inf, so P = dS = 0.
    // A whole tile computes every micro-tile and its whole sum.
    const TileVisibility vis{window, t0, p.fwd.group_size(), n_rows, kb, n_keys, q_len, kv_len};
    const bool windowed = !vis.whole();
    const auto scores_span = [&](int m, int n, int&, int&) {
      return !windowed || vis.sees(m, m + KeyLanesGemm::rows, n, n + KeyLanesGemm::cols);
    };
    const auto key_grads_span = [&](int m, int, int& lo, int& hi) {
      return !windowed || vis.rows_of_keys(m, m + DimLanesGemm::rows, lo, hi);
    };
    const auto dq_span = [&](int m, int, int& lo, int& hi) {
      if (windowed) vis.keys_of_rows(m, m + DimLanesGemm::rows, lo, hi);
      return true;  // rows that see no key get dQ = 0
    };
    if (pairs()) {
      pair_scores(member, m_rows, scores_span, s);
    } else {
      KeyLanesGemm::template invoke_blocks<false>(member, m_rows, geo.kp_keys, D, s.q, geo.kp_dims, 1, s.kt,
                                                  geo.kp_keys, s.s, geo.kp_keys, static_cast<const T*>(nullptr),
                                                  scores_span);
      KeyLanesGemm::template invoke_blocks<false>(member, m_rows, geo.kp_keys, D, s.dout, geo.kp_dims, 1, s.vt,
                                                  geo.kp_keys, s.dp, geo.kp_keys, static_cast<const T*>(nullptr),
                                                  scores_span);
    }
    member.team_barrier();
    if (g.cap_log2 != T(0)) {
      softcap_tanh(member, s.s, m_rows * geo.kp_keys, g.inv_cap);
      member.team_barrier();
    }
    gradient_rows(member, b, hk, kb, n_keys, t0, m_rows, n_rows, windowed, q_len, kv_len, s);
    member.team_barrier();
    if (pairs()) {
      pair_key_grads(member, m_rows, n_rows, key_grads_span, s);
    } else {
      DimLanesGemm::template invoke_blocks<true>(member, geo.kp_keys, geo.kp_dims, n_rows, s.s, 1, geo.kp_keys,
                                                 s.dout, geo.kp_dims, s.dv, geo.kp_dims,
                                                 static_cast<const T*>(nullptr), key_grads_span);
      DimLanesGemm::template invoke_blocks<true>(member, geo.kp_keys, geo.kp_dims, n_rows, s.dp, 1, geo.kp_keys, s.q,
                                                 geo.kp_dims, s.dk, geo.kp_dims, static_cast<const T*>(nullptr),
                                                 key_grads_span);
    }
    if (dq != DqStrategy::query_pass) {
      // The tile's dQ in scratch first, then one streaming add to memory: accumulating straight
      // into the partial array would make every micro-tile wait for its C rows from memory.
      if (pairs())
        pair_dq(member, m_rows, n_keys, dq_span, s);
      else
        DimLanesGemm::template invoke_blocks<false>(member, m_rows, geo.kp_dims, n_keys, s.dp, geo.kp_keys, 1, s.k,
                                                    geo.kp_dims, s.dq, geo.kp_dims, static_cast<const T*>(nullptr),
                                                    dq_span);
      member.team_barrier();
      if (dq == DqStrategy::atomic || c == 0)
        add_dq_to_output(member, b, hk, t0, n_rows, s, dq == DqStrategy::atomic);
      else
        add_dq_partial(member, b, hk, c, t0, n_rows, s);
    }
    member.team_barrier();
  }

  // The pairs' five products (pairs_compile only; the float path's spans, widened to whole pairs:
  // the P and dS the widening adds are exact zeros, and every operand finite, so the sums are
  // those of the spans). S = k_scale Q K^T, dP = dO V^T:
  template <class Span>
  KOKKOS_INLINE_FUNCTION void pair_scores(const Member& member, int m_rows, const Span& span, const Tiles& s) const {
    if constexpr (pairs_compile) {
      const int d2 = geo.kp_dims / 2, D2 = (p.fwd.head_dim + 1) / 2;
      KeyLanesPairs::invoke_blocks(member, m_rows, geo.kp_keys, D2, s.qb, d2, 1, s.ktp, geo.kp_keys, s.s, geo.kp_keys,
                                   nullptr, k_scale, span, hardware);
      KeyLanesPairs::invoke_blocks(member, m_rows, geo.kp_keys, D2, s.dob, d2, 1, s.vtp, geo.kp_keys, s.dp,
                                   geo.kp_keys, nullptr, 1.0f, span, hardware);
    }
  }
  // P and dS to pairs of rows, then dV += P^T dO, dK += dS^T Q:
  template <class Span>
  KOKKOS_INLINE_FUNCTION void pair_key_grads(const Member& member, int m_rows, int n_rows, const Span& span,
                                             const Tiles& s) const {
    if constexpr (pairs_compile) {
      const int keys = geo.kp_keys;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(member, m_rows / 2), [&](const int r2) {
        const T* p0 = s.s + 2 * r2 * keys;
        const T* ds0 = s.dp + 2 * r2 * keys;
        pack_pairs_padded(p0, p0 + keys, s.pt + r2 * keys, keys, keys, hardware);
        pack_pairs_padded(ds0, ds0 + keys, s.dst + r2 * keys, keys, keys, hardware);
        if (s.dsb) {  // dS rows as pairs of keys, for dQ
          pack_row_pairs_padded(ds0, s.dsb + 2 * r2 * (keys / 2), keys, keys / 2, hardware);
          pack_row_pairs_padded(ds0 + keys, s.dsb + (2 * r2 + 1) * (keys / 2), keys, keys / 2, hardware);
        }
      });
      member.team_barrier();
      const int n2 = (n_rows + 1) / 2;  // pairs of rows (P and dS of the padding rows are 0)
      DimLanesPairs::template invoke_blocks<true>(member, keys, geo.kp_dims, n2, s.pt, 1, keys, s.dovn, geo.kp_dims,
                                                  s.dv, geo.kp_dims, nullptr, 1.0f, span, hardware);
      DimLanesPairs::template invoke_blocks<true>(member, keys, geo.kp_dims, n2, s.dst, 1, keys, s.qvn, geo.kp_dims,
                                                  s.dk, geo.kp_dims, nullptr, 1.0f, span, hardware);
    }
  }
  // dQ = dS K:
  template <class Span>
  KOKKOS_INLINE_FUNCTION void pair_dq(const Member& member, int m_rows, int n_keys, const Span& span,
                                      const Tiles& s) const {
    if constexpr (pairs_compile)
      DimLanesPairs::invoke_blocks(member, m_rows, geo.kp_dims, (n_keys + 1) / 2, s.dsb, geo.kp_keys / 2, 1, s.kvn,
                                   geo.kp_dims, s.dq, geo.kp_dims, nullptr, 1.0f, span, hardware);
  }

  // P and dS for each row: masked (window, block mask, padding keys) where some row does not see
  // the whole tile (windowed: the window cuts it, TileVisibility::whole); ALiBi and the bias
  // tensor added to its scores.
  KOKKOS_INLINE_FUNCTION void gradient_rows(const Member& member, int b, int hk, std::int64_t kb, int n_keys,
                                            std::int64_t t0, int m_rows, int n_rows, bool windowed,
                                            std::int64_t q_len, std::int64_t kv_len, const Tiles& s) const {
    const int G = p.fwd.group_size();
    const bool full = n_keys == geo.kp_keys && !windowed &&
                      (!bs.active() || bs.all_listed(bs.rows_of(hk, G, t0, n_rows), kb, kb + n_keys - 1));
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, m_rows), [&](const int r) {
      int begin = 0, end = geo.kp_keys;
      if (!full) {
        const std::int64_t i = (t0 + (r < n_rows ? r : 0)) / G;
        window.tile_keys(i, kb, n_keys, q_len, kv_len, begin, end);
        if (r >= n_rows) begin = end = 0;  // a padding row sees nothing (its scores may not be computed)
        if (bs.active() && r < n_rows) {
          T* row = s.s + r * geo.kp_keys;
          bs.for_unlisted(hk * G + static_cast<int>((t0 + r) % G), i, kb, n_keys, [&](const int a, const int z) {
            for (int j = a; j < z; ++j) row[j] = -compat::infinity<T>();
          });
        }
      }
      RowAlibi<T> alibi;
      const int h = hk * G + static_cast<int>((t0 + r) % G);
      if (p.fwd.alibi_log2 && r < n_rows) {
        alibi.slope = p.fwd.alibi_log2[h];
        alibi.diagonal = static_cast<T>(window.diagonal((t0 + r) / G, q_len, kv_len) - kb);
      }
      T* const s_row = s.s + r * geo.kp_keys;
      T* const dp_row = s.dp + r * geo.kp_keys;
      if (!bias.active() || r >= n_rows) {
        gradient_row(s_row, dp_row, geo.kp_keys, begin, end, s.lse2[r], s.di[r], g, alibi);
        return;
      }
      const std::int64_t i = (t0 + r) / G;
      T* const dbias_row = dbias.active() ? dbias.template row_out<T>(b, h, i) + kb : nullptr;
      bias.dispatch([&](auto tag) {
        using B = decltype(tag);
        gradient_row(s_row, dp_row, geo.kp_keys, begin, end, s.lse2[r], s.di[r], g, alibi,
                     bias.template row<B>(b, h, i) + kb, dbias_row, n_keys);
      });
    });
  }

  // K^T (scaled), V^T and K of keys [kb, kb + n_keys) into scratch, zero-padded; dK = dV = 0. A key
  // whose k is not finite is recorded for dQ (backward_nonfinite.hpp).
  KOKKOS_INLINE_FUNCTION void load_keys(const Member& member, int b, int hk, std::int64_t kb, int n_keys,
                                        const Tiles& s) const {
    const int D = p.fwd.head_dim;
    if constexpr (pairs_compile) {
      if (pairs()) return load_key_pairs(member, b, hk, kb, n_keys, s);
    }
#if KATTN_HOST_SIMD
    if constexpr (Tn::host) {
      // On the host with whole vectors: K^T and V^T by W x W blocks through registers
      // (simd::transpose), not one strided element at a time.
      using V = simd::vec<T>;
      constexpr int W = simd::width<T>();
      if (D % W == 0 && geo.kp_dims == D && geo.kp_keys % W == 0) {
        Kokkos::parallel_for(Kokkos::TeamThreadRange(member, geo.kp_keys / W), [&](const int blk) {
          const int j0 = blk * W;
          const T* k[W];
          const T* v[W];
          for (int i = 0; i < W; ++i) {
            k[i] = j0 + i < n_keys ? p.fwd.k_ptr(b, kb + j0 + i, hk) : nullptr;
            v[i] = j0 + i < n_keys ? p.fwd.v_ptr(b, kb + j0 + i, hk) : nullptr;
            if (k[i] && !all_finite(k[i], D))
              for (int d = 0; d < D; ++d)
                if (!is_finite(k[i][d])) Kokkos::atomic_add(ws.bad_keys_of(p.fwd, b, hk) + d, 1);
          }
          simd::store_columns<T>(k, D, k_scale, s.kt + j0, geo.kp_keys);
          simd::store_columns<T>(v, D, T(1), s.vt + j0, geo.kp_keys);
          if (s.k)
            for (int i = 0; i < W; ++i)
              for (int d = 0; d < D; d += W) simd::store(s.k + (j0 + i) * D + d, k[i] ? simd::load(k[i] + d) : V{});
        });
        const int kd = geo.kp_keys * geo.kp_dims;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(member, kd / W), [&](const int i) {
          simd::store(s.dk + i * W, V{});
          simd::store(s.dv + i * W, V{});
        });
        return;
      }
    }
#endif
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, geo.kp_keys), [&](const int j) {
      const T* k = j < n_keys ? p.fwd.k_ptr(b, kb + j, hk) : nullptr;
      const T* v = j < n_keys ? p.fwd.v_ptr(b, kb + j, hk) : nullptr;
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, geo.kp_dims), [&](const int d) {
        const bool in = k && d < D;
        if (in && !is_finite(k[d])) Kokkos::atomic_add(ws.bad_keys_of(p.fwd, b, hk) + d, 1);
        if (d < D) {
          s.kt[d * geo.kp_keys + j] = in ? k[d] * k_scale : T(0);
          s.vt[d * geo.kp_keys + j] = in ? v[d] : T(0);
        }
        if (s.k) s.k[j * geo.kp_dims + d] = in ? k[d] : T(0);
        s.dk[j * geo.kp_dims + d] = T(0);
        s.dv[j * geo.kp_dims + d] = T(0);
      });
    });
  }

  // load_keys as pairs: K^T and V^T as pairs of dims, K as pairs of keys (pairs run on finite
  // inputs only, so no key is recorded as not finite).
  KOKKOS_INLINE_FUNCTION void load_key_pairs(const Member& member, int b, int hk, std::int64_t kb, int n_keys,
                                             const Tiles& s) const {
    if constexpr (pairs_compile) {
      const int D = p.fwd.head_dim, keys = geo.kp_keys, dims = geo.kp_dims, d2 = dims / 2;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(member, keys / 2), [&](const int j2) {
        const T* k[2];
        for (int e = 0; e < 2; ++e) {
          const int j = 2 * j2 + e;
          k[e] = j < n_keys ? p.fwd.k_ptr(b, kb + j, hk) : nullptr;
          const T* v = j < n_keys ? p.fwd.v_ptr(b, kb + j, hk) : nullptr;
          // A key's pairs of dims, then down its column of K^T (V^T).
          constexpr int kMaxPairs = 256;
          Pair row[kMaxPairs];
          for (int c0 = 0; c0 < d2; c0 += kMaxPairs) {
            const int n = d2 - c0 < kMaxPairs ? d2 - c0 : kMaxPairs;
            const int n_in = D - 2 * c0;
            pack_row_pairs_padded(k[e] ? k[e] + 2 * c0 : nullptr, row, n_in, n, hardware);
            for (int c = 0; c < n; ++c) s.ktp[std::size_t(c0 + c) * keys + j] = row[c];
            pack_row_pairs_padded(v ? v + 2 * c0 : nullptr, row, n_in, n, hardware);
            for (int c = 0; c < n; ++c) s.vtp[std::size_t(c0 + c) * keys + j] = row[c];
          }
          for (int d = 0; d < dims; ++d) s.dk[j * dims + d] = s.dv[j * dims + d] = T(0);
        }
        if (s.kvn) pack_pairs_padded(k[0], k[1], s.kvn + j2 * dims, D, dims, hardware);
      });
    }
  }

  // load_rows as pairs: Q and dO rows as pairs of dims, and as pairs of rows over dims.
  KOKKOS_INLINE_FUNCTION void load_row_pairs(const Member& member, int b, int hk, std::int64_t t0, int m_rows,
                                             int n_rows, const Tiles& s) const {
    if constexpr (pairs_compile) {
      const int G = p.fwd.group_size(), D = p.fwd.head_dim, dims = geo.kp_dims, d2 = dims / 2;
      Kokkos::parallel_for(Kokkos::TeamThreadRange(member, m_rows / 2), [&](const int r2) {
        const T* q[2];
        const T* dout[2];
        for (int e = 0; e < 2; ++e) {
          const int r = 2 * r2 + e;
          const bool in_row = r < n_rows;
          const std::int64_t i = (t0 + r) / G;
          const int h = hk * G + static_cast<int>((t0 + r) % G);
          q[e] = in_row ? p.fwd.q_ptr(b, i, h) : nullptr;
          dout[e] = in_row ? p.do_ptr(b, i, h) : nullptr;
          pack_row_pairs_padded(q[e], s.qb + r * d2, D, d2, hardware);
          pack_row_pairs_padded(dout[e], s.dob + r * d2, D, d2, hardware);
          const std::int64_t row = ws.row(p.fwd, b, hk, in_row ? t0 + r : t0);
          s.lse2[r] = in_row ? ws.lse2[row] : compat::infinity<T>();
          s.di[r] = in_row ? ws.di[row] : T(0);
        }
        pack_pairs_padded(q[0], q[1], s.qvn + r2 * dims, D, dims, hardware);
        pack_pairs_padded(dout[0], dout[1], s.dovn + r2 * dims, D, dims, hardware);
      });
    }
  }

  // Q and dO of rows [t0, t0 + n_rows) (zero up to m_rows), with their lse2 and D.
  KOKKOS_INLINE_FUNCTION void load_rows(const Member& member, int b, int hk, std::int64_t t0, int m_rows, int n_rows,
                                        const Tiles& s) const {
    if constexpr (pairs_compile) {
      if (pairs()) return load_row_pairs(member, b, hk, t0, m_rows, n_rows, s);
    }
    const int G = p.fwd.group_size();
    const int D = p.fwd.head_dim;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, m_rows), [&](const int r) {
      const bool in_row = r < n_rows;
      const std::int64_t i = (t0 + r) / G;
      const int h = hk * G + static_cast<int>((t0 + r) % G);
      const T* q = in_row ? p.fwd.q_ptr(b, i, h) : nullptr;
      const T* dout = in_row ? p.do_ptr(b, i, h) : nullptr;
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, geo.kp_dims), [&](const int d) {
        const bool in = in_row && d < D;
        s.q[r * geo.kp_dims + d] = in ? q[d] : T(0);
        s.dout[r * geo.kp_dims + d] = in ? dout[d] : T(0);
      });
      Kokkos::single(Kokkos::PerThread(member), [&]() {
        const std::int64_t row = ws.row(p.fwd, b, hk, in_row ? t0 + r : t0);
        s.lse2[r] = in_row ? ws.lse2[row] : compat::infinity<T>();
        s.di[r] = in_row ? ws.di[row] : T(0);
      });
    });
  }

  // dK and dV of the tile's keys to the outputs (dS carries the scale already), NaN where the
  // textbook's masked pairs make them NaN.
  KOKKOS_INLINE_FUNCTION void store_keys(const Member& member, int b, int hk, std::int64_t kb, int n_keys,
                                         std::int64_t q_len, std::int64_t kv_len, const MaskedSpreads& nan,
                                         const Tiles& s) const {
    const int G = p.fwd.group_size();
    const auto q_row = [&](std::int64_t t) { return p.fwd.q_ptr(b, t / G, hk * G + static_cast<int>(t % G)); };
    const auto do_row = [&](std::int64_t t) { return p.do_ptr(b, t / G, hk * G + static_cast<int>(t % G)); };
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, n_keys), [&](const int j) {
      T* dk = p.dk_ptr(b, kb + j, hk);
      T* dv = p.dv_ptr(b, kb + j, hk);
      const bool k_nan = nan.dk.nan_at(kb + j), v_nan = nan.dv.nan_at(kb + j);
      if (!nan.dk_q.nan_at(kb + j) && !nan.dv_do.nan_at(kb + j)) {  // no element of key j to check: a plain copy
        const T* sk = s.dk + j * geo.kp_dims;
        const T* sv = s.dv + j * geo.kp_dims;
#if KATTN_HOST_SIMD
        if constexpr (Tn::host) {
          constexpr int W = simd::width<T>();
          if (p.fwd.head_dim % W == 0) {
            const simd::vec<T> nan_row = simd::splat(nan_value<T>());
            for (int d = 0; d < p.fwd.head_dim; d += W) {
              simd::store(dk + d, k_nan ? nan_row : simd::load(sk + d));
              simd::store(dv + d, v_nan ? nan_row : simd::load(sv + d));
            }
            return;
          }
        }
#endif
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, p.fwd.head_dim), [&](const int d) {
          dk[d] = k_nan ? nan_value<T>() : sk[d];
          dv[d] = v_nan ? nan_value<T>() : sv[d];
        });
        return;
      }
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, p.fwd.head_dim), [&](const int d) {
        const bool kd_nan = k_nan || element_nan<T>(nan.dk_q, window, G, q_len, kv_len, kb + j, d, q_row);
        const bool vd_nan = v_nan || element_nan<T>(nan.dv_do, window, G, q_len, kv_len, kb + j, d, do_row);
        dk[d] = kd_nan ? nan_value<T>() : s.dk[j * geo.kp_dims + d];
        dv[d] = vd_nan ? nan_value<T>() : s.dv[j * geo.kp_dims + d];
      });
    });
  }

  // The tile's dQ added to dQ itself (zeroed by the prepare pass): by atomics, or for key chunk 0,
  // whose rows of (b, hk) only this team writes, a plain read-modify-write in tile order (with one
  // chunk there is no partial array to allocate, zero and sum).
  KOKKOS_INLINE_FUNCTION void add_dq_to_output(const Member& member, int b, int hk, std::int64_t t0, int n_rows,
                                               const Tiles& s, bool atomic) const {
    const int G = p.fwd.group_size();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, n_rows), [&](const int r) {
      T* out = p.dq_ptr(b, (t0 + r) / G, hk * G + static_cast<int>((t0 + r) % G));
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, p.fwd.head_dim), [&](const int d) {
        if (atomic)
          Kokkos::atomic_add(out + d, s.dq[r * geo.kp_dims + d]);
        else
          out[d] += s.dq[r * geo.kp_dims + d];
      });
    });
  }

  // Only this team writes chunk c's (c >= 1) rows of (b, hk): a plain read-modify-write in tile
  // order, into its partial array.
  KOKKOS_INLINE_FUNCTION void add_dq_partial(const Member& member, int b, int hk, int c, std::int64_t t0, int n_rows,
                                             const Tiles& s) const {
    T* part = ws.dq_row(p.fwd, c, b, hk, t0);  // rows t0 .. t0 + n_rows are contiguous
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, n_rows), [&](const int r) {
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, geo.kp_dims),
                           [&](const int d) { part[r * geo.kp_dims + d] += s.dq[r * geo.kp_dims + d]; });
    });
  }
};

}  // namespace detail
}  // namespace kattn
