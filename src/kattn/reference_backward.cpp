#include "kattn/reference_backward.hpp"

#include <cmath>
#include <cstdint>

#include "kattn/compat.hpp"
#include "kattn/detail/backends.hpp"
#include "kattn/detail/bias_gradient.hpp"
#include "kattn/detail/memory_check.hpp"
#include "kattn/detail/score_matrix.hpp"
#include "kattn/detail/alibi.hpp"
#include "kattn/detail/score_bias_check.hpp"
#include "kattn/detail/sinks.hpp"
#include "kattn/detail/textbook_softmax.hpp"
#include "kattn/core/score_scaling.hpp"
#include "kattn/core/key_window.hpp"
#include "kattn/core/state.hpp"

namespace kattn {
namespace detail {
namespace {

// P, and dP then dS, as [B, Hq, Nq, Nk] arrays (Nq, Nk: the longest sequences).
template <class ExecSpace, class T>
using Matrix = ScoreMatrix<ExecSpace, T>;

template <class T>
struct Problem {
  BackwardParams<T> p;
  KeyWindow window;
  T scale, softcap;

  KOKKOS_INLINE_FUNCTION T raw_score(int b, int h, std::int64_t i, std::int64_t j) const {
    const T* q = p.fwd.q_ptr(b, i, h);
    const T* k = p.fwd.k_ptr(b, j, h / p.fwd.group_size());
    T dot = 0;
    for (int d = 0; d < p.fwd.head_dim; ++d) dot += q[d] * k[d];
    return scale * dot;
  }
};

// dP = dO V^T on the visible pairs, 0 elsewhere.
template <class ExecSpace, class T>
struct ProbabilityGradient {
  Problem<T> pr;
  Matrix<ExecSpace, T> dp;

  KOKKOS_INLINE_FUNCTION void operator()(const int b, const int h, const std::int64_t i, const std::int64_t j) const {
    const std::int64_t q_len = pr.p.fwd.seq_q_len(b), kv_len = pr.p.fwd.seq_kv_len(b);
    if (i >= q_len || j >= kv_len) return;
    T acc = 0;
    if (pr.window.visible(i, j, q_len, kv_len)) {
      const T* dout = pr.p.do_ptr(b, i, h);
      const T* v = pr.p.fwd.v_ptr(b, j, h / pr.p.fwd.group_size());
      for (int d = 0; d < pr.p.fwd.head_dim; ++d) acc += dout[d] * v[d];
    }
    dp(b, h, i, j) = acc;
  }
};

// Per row: D = sum_j P dP, then dS = scale P (dP - D) [x (1 - tanh^2(s / softcap))], in place of dP;
// with sinks, the row's term of d(sink) = -P_sink D goes to sink_terms[(b Nq + i) Hq + h].
template <class ExecSpace, class T>
struct ScoreGradient {
  Problem<T> pr;
  Matrix<ExecSpace, T> s, dp;
  const T* sinks = nullptr;  // natural log, per query head; null: none
  AttentionParams<T> softmax_rows;  // the params the softmax wrote its lse through
  T* sink_terms = nullptr;
  ScoreBiasGradient dbias;  // where P (dP - D) goes (bias_gradient.hpp); inactive: none

  KOKKOS_INLINE_FUNCTION void operator()(const int b, const int h, const std::int64_t i) const {
    const std::int64_t q_len = pr.p.fwd.seq_q_len(b), kv_len = pr.p.fwd.seq_kv_len(b);
    if (i >= q_len) return;
    T di = 0;
    for (std::int64_t j = 0; j < kv_len; ++j) di += s(b, h, i, j) * dp(b, h, i, j);
    if (sinks) {
      const T row_lse = *softmax_rows.lse_ptr(b, i, h);
      sink_terms[(b * pr.p.fwd.q_len + i) * pr.p.fwd.heads_q + h] =
          sinks[h] == -compat::infinity<T>() ? T(0) : -compat::exp(sinks[h] - row_lse) * di;
    }
    T* const dbias_row = dbias.active() ? dbias.template row_out<T>(b, h, i) : nullptr;
    for (std::int64_t j = 0; j < kv_len; ++j) {
      T ds = s(b, h, i, j) * (dp(b, h, i, j) - di);
      if (dbias_row) dbias_row[j] = s(b, h, i, j) == T(0) ? T(0) : ds;  // a score with P = 0 moves nothing
      if (pr.softcap > T(0) && pr.window.visible(i, j, q_len, kv_len)) {
        const T th = compat::tanh(pr.raw_score(b, h, i, j) / pr.softcap);
        ds *= T(1) - th * th;
      }
      dp(b, h, i, j) = pr.scale * ds;
    }
  }
};

// dQ = dS K.
template <class ExecSpace, class T>
struct QueryGradient {
  Problem<T> pr;
  Matrix<ExecSpace, T> ds;

