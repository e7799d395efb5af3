// Cascade attention (FlashInfer's two-level cascade, Hydragen's shared-prefix attention): many
// requests that share a prefix (a system prompt, a few-shot context, a tree of samples) attend
// it once, all their queries together, and each request attends its own suffix; the two partial
// results are merged with the one merge of the state algebra (merge.hpp). The result equals
// attention over prefix + suffix, while the prefix's K and V are read once per tile of all the
// requests' query rows instead of once per request.
//
//   q [total_q, Hq, D] and the requests as a ragged or paged layout (ragged.hpp, paged.hpp) for
//   their suffixes k, v; the shared prefix k_prefix, v_prefix [Np, Hkv, D]; o [total_q, Hq, D],
//   lse [total_q, Hq] (or an empty view). Storage as for kattn::attention (docs/storage.md).
//
// Masks: none, or causal (every query sees the whole prefix and its request's suffix causally,
// bottom-right aligned: query i of a request with n queries and m suffix keys sees suffix keys
// j <= i + m - n), which needs m >= n - 1 for each request (its queries come after the prefix).
// Sliding windows and diagonal shifts are refused. Softcap, scale and the score variants apply as
// in attention over each request's prefix + suffix: sinks once, on the merged rows; ALiBi's
// distance and the bias's rows from each query's place in its own request (the prefix pass looks
// it up: core/request_rows.hpp); the bias [B or 1, Hq or 1, max Nq, Np + max suffix] as a ragged
// batch of prefix + suffix pads it, its first Np keys read by the prefix pass and the rest by the
// suffix pass, tile by tile.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kattn/core/request_rows.hpp"
#include "kattn/core/storage.hpp"
#include "kattn/detail/alibi.hpp"
#include "kattn/detail/attention_impl.hpp"
#include "kattn/detail/sinks.hpp"
#include "kattn/detail/memory_check.hpp"
#include "kattn/detail/score_bias_check.hpp"
#include "kattn/detail/shapes.hpp"
#include "kattn/detail/widening.hpp"
#include "kattn/errors.hpp"
#include "kattn/merge.hpp"
#include "kattn/options.hpp"
#include "kattn/paged.hpp"
#include "kattn/ragged.hpp"
#include "kattn/workspace.hpp"

