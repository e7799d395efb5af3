// Launch of the tiled attention kernel (and, for splits > 1, the merge) for one validated
// problem. Included by forward_kernels.cpp, which compiles it once, not by users.
#pragma once

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "kattn/compat.hpp"
#include "kattn/core/attention_params.hpp"
#include "kattn/core/key_window.hpp"
#include "kattn/core/score_scaling.hpp"
#include "kattn/core/state.hpp"
#include "kattn/cpu_products.hpp"
#include "kattn/detail/amx_column_tiles.hpp"
#include "kattn/detail/column_tiles.hpp"
#include "kattn/detail/memory_check.hpp"
#include "kattn/detail/merge_partials.hpp"
#include "kattn/detail/pair_column_tiles.hpp"
#include "kattn/detail/progress.hpp"
#include "kattn/detail/row_tiles.hpp"
#include "kattn/detail/tile_sizes.hpp"
#include "kattn/errors.hpp"
#include "kattn/options.hpp"
#include "kattn/workspace.hpp"

namespace kattn {
namespace detail {

// The key window, the score scaling (core/score_scaling.hpp) and the bias tensor of a forward
// kernel.
template <class Kernel>
void set_score_scaling(Kernel& kern, int head_dim, const Options& opt) {
  using T = decltype(kern.q_scale);
  kern.window = KeyWindow::from(opt);
  kern.bias = opt.bias;
  const ScoreScaling sc = ScoreScaling::make(head_dim, opt.scale, opt.softcap);
  kern.q_scale = static_cast<T>(sc.q_scale);
  kern.cap_log2 = static_cast<T>(sc.cap_log2);
  kern.inv_cap = static_cast<T>(sc.inv_cap);
}

// A column-tile kernel (Kernel: TiledAttention, PairTiledAttention or AmxTiledAttention) of problem p
// (storage Q for q/o, KV for k/v), computing in T, its accumulation type.
template <class Kernel, class ExecSpace, class P>
Kernel make_column_kernel(const ExecSpace& space, const P& p, const Options& opt) {
  using T = typename P::acc_type;
  Kernel kern;
  kern.p = p;
  set_score_scaling(kern, p.head_dim, opt);
  TilePlan plan =
      plan_tiles<ExecSpace, T>(space, p.head_dim, p.q_len * p.group_size(), opt, Kernel::tile_key_factor);
  // Automatic tiles of whole key tiles where the layout multiplies in them (AMX: 32 keys), so
  // only a sequence's last tile is padded.
  using Tn = Tuning<ExecSpace, T>;
  if (opt.block_k == 0 && plan.geometry.block_k > Kernel::key_multiple)
    plan.geometry = TileGeometry::make(plan.geometry.block_q, round_down(plan.geometry.block_k, Kernel::key_multiple),
                                       p.head_dim, Tn::micro_rows, Tn::wide_micro_cols);
  kern.geo = plan.geometry;
  // The layout's own scratch (the 16-bit layouts pad theirs) at the level it fits.
  const std::size_t bytes = kern.scratch_bytes(), level1 = scratch_limit(space, 1);
  KATTN_REQUIRE(bytes <= level1, "block_q/block_k: tiles of ", kern.geo.block_q, " query rows x ", kern.geo.block_k,
                " keys at head dim ", p.head_dim, " need ", bytes, " bytes of scratch, more than the ", level1,
                " bytes the execution space offers; shrink block_q or block_k");
  kern.scratch_level = bytes <= scratch_limit(space, 0) ? 0 : 1;
  const std::int64_t rows = p.q_len * p.group_size();
  kern.row_tiles = static_cast<int>((rows + kern.geo.block_q - 1) / kern.geo.block_q);
  if (kern.row_tiles == 0) kern.row_tiles = 1;
  return kern;
}

// Whether bf16 pairs may multiply problem P on this space: bf16 queries, keys and values on a host
// space with host tuning (cpu_products.hpp decides at run time).
template <class ExecSpace, class P>
constexpr bool pair_products_apply() {
  return Tuning<ExecSpace, typename P::acc_type>::host && std::is_same_v<typename P::q_type, bf16> &&
         std::is_same_v<typename P::kv_type, bf16>;
}

// Calls f(kernel) with the column-tile kernel of problem p under opt.
template <class ExecSpace, class P, class F>
void with_column_kernel(const ExecSpace& space, const P& p, const Options& opt, const F& f) {
  if constexpr (pair_products_apply<ExecSpace, P>()) {
    const CpuProducts products = host_cpu_products<bf16, bf16>(opt.cpu_products);
    if (products == CpuProducts::amx) {
      auto kern = make_column_kernel<AmxTiledAttention<ExecSpace>>(space, p, opt);
      kern.hardware = bf16_dot_on_hardware();
      kern.amx = amx_compiled() && amx_on_hardware();
      kern.prepare(space, opt.workspace, "kattn::attention");
      f(kern);
      return;
    }
    if (products == CpuProducts::bf16_dot) {
      auto kern = make_column_kernel<PairTiledAttention<ExecSpace>>(space, p, opt);
      kern.hardware = bf16_dot_on_hardware();
      f(kern);
      return;
    }
  }
  using T = typename P::acc_type;
  auto kern = make_column_kernel<TiledAttention<ExecSpace, T, typename P::q_type, typename P::kv_type>>(space, p, opt);
  f(kern);
}

// How the keys of each sequence are cut: `splits` chunks of ceil(kv_len / splits) keys, or, when
// chunk > 0, chunks of `chunk` keys (splits = chunks of the longest sequence; fixed-size chunks
// give every sequence the same cut whatever the batch, as a deterministic reduction needs).
struct SplitSpec {
  int splits = 1;
  std::int64_t chunk = 0;
};

// Launches a tiled kernel (TiledAttention or RowTiledAttention) and, for more than one split,
// the merge of its partial states (held in ws when set).
template <class ExecSpace, class P, class Kernel>
void launch_tiles(const ExecSpace& space, const P& p, Kernel& kern, const SplitSpec& split, const std::string& name,
                  Workspace* ws) {
  using Mem = typename ExecSpace::memory_space;
  using T = typename P::acc_type;
  const std::int64_t units = std::int64_t(p.batch) * p.heads_kv * kern.row_tiles * split.splits;
  KATTN_REQUIRE(units <= INT32_MAX, "splits: ", p.batch, " sequences x ", p.heads_kv, " KV heads x ", kern.row_tiles,
                " row tiles x ", split.splits, " splits = ", units, " work units, more than a league holds (2^31 - 1)");
  (void)units;
  kern.splits = split.splits;
  kern.chunk = split.chunk;
  Kokkos::View<T*, Mem> part_o, part_lse;
  if (split.splits > 1) {
    // Rows of the workspace: every (query row, head) of the batch.
    kern.ws.rows = p.q_total * p.heads_q;
    KATTN_REQUIRE(std::int64_t(p.batch) * p.q_len <= INT32_MAX, "splits: the merge of ", p.batch, " sequences x ",
                  p.q_len, " query positions needs more teams than a league holds (2^31 - 1); use one split");
    const std::uint64_t values = saturating_mul(saturating_mul(split.splits, kern.ws.rows), p.head_dim + 1);
    require_memory<Mem>(ws, saturating_mul(values, sizeof(T)), name + ": the split-KV workspace",
                        concat(split.splits, " splits x ", p.q_total, " query rows x ", p.heads_q, " heads x (",
                               p.head_dim, " + 1) values of ", sizeof(T), " bytes"),
                        "use fewer splits (Options::splits, or a larger split_chunk) or a smaller batch");
    part_o = take_buffer<T, Mem>(ws, space, name + "::partial_o",
                                 static_cast<std::size_t>(split.splits * kern.ws.rows * p.head_dim));
    part_lse =
        take_buffer<T, Mem>(ws, space, name + "::partial_lse", static_cast<std::size_t>(split.splits * kern.ws.rows));
    kern.ws.o = part_o.data();
    kern.ws.lse = part_lse.data();
  }
  auto policy = team_policy<ExecSpace, T>(space, kern.league_size(), kern);
  policy.set_scratch_size(kern.scratch_level, Kokkos::PerTeam(kern.scratch_bytes()));
  Kokkos::parallel_for(name + "::tile", policy, kern);
  if (split.splits > 1) {
    MergePartials<ExecSpace, P> merge_kern{p, kern.ws, split.splits};
    Kokkos::parallel_for(name + "::merge", Kokkos::TeamPolicy<ExecSpace>(space, merge_kern.league_size(), Kokkos::AUTO),
                         merge_kern);
  }
}

template <class ExecSpace, class Q, class T, class KV>
RowTiledAttention<ExecSpace, T, Q, KV> make_row_tiled_kernel(const ExecSpace& space, const AttentionParams<Q, T, KV>& p,
                                                             const Options& opt, int block_q) {
  RowTiledAttention<ExecSpace, T, Q, KV> kern;
  kern.p = p;
  set_score_scaling(kern, p.head_dim, opt);
  const std::int64_t rows = p.q_len * p.group_size();
  const int row_tiles = static_cast<int>((rows + block_q - 1) / block_q);
  const int packed = row_tile_heads<ExecSpace, T>(p.heads_kv, block_q, p.head_dim);
  const int heads = row_tile_team_heads<ExecSpace, T>(
      p.heads_kv, block_q, p.head_dim, fixed_split_units(p.batch, row_tiles, p.kv_len, opt), processors(space));
  const int block_k = row_tile_keys<ExecSpace, T>(packed, p.head_dim, row_lanes<T>(), opt);
  kern.geo = RowTileGeometry::make(block_q, block_k, p.head_dim, heads, row_lanes<T>());
  const std::size_t level0 = scratch_limit(space, 0), level1 = scratch_limit(space, 1);
  const std::size_t bytes = kern.scratch_bytes();
  KATTN_REQUIRE(bytes <= level1, "block_q/block_k: tiles of ", block_q, " query rows x ", block_k, " keys at head dim ",
                p.head_dim, " need ", bytes, " bytes of scratch, more than the ", level1,
                " bytes the execution space offers; shrink block_q or block_k");
  kern.scratch_level = bytes <= level0 ? 0 : 1;
  kern.row_tiles = row_tiles;
  return kern;
}

// Calls f(kernel) with the kernel the shape takes: row tiles for few query rows per KV head
// (decode, short appends) where the execution space has them, else the column tiles.
template <class ExecSpace, class P, class F>
void with_tiled_kernel(const ExecSpace& space, const P& p, const Options& opt, const F& f) {
  using T = typename P::acc_type;
  if constexpr (Tuning<ExecSpace, T>::row_tile_max_rows > 0) {
    if (const int block_q = row_tile_rows<ExecSpace, T>(p.q_len * p.group_size(), opt)) {
      auto kern = make_row_tiled_kernel(space, p, opt, block_q);
      f(kern);
      return;
    }
  }
  with_column_kernel(space, p, opt, f);
}

// Attention over the keys of each sequence cut as `split` says (one split: the plain tiled
// forward). `name` labels the kernels for Kokkos Tools ("kattn::attention").
template <class ExecSpace, class P>
void run_attention(const ExecSpace& space, const P& p, const Options& opt, const SplitSpec& split,
                   const std::string& name) {
  compat::ScopedRegion region(name);
  if (p.batch == 0 || p.q_len == 0 || p.heads_q == 0) return;
  KATTN_ASSERT(split.splits >= 1);
  with_tiled_kernel(space, p, opt, [&](auto& kern) { launch_tiles(space, p, kern, split, name, opt.workspace); });
}

}  // namespace detail
}  // namespace kattn