  KOKKOS_INLINE_FUNCTION void operator()(const int b, const int h, const std::int64_t i, const int d) const {
    const std::int64_t q_len = pr.p.fwd.seq_q_len(b), kv_len = pr.p.fwd.seq_kv_len(b);
    if (i >= q_len) return;
    T acc = 0;
    for (std::int64_t j = 0; j < kv_len; ++j) acc += ds(b, h, i, j) * pr.p.fwd.k_ptr(b, j, h / pr.p.fwd.group_size())[d];
    pr.p.dq_ptr(b, i, h)[d] = acc;
  }
};

// dK = dS^T Q and dV = P^T dO, summed over the query heads of KV head hk.
template <class ExecSpace, class T>
struct KeyValueGradient {
  Problem<T> pr;
  Matrix<ExecSpace, T> s, ds;

  KOKKOS_INLINE_FUNCTION void operator()(const int b, const int hk, const std::int64_t j, const int d) const {
    const std::int64_t q_len = pr.p.fwd.seq_q_len(b), kv_len = pr.p.fwd.seq_kv_len(b);
    if (j >= kv_len) return;
    const int G = pr.p.fwd.group_size();
    T dk = 0, dv = 0;
    for (int h = hk * G; h < (hk + 1) * G; ++h)
      for (std::int64_t i = 0; i < q_len; ++i) {
        dk += ds(b, h, i, j) * pr.p.fwd.q_ptr(b, i, h)[d];
        dv += s(b, h, i, j) * pr.p.do_ptr(b, i, h)[d];
      }
    pr.p.dk_ptr(b, j, hk)[d] = dk;
    pr.p.dv_ptr(b, j, hk)[d] = dv;
  }
};

}  // namespace

template <class ExecSpace, class T>
std::vector<double> reference_backward_impl(const ExecSpace& space, const BackwardParams<T>& p, const Options& opt,
                                            const ScoreBiasGradient& dbias_out) {
  compat::ScopedRegion region("kattn::reference_backward");
  const AttentionParams<T>& f = p.fwd;
  require_sinks(opt, f.heads_q);
  require_bias(opt, f);
  require_bias_gradient(opt, dbias_out);
  std::vector<double> dsinks(opt.sinks.size(), 0.0);
  const BiasGradient<ExecSpace, T> dbias(space, dbias_out, f.batch, f.heads_q, nullptr);
  if (f.batch == 0 || f.heads_q == 0) {
    dbias.finish();
    return dsinks;
  }
  require_memory<typename ExecSpace::memory_space>(
      saturating_mul(saturating_mul(saturating_mul(f.batch, f.heads_q), saturating_mul(f.q_len, f.kv_len)),
                     2 * sizeof(T)),
      "kattn::reference_backward: P and dS",
      concat("2 x ", f.batch, " sequences x ", f.heads_q, " heads x ", f.q_len, " queries x ", f.kv_len, " keys x ",
             sizeof(T), " bytes"),
      "use the tiled backward (kattn::attention_backward, kattn grad --algo flash) or fewer sequences");
  using Rank3 = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>, Kokkos::IndexType<std::int64_t>>;
  using Rank4 = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<4>, Kokkos::IndexType<std::int64_t>>;
  Problem<T> pr{p, KeyWindow::from(opt), static_cast<T>(ScoreScaling::make(f.head_dim, opt.scale, opt.softcap).scale),
                static_cast<T>(opt.softcap)};
  AttentionParams<T> no_lse = f;  // P only (with sinks, its own lse): the backward reads the forward's lse
  no_lse.lse = {};
  using Mem = typename ExecSpace::memory_space;
  const bool with_sinks = !opt.sinks.empty();
  const auto sinks = device_sinks<T>(space, opt.sinks, 1.0);
  const std::int64_t row_heads = with_sinks ? std::int64_t(f.batch) * f.q_len * f.heads_q : 0;
  Kokkos::View<T*, Mem> row_lse("kattn::reference_backward::lse", row_heads);
  Kokkos::View<T*, Mem> sink_terms("kattn::reference_backward::sink_terms", row_heads);
  if (with_sinks) {  // rows (b, i) then heads, in lse_ptr's dense and ragged rules
    no_lse.lse = Operand<T>(row_lse.data(), f.q_len * f.heads_q, f.heads_q, 1);
  }
  const T* sinks_or_null = with_sinks ? sinks.data() : nullptr;
  // ALiBi's bias and the bias tensor are constants of each score: they change P, and dS reaches
  // the scores through them unchanged, so the steps below need nothing more.
  require_alibi(opt, f.heads_q);
  const auto alibi = per_head_values<T>(space, opt.alibi_slopes, 1.0, "kattn::reference_backward::alibi_slopes");
  const T* alibi_or_null = opt.alibi_slopes.empty() ? nullptr : alibi.data();
  Matrix<ExecSpace, T> s(space, "kattn::reference_backward::P", f.batch, f.heads_q, f.q_len, f.kv_len);
  Matrix<ExecSpace, T> dp(space, "kattn::reference_backward::dS", f.batch, f.heads_q, f.q_len, f.kv_len);
  const Rank4 pairs(space, {0, 0, 0, 0}, {f.batch, f.heads_q, f.q_len, f.kv_len});
  const Rank3 rows(space, {0, 0, 0}, {f.batch, f.heads_q, f.q_len});
  if (f.q_len > 0 && f.kv_len > 0) {
    Kokkos::parallel_for("kattn::reference_backward::scores", pairs, TextbookScores<ExecSpace, T>{no_lse, s, pr.window, pr.scale, pr.softcap, alibi_or_null, opt.bias});
    Kokkos::parallel_for("kattn::reference_backward::softmax", rows, TextbookSoftmax<ExecSpace, T>{no_lse, s, pr.window, sinks_or_null});
    Kokkos::parallel_for("kattn::reference_backward::dp", pairs, ProbabilityGradient<ExecSpace, T>{pr, dp});
    Kokkos::parallel_for("kattn::reference_backward::ds", rows, ScoreGradient<ExecSpace, T>{pr, s, dp, sinks_or_null, no_lse, sink_terms.data(), dbias.target()});
  }
  if (f.q_len > 0)
    Kokkos::parallel_for("kattn::reference_backward::dq",
                         Rank4(space, {0, 0, 0, 0}, {f.batch, f.heads_q, f.q_len, f.head_dim}),
                         QueryGradient<ExecSpace, T>{pr, dp});
  if (f.kv_len > 0)
    Kokkos::parallel_for("kattn::reference_backward::dkv",
                         Rank4(space, {0, 0, 0, 0}, {f.batch, f.heads_kv, f.kv_len, f.head_dim}),
                         KeyValueGradient<ExecSpace, T>{pr, s, dp});
  dbias.finish();
  compat::fence(space, "kattn::reference_backward: P and dS are freed on return");
  const auto terms = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), sink_terms);
  for (std::int64_t r = 0; r < row_heads; ++r) dsinks[static_cast<std::size_t>(r % f.heads_q)] += double(terms(r));
  return dsinks;
}

#define KATTN_INSTANTIATE_REFERENCE_BACKWARD(Space, T) \
  template std::vector<double> reference_backward_impl<Space, T>(const Space&, const BackwardParams<T>&, const Options&, \
                                                                 const ScoreBiasGradient&);
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_REFERENCE_BACKWARD)

}  // namespace detail
}  // namespace kattn
