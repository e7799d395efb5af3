// The backward's query pass (DqStrategy::query_pass): dQ without atomics or partial sums. A
// league over (sequence, KV head, query-row tile), the forward's layout (column_tiles.hpp):
// the team keeps Q^T, dO^T and dQ^T of its rows in scratch and streams the key tiles its rows
// see, in order, recomputing P and dS:
//
//   S^T = K Q^T, dP^T = V dO^T            (keys x rows: the query rows are the vector lanes)
//   P^T = 2^(S^T [+ ALiBi] - lse2), dS^T = scale P^T (dP^T - D) [x softcap derivative]
//   dQ^T += K^T dS^T                      (dims x rows)
//
// On the host, full K/V tiles are read in place, as in the forward.
#pragma once

#include <Kokkos_Core.hpp>

#include <climits>
#include <cstdint>

#include "kattn/backward_params.hpp"
#include "kattn/compat.hpp"
#include "kattn/detail/backward_plan.hpp"
#include "kattn/detail/block_sparse.hpp"
#include "kattn/detail/backward_nonfinite.hpp"
#include "kattn/detail/backward_steps.hpp"
#include "kattn/detail/backward_workspace.hpp"
#include "kattn/detail/online_softmax.hpp"
#include "kattn/detail/simd.hpp"
#include "kattn/detail/tile_gemm.hpp"
#include "kattn/detail/tuning.hpp"
#include "kattn/core/key_window.hpp"
#include "kattn/core/score_bias.hpp"

namespace kattn {
namespace detail {

template <class ExecSpace, class T>
struct BackwardQueryPass {
  using Tn = Tuning<ExecSpace, T>;
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  using Member = typename Policy::member_type;
  using ScratchBuffer = Kokkos::View<T*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryUnmanaged>;
  using Gemm = TeamTileGemm<Tn::micro_rows, Tn::micro_cols>;

  BackwardParams<T> p;
  KeyWindow window;
  T q_scale = 1;  // multiplies Q^T on load: scale * log2(e), or scale alone when softcapping
  GradientScales<T> g;
  BackwardGeometry geo;
  int row_tiles = 1;
  int tile_begin = 0, tile_end = INT_MAX;  // only query tiles [tile_begin, tile_end) (a progress piece)
  int scratch_level = 0;
  BackwardWorkspace<T> ws;
  BlockSparse bs;  // inactive: dense
  ScoreBias bias;  // Options::bias (geo.bias_tile: staged per tile); inactive: none

  int league_size() const { return p.fwd.batch * p.fwd.heads_kv * row_tiles; }
  std::size_t scratch_bytes() const { return ScratchBuffer::shmem_size(geo.query_pass_elements()); }

  struct Tiles {
    T* qt;    // Q^T scaled, head_dim x rows
    T* dot;   // dO^T, head_dim x rows
    T* dqt;   // dQ^T accumulator, dims x rows
    T* k;     // K tile, keys x dims (when not read in place)
    T* v;     // V tile, keys x dims (when not read in place)
    T* st;    // S^T, then P^T; keys x rows
    T* dpt;   // dP^T, then dS^T; keys x rows
    T* lse2;  // per row
    T* di;    // per row
    T* slope;     // per row: ALiBi's slope (log2 units)
    T* diagonal;  // per row: the key on its diagonal (ALiBi's distance 0)
    T* bias;      // the bias tensor's tile in log2 units, keys x rows (geo.bias_tile)
  };

