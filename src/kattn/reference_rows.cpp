#include "kattn/reference_rows.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "kattn/core/alibi.hpp"
#include "kattn/core/key_window.hpp"
#include "kattn/core/score_scaling.hpp"
#include "kattn/detail/alibi.hpp"
#include "kattn/detail/score_bias_check.hpp"
#include "kattn/detail/shapes.hpp"
#include "kattn/detail/sinks.hpp"

namespace kattn {

namespace detail {

TextbookScore textbook_score(const AttentionParams<double>& p, const Options& opt, const KeyWindow& window,
                             double scale, const QueryRow& row, std::int64_t j) {
  const double* q = p.q_ptr(row.b, row.i, row.h);
  const double* k = p.k_ptr(row.b, j, row.h / p.group_size());
  double dot = 0;
  for (int d = 0; d < p.head_dim; ++d) dot += q[d] * k[d];
  TextbookScore s;
  s.capped = scale * dot;
  if (opt.softcap > 0) s.capped = opt.softcap * std::tanh(s.capped / opt.softcap);
  s.logit = s.capped;
  if (!opt.alibi_slopes.empty())
    s.logit += alibi_bias(opt.alibi_slopes[static_cast<std::size_t>(row.h)], window, row.i, j, p.seq_q_len(row.b),
                          p.seq_kv_len(row.b));
  if (opt.bias.active())
    opt.bias.dispatch(
        [&](auto tag) { s.logit += bias_value<double>(opt.bias.row<decltype(tag)>(row.b, row.h, row.i)[j]); });
  return s;
}

RowSoftmax row_softmax(const AttentionParams<double>& p, const Options& opt, const QueryRow& row) {
  const std::int64_t q_len = p.seq_q_len(row.b), kv_len = p.seq_kv_len(row.b);
  const KeyWindow window = KeyWindow::from(opt);
  const double scale = ScoreScaling::make(p.head_dim, opt.scale, opt.softcap).scale;
  const std::int64_t first = window.first(row.i, q_len, kv_len), last = window.last(row.i, q_len, kv_len);
  // The head's sink (Options::sinks): one more logit of the row, of no value.
  const double sink = sink_of(opt, row.h);
  RowSoftmax r;
  r.first = first;
  r.lse = sink;
  if (last < first) return r;
  // The textbook's steps on one row: scores, max, exp and sum, normalised.
  r.scores.resize(static_cast<std::size_t>(last - first + 1));
  r.capped.resize(r.scores.size());
  r.p.assign(r.scores.size(), 0.0);
  double m = sink;
  for (std::int64_t j = first; j <= last; ++j) {
    const TextbookScore s = textbook_score(p, opt, window, scale, row, j);
    const double x = s.logit;
    r.capped[j - first] = s.capped;
    r.scores[j - first] = x;
    m = std::isnan(x) || std::isnan(m) ? std::numeric_limits<double>::quiet_NaN() : std::max(m, x);
  }
  if (m == -std::numeric_limits<double>::infinity()) return r;
  double l = std::exp(sink - m);
  for (std::size_t n = 0; n < r.p.size(); ++n) l += (r.p[n] = std::exp(r.scores[n] - m));
  for (double& x : r.p) x /= l;
  r.lse = m + std::log(l);
  return r;
}

}  // namespace detail

double reference_row(const AttentionParams<double>& p, const Options& opt, const QueryRow& row, double* o_row) {
  validate(opt);
  detail::require_sinks(opt, p.heads_q);
  detail::require_alibi(opt, p.heads_q);
  detail::require_bias(opt, p);
  const detail::RowSoftmax r = detail::row_softmax(p, opt, row);
  std::fill(o_row, o_row + p.head_dim, 0.0);
  const int kv_head = row.h / p.group_size();
  for (std::size_t n = 0; n < r.p.size(); ++n) {
    const double* v = p.v_ptr(row.b, r.first + std::int64_t(n), kv_head);
    for (int d = 0; d < p.head_dim; ++d) o_row[d] += r.p[n] * v[d];
  }
  return r.lse;
}

namespace {

// What changes at a masked edge: whether the row sees the first key, the last key, any key.
std::tuple<bool, bool, bool> edge_state(const KeyWindow& w, std::int64_t i, std::int64_t q_len, std::int64_t kv_len) {
  const std::int64_t first = w.first(i, q_len, kv_len), last = w.last(i, q_len, kv_len);
  return {first == 0, last == kv_len - 1, last >= first};
}

}  // namespace

std::vector<QueryRow> rows_to_check(const AttentionParams<double>& p, const Options& opt, std::int64_t random_rows,
                                    std::uint64_t seed) {
  const KeyWindow window = KeyWindow::from(opt);
  return detail::sample_rows<QueryRow>(
      p.batch, p.heads_q, [&](int b) { return p.seq_q_len(b); },
      [&](int b, std::int64_t i) { return edge_state(window, i, p.seq_q_len(b), p.seq_kv_len(b)); }, random_rows, seed);
}

}  // namespace kattn