namespace kattn {
namespace detail {

// Query positions of dense problem p, [begin, end), as a problem of their own: the same keys, the
// diagonal of the mask shifted so every row keeps its keys.
template <class P>
P query_piece(const P& p, Options& opt, std::int64_t begin, std::int64_t end) {
  P piece = p;
  piece.q = p.q.from_row(begin);
  piece.o = p.o.from_row(begin);
  if (piece.lse) piece.lse = p.lse.from_row(begin);
  piece.q_len = end - begin;
  piece.q_total = std::int64_t(p.batch) * piece.q_len;
  opt.diagonal_shift += begin + piece.q_len - p.q_len;
  opt.bias = opt.bias.from_row(begin);
  return piece;
}

// run_attention with Options::progress: dense problems in pieces of query positions, the callback
// after each with the fraction of the visible (query, key) pairs done.
template <class ExecSpace, class P>
void run_attention_with_progress(const ExecSpace& space, const P& p, const Options& opt, const SplitSpec& split,
                                 const std::string& name) {
  const auto report = [&](double fraction) { report_progress(opt, fraction); };
  if (p.q_indptr || p.q_len == 0 || p.batch == 0 || p.heads_q == 0) {
    run_attention(space, p, opt, split, name);
    space.fence();
    report(1.0);
    return;
  }
  // About 100 pieces, each of at least 256 positions (fewer launches for short sequences).
  const std::int64_t rows = std::max<std::int64_t>(256, (p.q_len + 99) / 100);
  const KeyWindow window = KeyWindow::from(opt);
  const double total = double(window.visible_pairs(p.q_len, p.kv_len));
  double done = 0;
  Options piece_opt = opt;
  piece_opt.progress = nullptr;
  for (std::int64_t begin = 0; begin < p.q_len; begin += rows) {
    const std::int64_t end = std::min(p.q_len, begin + rows);
    Options o = piece_opt;
    run_attention(space, query_piece(p, o, begin, end), o, split, name);
    space.fence();
    done += double(window.visible_pairs(p.q_len, p.kv_len, begin, end));
    report(total > 0 ? done / total : double(end) / double(p.q_len));
  }
}

}  // namespace detail
}  // namespace kattn