  KOKKOS_INLINE_FUNCTION Tiles carve(const ScratchBuffer& buf) const {
    const std::size_t dr = std::size_t(geo.head_dim) * geo.qp_rows, kd = std::size_t(geo.qp_keys) * geo.qp_dims;
    const std::size_t kr = std::size_t(geo.qp_keys) * geo.qp_rows;
    Tiles t;
    t.qt = buf.data();
    t.dot = t.qt + dr;
    t.dqt = t.dot + dr;
    t.k = t.dqt + std::size_t(geo.qp_dims) * geo.qp_rows;
    t.v = t.k + kd;
    t.st = t.v + kd;
    t.dpt = t.st + kr;
    t.lse2 = t.dpt + kr;
    t.di = t.lse2 + geo.qp_rows;
    t.slope = t.di + geo.qp_rows;
    t.diagonal = t.slope + geo.qp_rows;
    t.bias = geo.bias_tile ? t.diagonal + geo.qp_rows : nullptr;
    return t;
  }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    int rank = member.league_rank();
    const int tile = rank % row_tiles;
    if (tile < tile_begin || tile >= tile_end) return;
    rank /= row_tiles;
    const int hk = rank % p.fwd.heads_kv;
    const int b = rank / p.fwd.heads_kv;
    const int G = p.fwd.group_size();
    const std::int64_t q_len = p.fwd.seq_q_len(b);
    const std::int64_t kv_len = p.fwd.seq_kv_len(b);
    const std::int64_t t0 = std::int64_t(tile) * geo.block_q;
    if (t0 >= G * q_len) return;
    const int n_rows = static_cast<int>(G * q_len - t0 < geo.block_q ? G * q_len - t0 : geo.block_q);
    const std::int64_t i_first = t0 / G, i_last = (t0 + n_rows - 1) / G;
    const std::int64_t lo = window.first(i_first, q_len, kv_len);
    const std::int64_t hi = window.last(i_last, q_len, kv_len);

    const Tiles s = carve(ScratchBuffer(member.team_scratch(scratch_level), geo.query_pass_elements()));
    load_rows(member, b, hk, t0, n_rows, s);
    member.team_barrier();
    const BlockSparse::Rows mrows = bs.active() ? bs.rows_of(hk, G, t0, n_rows) : BlockSparse::Rows{};
    for (std::int64_t kb = lo <= hi ? lo / geo.block_k * geo.block_k : hi + 1; kb <= hi; kb += geo.block_k) {
      if (bs.active()) {  // skip to the first tile holding a key some row lists
        const std::int64_t next = bs.next_key(mrows, kb);
        if (next > hi) break;
        kb += (next - kb) / geo.block_k * geo.block_k;
      }
      const int n_keys = static_cast<int>(kv_len - kb < geo.block_k ? kv_len - kb : geo.block_k);
      const bool full = n_keys == geo.qp_keys && window.rows_see_whole_tile(i_first, i_last, kb, n_keys, q_len, kv_len) &&
                        (!bs.active() || bs.all_listed(mrows, kb, kb + n_keys - 1));
      key_tile(member, b, hk, t0, n_rows, kb, n_keys, !full, q_len, kv_len, s);
    }
    store_rows(member, b, hk, t0, n_rows, s);
  }

  KOKKOS_INLINE_FUNCTION void key_tile(const Member& member, int b, int hk, std::int64_t t0, int n_rows,
                                       std::int64_t kb, int n_keys, bool masked, std::int64_t q_len,
                                       std::int64_t kv_len, const Tiles& s) const {
    const int D = p.fwd.head_dim;
    const bool in_place = Tn::kv_in_place && !p.fwd.kv_page_indptr && n_keys == geo.qp_keys && geo.qp_dims == D;
    const T* k = s.k;
    const T* v = s.v;
    std::ptrdiff_t k_row = geo.qp_dims, v_row = geo.qp_dims;
    if (in_place) {
      k = p.fwd.k_ptr(b, kb, hk);
      v = p.fwd.v_ptr(b, kb, hk);
      k_row = p.fwd.k.stride_seq;
      v_row = p.fwd.v.stride_seq;
    } else {
      load_keys(member, b, hk, kb, n_keys, s);
      member.team_barrier();
    }
    Gemm::invoke(member, geo.qp_keys, geo.qp_rows, D, k, k_row, 1, s.qt, geo.qp_rows, s.st, geo.qp_rows,
                 static_cast<const T*>(nullptr));
    Gemm::invoke(member, geo.qp_keys, geo.qp_rows, D, v, v_row, 1, s.dot, geo.qp_rows, s.dpt, geo.qp_rows,
                 static_cast<const T*>(nullptr));
    member.team_barrier();
    if (g.cap_log2 != T(0)) {
      softcap_tanh(member, s.st, geo.qp_keys * geo.qp_rows, g.inv_cap);
      member.team_barrier();
    }
    if (masked) {
      mask_rows(member, hk, t0, n_rows, kb, n_keys, q_len, kv_len, s.st);
      member.team_barrier();
    }
    if (s.bias) {
      stage_bias(member, b, hk, t0, n_rows, kb, n_keys, s.bias);
      member.team_barrier();
    }
    const bool alibi = p.fwd.alibi_log2 != nullptr;
    gradient_columns(member, s.st, s.dpt, geo.qp_keys, geo.qp_rows, s.lse2, s.di, g, alibi ? s.slope : nullptr,
                     alibi ? s.diagonal : nullptr, static_cast<T>(kb), s.bias);
    member.team_barrier();
    Gemm::accumulate(member, geo.qp_dims, geo.qp_rows, n_keys, k, 1, k_row, s.dpt, geo.qp_rows, s.dqt, geo.qp_rows);
    member.team_barrier();
  }

