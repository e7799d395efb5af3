#include "kattn/reference_backward_rows.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include "kattn/core/key_window.hpp"
#include "kattn/core/score_scaling.hpp"
#include "kattn/detail/shapes.hpp"
#include "kattn/reference_rows.hpp"

namespace kattn {

namespace {

double dot(const double* a, const double* b, int n) {
  double s = 0;
  for (int d = 0; d < n; ++d) s += a[d] * b[d];
  return s;
}

// dS / dP's factor for a score s = softcap tanh(x / softcap): its derivative in x, 1 - (s / softcap)^2.
double softcap_slope(double s, double softcap) { return softcap > 0 ? 1.0 - (s / softcap) * (s / softcap) : 1.0; }

}  // namespace

void reference_dq_row(const BackwardParams<double>& p, const Options& opt, const QueryRow& row, double* dq_row) {
  validate(opt);
  const AttentionParams<double>& f = p.fwd;
  const detail::RowSoftmax r = detail::row_softmax(f, opt, row);
  std::fill(dq_row, dq_row + f.head_dim, 0.0);
  const double scale = ScoreScaling::make(f.head_dim, opt.scale, opt.softcap).scale;
  const int kv_head = row.h / f.group_size();
  const double* dout = p.do_ptr(row.b, row.i, row.h);
  // dP of the row, then D = sum P dP, then dQ = scale sum dS k.
  std::vector<double> dp(r.p.size());
  double di = 0;
  for (std::size_t n = 0; n < r.p.size(); ++n) {
    dp[n] = dot(dout, f.v_ptr(row.b, r.first + std::int64_t(n), kv_head), f.head_dim);
    di += r.p[n] * dp[n];
  }
  for (std::size_t n = 0; n < r.p.size(); ++n) {
    const double ds = r.p[n] * (dp[n] - di) * softcap_slope(r.capped[n], opt.softcap);
    const double* k = f.k_ptr(row.b, r.first + std::int64_t(n), kv_head);
    for (int d = 0; d < f.head_dim; ++d) dq_row[d] += scale * ds * k[d];
  }
}

void reference_dkdv_rows(const BackwardParams<double>& p, const Options& opt, const std::vector<KeyRow>& rows,
                         double* dk, double* dv) {
  validate(opt);
  const AttentionParams<double>& f = p.fwd;
  const int D = f.head_dim, group = f.group_size();
  const KeyWindow window = KeyWindow::from(opt);
  const ScoreScaling sc = ScoreScaling::make(D, opt.scale, opt.softcap);
  std::fill(dk, dk + rows.size() * D, 0.0);
  std::fill(dv, dv + rows.size() * D, 0.0);
  // The rows by (sequence, KV head): each pair's lse and D are computed once for all its rows.
  std::map<std::pair<int, int>, std::vector<std::size_t>> by_head;
  for (std::size_t r = 0; r < rows.size(); ++r) by_head[{rows[r].b, rows[r].h}].push_back(r);
  std::vector<double> o_row(D);
  for (const auto& [key, members] : by_head) {
    const auto [b, hk] = key;
    const std::int64_t q_len = f.seq_q_len(b), kv_len = f.seq_kv_len(b);
    if (q_len == 0) continue;
    // The queries that see any of the rows' keys: [lo, hi] (the window moves right with i).
    std::int64_t lo = q_len, hi = -1;
    for (const std::size_t r : members) {
      lo = std::min(lo, window.first_query(rows[r].j, q_len, kv_len));
      hi = std::max(hi, window.last_query(rows[r].j, q_len, kv_len));
    }
    if (hi < lo) continue;
    // lse and D = rowsum(dO * O) of every such row of the group's query heads, O exact in float64.
    const std::int64_t n = hi - lo + 1;
    std::vector<double> lse(std::size_t(n) * group), di(std::size_t(n) * group);
    for (int g = 0; g < group; ++g) {
      const int h = hk * group + g;
      for (std::int64_t i = lo; i <= hi; ++i) {
        const std::size_t at = std::size_t(g) * n + std::size_t(i - lo);
        lse[at] = reference_row(f, opt, {b, i, h}, o_row.data());
        di[at] = dot(p.do_ptr(b, i, h), o_row.data(), D);
      }
    }
    for (const std::size_t r : members) {
      const std::int64_t j = rows[r].j;
      const double* v = f.v_ptr(b, j, hk);
      double* dk_row = dk + r * D;
      double* dv_row = dv + r * D;
      const std::int64_t first = window.first_query(j, q_len, kv_len), last = window.last_query(j, q_len, kv_len);
      for (int g = 0; g < group; ++g) {
        const int h = hk * group + g;
        for (std::int64_t i = first; i <= last; ++i) {
          const std::size_t at = std::size_t(g) * n + std::size_t(i - lo);
          if (lse[at] == -std::numeric_limits<double>::infinity()) continue;  // P = 0 on this row
          const double* q = f.q_ptr(b, i, h);
          const double* dout = p.do_ptr(b, i, h);
          const detail::TextbookScore s = detail::textbook_score(f, opt, window, sc.scale, {b, i, h}, j);
          const double prob = std::exp(s.logit - lse[at]);
          const double ds = prob * (dot(dout, v, D) - di[at]) * softcap_slope(s.capped, opt.softcap);
          for (int d = 0; d < D; ++d) {
            dv_row[d] += prob * dout[d];
            dk_row[d] += sc.scale * ds * q[d];
          }
        }
      }
    }
  }
}

namespace {

// What changes at a masked edge of the keys: whether the first query row sees key j, whether the
// last one does, whether any does.
std::tuple<bool, bool, bool> key_edge_state(const KeyWindow& w, std::int64_t j, std::int64_t q_len,
                                            std::int64_t kv_len) {
  if (q_len == 0) return {false, false, false};
  return {w.visible(0, j, q_len, kv_len), w.visible(q_len - 1, j, q_len, kv_len),
          w.first_query(j, q_len, kv_len) <= w.last_query(j, q_len, kv_len)};
}

}  // namespace

std::vector<KeyRow> key_rows_to_check(const BackwardParams<double>& p, const Options& opt, std::int64_t random_rows,
                                      std::uint64_t seed) {
  const AttentionParams<double>& f = p.fwd;
  const KeyWindow window = KeyWindow::from(opt);
  return detail::sample_rows<KeyRow>(
      f.batch, f.heads_kv, [&](int b) { return f.seq_kv_len(b); },
      [&](int b, std::int64_t j) { return key_edge_state(window, j, f.seq_q_len(b), f.seq_kv_len(b)); }, random_rows,
      seed);
}

}  // namespace kattn
