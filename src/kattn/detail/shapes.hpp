// Validation of user input into an AttentionParams: every refusal names the argument, what was
// expected and what came. Runs on the host before any kernel.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <type_traits>

#include "kattn/errors.hpp"
#include "kattn/options.hpp"
#include "kattn/core/attention_params.hpp"
#include "kattn/core/storage.hpp"

namespace kattn {

namespace detail {

// The params type of a problem over these views, with the storage rule checked at compile time:
// q and o of one type Q (float, double, bf16 or fp16), k and v of one type KV (Q, or a 16-bit cache
// under float queries), lse of Q's accumulation type (float for 16-bit storage).
template <class QView, class KView, class VView, class OView, class LseView>
struct ParamsOf {
  using Q = typename OView::non_const_value_type;
  using KV = typename KView::non_const_value_type;
  using Acc = accumulate_t<Q>;
  using type = AttentionParams<Q, Acc, KV>;
  static_assert(std::is_same<Q, float>::value || std::is_same<Q, double>::value || is_16bit_v<Q>,
                "kattn: q and o must hold float, double, kattn::bf16 or kattn::fp16");
  static_assert(std::is_same<typename QView::non_const_value_type, Q>::value,
                "kattn: q and o must have the same scalar type");
  static_assert(std::is_same<typename VView::non_const_value_type, KV>::value,
                "kattn: k and v must have the same scalar type");
  static_assert(std::is_same<KV, Q>::value || (std::is_same<Q, float>::value && is_16bit_v<KV>),
                "kattn: k and v must have q's scalar type, or be a 16-bit cache (bf16, fp16) under float q");
  static_assert(std::is_same<typename LseView::non_const_value_type, Acc>::value,
                "kattn: lse must have the accumulation type (q's type; float for 16-bit q)");
};
template <class QView, class KView, class VView, class OView, class LseView>
using params_of = typename ParamsOf<QView, KView, VView, OView, LseView>::type;

template <class View>
void require_contiguous_dim(const View& view, const char* name) {
  KATTN_REQUIRE(view.extent(View::rank - 1) <= 1 || view.stride(View::rank - 1) == 1, name,
                ": the head dim must be contiguous (stride 1), got stride ", view.stride(View::rank - 1));
}

template <class View>
void require_extent(const View& view, const char* name, int dim, const char* what, std::int64_t expected,
                    const char* from) {
  KATTN_REQUIRE(static_cast<std::int64_t>(view.extent(dim)) == expected, name, ": expected ", what, " ", expected,
                " (from ", from, "), got ", view.extent(dim));
}

// K and V of rank 4 (batch or page, position, head, dim) into params: data and strides.
// The operand over a view of rows: [B, N, H, D] (or paged [pages, page_size, H, D]) or, without a
// batch axis, [N, H, D] (ragged and packed rows).
template <class View>
Operand<typename View::value_type> rows_operand(const View& a) {
  using S = std::int64_t;
  if constexpr (View::rank == 4) return {a.data(), S(a.stride(0)), S(a.stride(1)), S(a.stride(2))};
  else return {a.data(), 0, S(a.stride(0)), S(a.stride(1))};
}
// The operand over an lse view: [B, H, N] or, without a batch axis, [N, H].
template <class View>
Operand<typename View::value_type> lse_operand(const View& a) {
  using S = std::int64_t;
  if constexpr (View::rank == 3) return {a.data(), S(a.stride(0)), S(a.stride(2)), S(a.stride(1))};
  else return {a.data(), 0, S(a.stride(0)), S(a.stride(1))};
}

}  // namespace detail

// Dense layout: q [B, Nq, Hq, D], k and v [B, Nk, Hkv, D], o [B, Nq, Hq, D], lse [B, Hq, Nq]
// (an empty lse view: not wanted). Hq must be a multiple of Hkv.
template <class QView, class KView, class VView, class OView, class LseView>
detail::params_of<QView, KView, VView, OView, LseView> dense_params(const QView& q, const KView& k, const VView& v,
                                                                   const OView& o, const LseView& lse) {
  static_assert(QView::rank == 4 && KView::rank == 4 && VView::rank == 4 && OView::rank == 4,
                "kattn: q, k, v and o must be rank-4 views [batch, seq, heads, dim]");
  static_assert(LseView::rank == 3, "kattn: lse must be a rank-3 view [batch, heads, seq]");
  const std::int64_t B = q.extent(0), Nq = q.extent(1), Hq = q.extent(2), D = q.extent(3);
  const std::int64_t Nk = k.extent(1), Hkv = k.extent(2);
  KATTN_REQUIRE(D >= 1, "q: expected a head dim of at least 1, got ", D);
  KATTN_REQUIRE(Hq >= 1, "q: expected at least one query head, got ", Hq);
  detail::require_extent(k, "k", 0, "batch", B, "q");
  detail::require_extent(k, "k", 3, "head dim", D, "q");
  KATTN_REQUIRE(Hkv >= 1, "k: expected at least one KV head, got ", Hkv);
  KATTN_REQUIRE(Hq % Hkv == 0, "q: expected a number of heads that is a multiple of the ", Hkv,
                " KV heads of k (GQA), got ", Hq);
  detail::require_extent(v, "v", 0, "batch", B, "k");
  detail::require_extent(v, "v", 1, "sequence length", Nk, "k");
  detail::require_extent(v, "v", 2, "KV heads", Hkv, "k");
  detail::require_extent(v, "v", 3, "head dim", D, "q");
  detail::require_extent(o, "o", 0, "batch", B, "q");
  detail::require_extent(o, "o", 1, "sequence length", Nq, "q");
  detail::require_extent(o, "o", 2, "heads", Hq, "q");
  detail::require_extent(o, "o", 3, "head dim", D, "q");
  const bool want_lse = lse.size() > 0 || lse.data() != nullptr;
  if (want_lse) {
    detail::require_extent(lse, "lse", 0, "batch", B, "q");
    detail::require_extent(lse, "lse", 1, "heads", Hq, "q");
    detail::require_extent(lse, "lse", 2, "sequence length", Nq, "q");
  }
  detail::require_contiguous_dim(q, "q");
  detail::require_contiguous_dim(k, "k");
  detail::require_contiguous_dim(v, "v");
  detail::require_contiguous_dim(o, "o");
  KATTN_REQUIRE(B <= INT32_MAX && Hq <= INT32_MAX && D <= INT32_MAX, "q: batch, heads and head dim must each fit in 32 bits");
  // Rows of the whole batch (B x Nq x Hq: workspace and league sizes) must count in 64 bits.
  KATTN_REQUIRE(Nq <= INT64_MAX / (B * Hq > 0 ? B * Hq : 1), "q: ", B, " sequences x ", Nq, " queries x ", Hq,
                " heads: more rows than fit in 64 bits");

  detail::params_of<QView, KView, VView, OView, LseView> p;
  p.q = detail::rows_operand(q);
  p.k = detail::rows_operand(k);
  p.v = detail::rows_operand(v);
  p.o = detail::rows_operand(o);
  if (want_lse) p.lse = detail::lse_operand(lse);
  p.batch = static_cast<int>(B);
  p.heads_q = static_cast<int>(Hq);
  p.heads_kv = static_cast<int>(Hkv);
  p.head_dim = static_cast<int>(D);
  p.q_len = Nq;
  p.kv_len = Nk;
  p.q_total = B * Nq;
  return p;
}

}  // namespace kattn