  // Q^T (scaled) and dO^T of the rows, zero-padded; dQ^T = 0; lse2 (+inf for padding rows) and D.
  KOKKOS_INLINE_FUNCTION void load_rows(const Member& member, int b, int hk, std::int64_t t0, int n_rows,
                                        const Tiles& s) const {
    const int G = p.fwd.group_size();
    const int D = p.fwd.head_dim;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, geo.qp_rows), [&](const int r) {
      const bool in_row = r < n_rows;
      const std::int64_t i = (t0 + r) / G;
      const int h = hk * G + static_cast<int>((t0 + r) % G);
      const T* q = in_row ? p.fwd.q_ptr(b, i, h) : nullptr;
      const T* dout = in_row ? p.do_ptr(b, i, h) : nullptr;
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, geo.qp_dims), [&](const int d) {
        if (d < D) {
          s.qt[d * geo.qp_rows + r] = in_row ? q[d] * q_scale : T(0);
          s.dot[d * geo.qp_rows + r] = in_row ? dout[d] : T(0);
        }
        s.dqt[d * geo.qp_rows + r] = T(0);
      });
      Kokkos::single(Kokkos::PerThread(member), [&]() {
        const std::int64_t row = ws.row(p.fwd, b, hk, in_row ? t0 + r : t0);
        s.lse2[r] = in_row ? ws.lse2[row] : compat::infinity<T>();
        s.di[r] = in_row ? ws.di[row] : T(0);
        s.slope[r] = in_row && p.fwd.alibi_log2 ? p.fwd.alibi_log2[h] : T(0);
        s.diagonal[r] = static_cast<T>(window.diagonal(i, p.fwd.seq_q_len(b), p.fwd.seq_kv_len(b)));
      });
    });
  }

  // K and V tiles into scratch, zero-padded (keys past n_keys, dims past head_dim).
  KOKKOS_INLINE_FUNCTION void load_keys(const Member& member, int b, int hk, std::int64_t kb, int n_keys,
                                        const Tiles& s) const {
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, geo.qp_keys), [&](const int j) {
      const T* k = j < n_keys ? p.fwd.k_ptr(b, kb + j, hk) : nullptr;
      const T* v = j < n_keys ? p.fwd.v_ptr(b, kb + j, hk) : nullptr;
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, geo.qp_dims), [&](const int d) {
        const bool in = k && d < p.fwd.head_dim;
        s.k[j * geo.qp_dims + d] = in ? k[d] : T(0);
        s.v[j * geo.qp_dims + d] = in ? v[d] : T(0);
      });
    });
  }

  // The bias tensor's tile (keys [kb, kb + n_keys) of the rows) into bt, keys x rows in log2 units;
  // 0 for padding rows and keys.
  KOKKOS_INLINE_FUNCTION void stage_bias(const Member& member, int b, int hk, std::int64_t t0, int n_rows,
                                         std::int64_t kb, int n_keys, T* bt) const {
    const int G = p.fwd.group_size();
    const T log2e = static_cast<T>(kLog2e);
    bias.dispatch([&](auto tag) {
      using B = decltype(tag);
      const auto row_of = [&](int r) {
        return r < n_rows ? bias.template row<B>(b, hk * G + static_cast<int>((t0 + r) % G), (t0 + r) / G) + kb
                          : nullptr;
      };
#if KATTN_HOST_SIMD
      // On the host, W x W blocks loaded a row of keys at a time and transposed in registers (the
      // forward's add_bias).
      if constexpr (Tn::host && (std::is_same_v<B, T> || (std::is_same_v<T, float> && is_16bit_v<B>))) {
        using V = simd::vec<T>;
        constexpr int W = simd::width<T>();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(member, geo.qp_rows / W), [&](const int blk) {
          const int r0 = blk * W;
          const B* rows[W];
          for (int k = 0; k < W; ++k) rows[k] = row_of(r0 + k);
          int j = 0;
          for (; j + W <= n_keys; j += W) {
            V v[W];
            for (int k = 0; k < W; ++k) v[k] = rows[k] ? simd::load_as<T>(rows[k] + j) * log2e : V{};
            simd::transpose<T>(v);
            for (int c = 0; c < W; ++c) simd::store(bt + (j + c) * geo.qp_rows + r0, v[c]);
          }
          for (; j < geo.qp_keys; ++j)
            for (int k = 0; k < W; ++k)
              bt[j * geo.qp_rows + r0 + k] = rows[k] && j < n_keys ? bias_value<T>(rows[k][j]) * log2e : T(0);
        });
        return;
      }
#endif
      Kokkos::parallel_for(Kokkos::TeamThreadRange(member, geo.qp_rows), [&](const int r) {
        const B* row = row_of(r);
        for (int j = 0; j < geo.qp_keys; ++j)
          bt[j * geo.qp_rows + r] = row && j < n_keys ? bias_value<T>(row[j]) * log2e : T(0);
      });
    });
  }

  // Keys a row does not see (and padding keys) get -inf (after the softcap's tanh, if any).
  KOKKOS_INLINE_FUNCTION void mask_rows(const Member& member, int hk, std::int64_t t0, int n_rows, std::int64_t kb,
                                        int n_keys, std::int64_t q_len, std::int64_t kv_len, T* st) const {
    const int G = p.fwd.group_size();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, n_rows), [&](const int r) {
      const std::int64_t i = (t0 + r) / G;
      int begin = 0, end = 0;
      window.tile_keys(i, kb, n_keys, q_len, kv_len, begin, end);
      mask_column(st, geo.qp_keys, geo.qp_rows, r, begin, end);
      if (bs.active()) {
        bs.for_unlisted(hk * G + static_cast<int>((t0 + r) % G), i, kb, n_keys, [&](const int a, const int z) {
          for (int j = a; j < z; ++j) st[j * geo.qp_rows + r] = -compat::infinity<T>();
        });
      }
    });
  }

  // dQ of the rows to the output; element d NaN for all when a key's k[d] is not finite (the key
  // pass saw it).
  KOKKOS_INLINE_FUNCTION void store_rows(const Member& member, int b, int hk, std::int64_t t0, int n_rows,
                                         const Tiles& s) const {
    const int G = p.fwd.group_size();
    const int* bad_k = ws.bad_keys_of(p.fwd, b, hk);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, n_rows), [&](const int r) {
      T* out = p.dq_ptr(b, (t0 + r) / G, hk * G + static_cast<int>((t0 + r) % G));
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, p.fwd.head_dim),
                           [&](const int d) { out[d] = bad_k[d] != 0 ? nan_value<T>() : s.dqt[d * geo.qp_rows + r]; });
    });
  }
};

}  // namespace detail
}  // namespace kattn