namespace kattn {
namespace detail {

inline void check_cascade(const Options& opt, const BatchLengths& lengths) {
  KATTN_REQUIRE(opt.window_left == -1 && opt.window_right == -1,
                "window: cascade attention takes no sliding window (got ", opt.window_left, ",", opt.window_right,
                "); run kattn::attention over whole sequences (kv::ragged or kv::paged) instead");
  KATTN_REQUIRE(opt.diagonal_shift == 0, "diagonal_shift: cascade attention takes none, got ", opt.diagonal_shift);
  if (opt.causal)
    for (std::size_t b = 0; b < lengths.q_len.size(); ++b)
      KATTN_REQUIRE(lengths.q_len[b] == 0 || lengths.kv_len[b] >= lengths.q_len[b] - 1, "causal: request ", b, " has ",
                    lengths.q_len[b], " queries but ", lengths.kv_len[b],
                    " suffix keys; a causal cascade needs at least queries - 1 (the queries come after the prefix)");
}

// The shared prefix k, v [Np, Hkv, D] against q [total_q, Hq, D].
template <class QView, class KView, class VView>
void check_prefix(const QView& q, const KView& k, const VView& v) {
  static_assert(KView::rank == 3 && VView::rank == 3, "kattn::cascade: k_prefix and v_prefix must be [Np, heads, dim]");
  const std::int64_t Hq = q.extent(1), D = q.extent(2), Np = k.extent(0), Hkv = k.extent(1);
  require_extent(k, "k_prefix", 2, "head dim", D, "q");
  check_gqa(Hq, Hkv);
  require_extent(v, "v_prefix", 0, "keys", Np, "k_prefix");
  require_extent(v, "v_prefix", 1, "KV heads", Hkv, "k_prefix");
  require_extent(v, "v_prefix", 2, "head dim", D, "q");
  require_contiguous_dim(k, "k_prefix");
  require_contiguous_dim(v, "v_prefix");
}

// All queries of the batch as one sequence against the shared prefix: q [total_q, Hq, D],
// k, v [Np, Hkv, D], o [total_q, Hq, D] and lse [total_q, Hq] (the prefix pass's workspaces).
template <class QView, class KView, class VView, class OView, class LseView>
params_of<QView, KView, VView, OView, LseView> prefix_params(const QView& q, const KView& k, const VView& v,
                                                             const OView& o, const LseView& lse) {
  check_prefix(q, k, v);
  const std::int64_t N = q.extent(0), Hq = q.extent(1), D = q.extent(2), Np = k.extent(0), Hkv = k.extent(1);
  params_of<QView, KView, VView, OView, LseView> p;
  p.q = rows_operand(q);
  p.k = rows_operand(k);
  p.v = rows_operand(v);
  p.o = rows_operand(o);
  p.lse = lse_operand(lse);
  p.batch = 1;
  p.heads_q = static_cast<int>(Hq);
  p.heads_kv = static_cast<int>(Hkv);
  p.head_dim = static_cast<int>(D);
  p.q_len = N;
  p.kv_len = Np;
  p.q_total = N;
  return p;
}

// The bias fits the cascade of suffix problem p (its longest request's queries and suffix keys)
// after a prefix of np keys: the bias of attention over each request's prefix + suffix, padded as
// a ragged batch pads it.
template <class P>
void require_cascade_bias(const Options& opt, const P& p, std::int64_t np) {
  require_bias_shape(opt.bias, p.batch, p.heads_q, p.q_len, np + p.kv_len,
                     " (the longest request's queries; the prefix's keys, then the longest suffix's)");
}

// The requests whose queries are the prefix pass's rows (suffix problem p's q_indptr), for the
// variants that place a query in its request (ALiBi, the bias); `keys` receives the table of each
// request's keys: the prefix's np and its suffix's.
template <class MemorySpace, class P>
RequestRows prefix_requests(const P& p, const BatchLengths& lengths, std::int64_t np,
                            Kokkos::View<std::int64_t*, MemorySpace>& keys) {
  std::vector<std::int64_t> n(lengths.kv_len);
  for (std::int64_t& x : n) x += np;
  keys = device_index<MemorySpace>(n, "cascade::request_keys");
  return RequestRows{p.q_indptr, keys.data(), p.batch, p.q_len};
}

// The cascade's workspaces: the prefix pass's o and lse, the suffix pass's lse when the caller
// wants none and, in 16-bit storage, the widened q and the suffix pass's float o.
template <class MemorySpace>
void require_cascade_workspace(Workspace* ws, std::int64_t N, std::int64_t Hq, std::int64_t D, std::size_t acc_bytes,
                               bool widened) {
  const std::uint64_t row = saturating_mul(saturating_mul(std::uint64_t(N), std::uint64_t(Hq)), acc_bytes);
  const std::uint64_t rows = saturating_mul(row, saturating_add(saturating_mul(std::uint64_t(D), widened ? 3 : 1), 2));
  require_memory<MemorySpace>(ws, rows, "kattn::cascade: the partial results of the prefix and suffix passes",
                              concat(N, " queries x ", Hq, " heads x (", widened ? "3 x " : "", D, " + 2) values"),
                              "run the cascade over fewer requests at a time");
}

// The prefix pass, the suffix pass (run_suffix(q, o, lse, opt)) and their merge into o, lse. In 16-bit
// storage both passes run float queries (q widened, exactly) over the 16-bit keys into float
// partials, so that o is rounded once, by the merge (FlashAttention's convention).
template <class ExecSpace, class QView, class KPView, class VPView, class OView, class LseView, class Suffix>
void cascade_impl(const ExecSpace& space, const QView& q, const KPView& k_prefix, const VPView& v_prefix,
                  const OView& o, const LseView& lse, const Options& opt, const BatchLengths& lengths,
                  const Suffix& run_suffix) {
  using S = typename OView::non_const_value_type;
  using Acc = accumulate_t<S>;
  using Mem = typename ExecSpace::memory_space;
  using Rows = Kokkos::View<Acc***, Kokkos::LayoutRight, Mem>;
  using RowLse = Kokkos::View<Acc**, Kokkos::LayoutRight, Mem>;
  constexpr bool widened = is_16bit_v<S>;
  compat::ScopedRegion region("kattn::cascade");
  validate(opt);
  check_cascade(opt, lengths);
  require_sinks(opt, q.extent(1));
  const auto suffix = run_suffix.params(q, o, lse);  // checks the suffix's views
  check_prefix(q, k_prefix, v_prefix);
  const std::int64_t N = q.extent(0), Hq = q.extent(1), D = q.extent(2), Np = k_prefix.extent(0);
  require_alibi(opt, Hq);
  require_cascade_bias(opt, suffix, Np);
  require_cascade_workspace<Mem>(opt.workspace, N, Hq, D, sizeof(Acc), widened);
  HeldBuffers<Acc, Mem> held;  // the buffers of the views below (from opt.workspace when set)
  const auto buffer = [&](const char* label, std::int64_t values) {
    return held.take(opt.workspace, space, label, std::size_t(values));
  };
  const Rows o_prefix(buffer("kattn::cascade::o_prefix", N * Hq * D), N, Hq, D);
  const RowLse lse_prefix(buffer("kattn::cascade::lse_prefix", N * Hq), N, Hq);
  // Every check is above, before any kernel: the suffix's (its pass runs after the prefix pass)
  // and the prefix's.
  Options prefix_opt = opt;
  prefix_opt.causal = false;  // every query sees the whole prefix
  prefix_opt.splits = 0;
  prefix_opt.split_chunk = 0;
  prefix_opt.progress = nullptr;  // reported once, by the suffix pass
  prefix_opt.bias = opt.bias.of_keys(0, Np);
  Options suffix_opt = opt;
  suffix_opt.bias = opt.bias.of_keys(Np, suffix.kv_len);
  // A prefix key's ALiBi distance and bias row depend on the query's request, which the prefix
  // pass's one sequence does not hold: it looks each row's request up.
  const bool placed = !opt.alibi_slopes.empty() || opt.bias.active();
  Kokkos::View<std::int64_t*, Mem> request_keys;
  const RequestRows requests = placed ? prefix_requests(suffix, lengths, Np, request_keys) : RequestRows{};
  const auto passes = [&](const auto& q_pass, const auto& o_suffix, const auto& lse_suffix) {
    auto prefix = prefix_params(q_pass, k_prefix, v_prefix, o_prefix, lse_prefix);
    prefix.requests = requests;
    attention_impl(space, prefix, prefix_opt, BatchLengths{});
    run_suffix(q_pass, o_suffix, lse_suffix, suffix_opt);
    merge(space, o_suffix, lse_suffix, o_prefix, lse_prefix, o, lse_suffix);
    apply_sinks(space, run_suffix.params(q, o, lse_suffix), opt);  // once, on the merged rows
  };
  const auto with_lse = [&](const auto& q_pass, const auto& o_suffix) {
    if (wanted(lse))
      passes(q_pass, o_suffix, lse);
    else
      passes(q_pass, o_suffix, RowLse(buffer("kattn::cascade::lse_suffix", N * Hq), N, Hq));
  };
  if constexpr (widened) {
    const Rows q_widened(buffer("kattn::cascade::q_widened", N * Hq * D), N, Hq, D);
    Widening<ExecSpace>(space).copy(q, q_widened);
    with_lse(q_widened, Rows(buffer("kattn::cascade::o_suffix", N * Hq * D), N, Hq, D));
  } else {
    with_lse(q, o);
  }
  if (placed) compat::fence(space, "kattn::cascade: the requests' table is freed on return");
}

// The params of a request batch's own keys, ragged or paged.
template <class QView, class KView, class VView, class OView, class LseView, class MemorySpace>
auto layout_params(const QView& q, const KView& k, const VView& v, const OView& o, const LseView& lse,
                   const RaggedLayout<MemorySpace>& layout) {
  return ragged_params(q, k, v, o, lse, layout);
}
template <class QView, class KView, class VView, class OView, class LseView, class MemorySpace>
auto layout_params(const QView& q, const KView& k, const VView& v, const OView& o, const LseView& lse,
                   const PagedLayout<MemorySpace>& layout) {
  return paged_params(q, k, v, o, lse, layout);
}

// The suffix pass of a cascade: each request's own keys, ragged or paged.
template <class ExecSpace, class KView, class VView, class Layout>
struct CascadeSuffix {
  const ExecSpace& space;
  const KView& k;
  const VView& v;
  const Layout& layout;
  template <class Q, class O, class L>
  auto params(const Q& q, const O& out, const L& out_lse) const {
    return layout_params(q, k, v, out, out_lse, layout);
  }
  template <class Q, class O, class L>
  void operator()(const Q& q, const O& out, const L& out_lse, const Options& opt) const {
    attention_impl(space, layout_params(q, k, v, out, out_lse, layout), opt, layout.lengths);
  }
};

}  // namespace detail

}  // namespace kattn
