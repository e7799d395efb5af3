// Test support for 16-bit storage: inputs rounded to bf16 / fp16 with their exact float64 copies,
// and FlashAttention's accuracy rule. The rule: against the float64 reference on the same 16-bit
// inputs, kattn's max error of o is at most twice that of the textbook algorithm run in the 16-bit
// type (S and P rounded to it, fp32 accumulation), and lse is within 1e-5 relative.
#pragma once

#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kattn/core/key_window.hpp"
#include "kattn/core/score_scaling.hpp"
#include "kattn/core/storage.hpp"
#include "kattn/reference_backward.hpp"
#include "kattn/reference_rows.hpp"
#include "support.hpp"

namespace kattn {
namespace test {

// Fills v (storage S) with unit-normal values rounded to S, and exact (a view of doubles of the
// same shape) with the stored values.
template <class View, class DoubleView>
void fill_rounded(const View& v, const DoubleView& exact, std::uint64_t seed) {
  using S = typename View::non_const_value_type;
  auto h = Kokkos::create_mirror_view(v);
  auto he = Kokkos::create_mirror_view(exact);
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  for (std::size_t i = 0; i < h.span(); ++i) {
    h.data()[i] = narrow<S>(dist(gen));
    he.data()[i] = static_cast<double>(widen(h.data()[i]));
  }
  Kokkos::deep_copy(v, h);
  Kokkos::deep_copy(exact, he);
}

// to = from element by element (same span, any storage types): narrowed to nearest even, or widened.
template <class From, class To>
void convert_into(const From& from, const To& to) {
  using S = typename To::non_const_value_type;
  auto hf = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), from);
  auto ht = Kokkos::create_mirror_view(to);
  for (std::size_t n = 0; n < hf.span(); ++n) ht.data()[n] = narrow<S>(widen(hf.data()[n]));
  Kokkos::deep_copy(to, ht);
}

// v's values rounded to S: returned as a view of S with v's extents (rank 3 or 4), and written back
// into v, so that both hold the same values.
template <class S, class View>
auto rounded_copy(const View& v) {
  using R = std::conditional_t<View::rank == 3, View3<S>, View4<S>>;
  R r;
  if constexpr (View::rank == 3)
    r = R("rounded", v.extent(0), v.extent(1), v.extent(2));
  else
    r = R("rounded", v.extent(0), v.extent(1), v.extent(2), v.extent(3));
  convert_into(v, r);
  convert_into(r, v);
  return r;
}

// A dense problem in storage S (q, k, v, o; lse in float) and its exact inputs in double.
template <class S>
struct Problem16 {
  Shape shape;
  View4<S> q, k, v, o;
  View3<float> lse;
  View4<double> qd, kd, vd, od;
  View3<double> lsed;

  Problem16(const Shape& s, std::uint64_t seed)
      : shape(s),
        q("q", s.B, s.Nq, s.Hq, s.D),
        k("k", s.B, s.Nk, s.Hkv, s.D),
        v("v", s.B, s.Nk, s.Hkv, s.D),
        o("o", s.B, s.Nq, s.Hq, s.D),
        lse("lse", s.B, s.Hq, s.Nq),
        qd("qd", s.B, s.Nq, s.Hq, s.D),
        kd("kd", s.B, s.Nk, s.Hkv, s.D),
        vd("vd", s.B, s.Nk, s.Hkv, s.D),
        od("od", s.B, s.Nq, s.Hq, s.D),
        lsed("lsed", s.B, s.Hq, s.Nq) {
    fill_rounded(q, qd, seed);
    fill_rounded(k, kd, seed + 1);
    fill_rounded(v, vd, seed + 2);
    poison(o);
    poison(lse);
  }
  // The exact inputs' params on the host.
  struct Host {
    decltype(Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), View4<double>())) q, k, v, o;
    decltype(Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), View3<double>())) lse;
    AttentionParams<double> params() const { return dense_params(q, k, v, o, lse); }
  };
  Host host() const {
    const auto m = [](const auto& x) { return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x); };
    return Host{m(qd), m(kd), m(vd), m(od), m(lsed)};
  }
};

// Row `row` of the textbook algorithm in storage type S: scores accumulated in float and rounded
// to S, the softmax in float rounded to S, P V accumulated in float and rounded to S. p holds the
// (exact) stored inputs in double. Returns lse (from the float softmax). With `mass_row`, also
// sum_j P_j |v_j| per column: the size of the P V sum, which bounds its rounding error.
template <class S>
double textbook_row_in(const AttentionParams<double>& p, const Options& opt, const QueryRow& row, double* o_row,
                       double* mass_row = nullptr) {
  const std::int64_t q_len = p.seq_q_len(row.b), kv_len = p.seq_kv_len(row.b);
  const KeyWindow window = KeyWindow::from(opt);
  const float scale = static_cast<float>(ScoreScaling::make(p.head_dim, opt.scale, opt.softcap).scale);
  const std::int64_t first = window.first(row.i, q_len, kv_len), last = window.last(row.i, q_len, kv_len);
  std::fill(o_row, o_row + p.head_dim, 0.0);
  if (mass_row) std::fill(mass_row, mass_row + p.head_dim, 0.0);
  const float sink = static_cast<float>(sink_of(opt, row.h));
  if (last < first) return sink;
  const double* q = p.q_ptr(row.b, row.i, row.h);
  const int hk = row.h / p.group_size();
  const auto round = [](float x) { return widen(narrow<S>(x)); };
  std::vector<float> s(static_cast<std::size_t>(last - first + 1));
  float m = sink;
  for (std::int64_t j = first; j <= last; ++j) {
    const double* k = p.k_ptr(row.b, j, hk);
    float dot = 0;
    for (int d = 0; d < p.head_dim; ++d) dot += static_cast<float>(q[d]) * static_cast<float>(k[d]);
    float x = dot * scale;
    if (opt.softcap > 0) x = static_cast<float>(opt.softcap) * std::tanh(x / static_cast<float>(opt.softcap));
    s[j - first] = round(x);
    m = std::isnan(s[j - first]) || std::isnan(m) ? s[j - first] + m : std::max(m, s[j - first]);
  }
  if (m == -std::numeric_limits<float>::infinity()) return -std::numeric_limits<double>::infinity();
  float l = std::exp(sink - m);
  for (float& x : s) l += (x = std::exp(x - m));
  std::vector<float> acc(p.head_dim, 0.0f);
  for (std::size_t n = 0; n < s.size(); ++n) {
    const float pn = round(s[n] / l);
    const double* v = p.v_ptr(row.b, first + std::int64_t(n), hk);
    for (int d = 0; d < p.head_dim; ++d) acc[d] += pn * static_cast<float>(v[d]);
    if (mass_row)
      for (int d = 0; d < p.head_dim; ++d) mass_row[d] += std::abs(double(pn) * v[d]);
  }
  for (int d = 0; d < p.head_dim; ++d) o_row[d] = round(acc[d]);
  return static_cast<double>(m) + std::log(static_cast<double>(l));
}

// The accuracy rule over every query row of p (the exact inputs, host memory), for kattn's o and
// lse (flattened in the layout of p's o and lse). S: the storage of o; the baseline is the
// textbook in S. Each element of o must be within twice the textbook's largest error, or within
// the first-order error of rounding P and o to S once each, u (|o| + sum_j P_j |v_j|) with u the
// unit roundoff of S: on small problems (a few keys, a few columns) the textbook's largest error
// is a small sample and can fall well under what the same roundings give elsewhere. Where the
// textbook in S is exact (one key per row, or none) no rounding is owed, and kattn must be within
// 1e-6, the floor of float accumulation. `allowance` widens the bound for a result computed from inputs that were
// themselves rounded to S beyond the textbook's (a merge of 16-bit parts).
template <class S>
void expect_16bit_rule(const AttentionParams<double>& p, const Options& opt, const std::vector<double>& o,
                       const std::vector<double>& lse, const std::string& what, double allowance = 0) {
  const double unit_roundoff = std::is_same_v<S, bf16> ? 0x1p-8 : 0x1p-11;
  std::vector<double> ref(p.head_dim), tb(p.head_dim), mass(p.head_dim);
  std::vector<double> errors, rounding_bounds;
  double err_tb = 0, lse_rel = 0;
  bool nan_mismatch = false;
  for (int b = 0; b < p.batch; ++b)
    for (std::int64_t i = 0; i < p.seq_q_len(b); ++i)
      for (int h = 0; h < p.heads_q; ++h) {
        const QueryRow row{b, i, h};
        const double lse_ref = reference_row(p, opt, row, ref.data());
        textbook_row_in<S>(p, opt, row, tb.data(), mass.data());
        const std::ptrdiff_t at = p.o_ptr(b, i, h) - p.o.data;
        for (int d = 0; d < p.head_dim; ++d) {
          const double x = o[at + d];
          if (std::isnan(x) != std::isnan(ref[d])) nan_mismatch = true;
          if (std::isnan(ref[d])) continue;
          errors.push_back(std::abs(x - ref[d]));
          rounding_bounds.push_back(tb[d] == ref[d] ? 0 : unit_roundoff * (std::abs(ref[d]) + mass[d]));
          err_tb = std::max(err_tb, std::abs(tb[d] - ref[d]));
        }
        if (!lse.empty()) {
          const double x = lse[p.lse_ptr(b, i, h) - p.lse.data];
          if (std::isnan(x) != std::isnan(lse_ref))
            nan_mismatch = true;
          else if (std::isinf(lse_ref))
            EXPECT_EQ(x, lse_ref) << what << ": lse of a row that sees no key";
          else if (!std::isnan(lse_ref))
            lse_rel = std::max(lse_rel, std::abs(x - lse_ref) / std::max(1.0, std::abs(lse_ref)));
        }
      }
  EXPECT_FALSE(nan_mismatch) << what
                             << ": NaN (or unwritten elements) where the reference has none, or none where it has";
  // The element that most exceeds its bound (excess <= 0 when all meet it).
  double excess = -std::numeric_limits<double>::infinity(), worst_err = 0, worst_bound = 0;
  for (std::size_t e = 0; e < errors.size(); ++e) {
    const double bound = std::max({2 * err_tb, rounding_bounds[e], 1e-6}) + allowance;
    if (errors[e] - bound > excess) excess = errors[e] - bound, worst_err = errors[e], worst_bound = bound;
  }
  EXPECT_LE(worst_err, worst_bound) << what << ": o error (the textbook in " << storage_name<S>()
                                    << ": largest error " << err_tb << ")";
  EXPECT_LE(lse_rel, 1e-5) << what << ": lse relative error";
}

// The textbook backward of a dense problem run in storage type S, as autograd would run the
// textbook forward in S: S and P rounded to S, dP = dO V^T rounded, dS = P (dP - rowsum(P dP))
// rounded (times 1 - tanh^2 under softcap), and dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO
// accumulated in float (their one rounding to S is textbook16_backward's). p holds the exact
// inputs in double (q, k, v; dense, LayoutRight) and dout is dO [B, Nq, Hq, D] in the same layout
// as q. Outputs: the float sums dq, dk, dv in the layouts of q and k. With d_from_o_in_s,
// D = rowsum(dO o) reads o rounded to S (fp32 accumulation) instead of rowsum(P dP): what
// FlashAttention's backward and kattn's do. With `mass` (dq, dk, dv), also the sums of the terms'
// magnitudes, scale sum_j |dS_ij| |k_j|, scale sum_i |dS_ij| |q_i| and sum_i P_ij |dO_i|: what
// rounding dS and P once each can change.
template <class S>
void textbook_backward_sums_in(const AttentionParams<double>& p, const std::vector<double>& dout, const Options& opt,
                               std::vector<double>& dq, std::vector<double>& dk, std::vector<double>& dv,
                               bool d_from_o_in_s, std::vector<double> (*mass)[3] = nullptr) {
  const int B = p.batch, Hq = p.heads_q, Hkv = p.heads_kv, D = p.head_dim, G = p.group_size();
  const std::int64_t Nq = p.q_len, Nk = p.kv_len;
  const KeyWindow window = KeyWindow::from(opt);
  const float scale = static_cast<float>(ScoreScaling::make(D, opt.scale, opt.softcap).scale);
  const float cap = static_cast<float>(opt.softcap);
  const auto round = [](float x) { return widen(narrow<S>(x)); };
  std::vector<float> aq(B * Nq * Hq * D, 0.0f), ak(B * Nk * Hkv * D, 0.0f), av(B * Nk * Hkv * D, 0.0f);
  if (mass) {
    (*mass)[0].assign(aq.size(), 0.0), (*mass)[1].assign(ak.size(), 0.0), (*mass)[2].assign(av.size(), 0.0);
  }
  const auto qi = [&](int b, std::int64_t i, int h) { return ((b * Nq + i) * Hq + h) * D; };
  const auto kj = [&](int b, std::int64_t j, int h) { return ((b * Nk + j) * Hkv + h) * D; };
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hq; ++h)
      for (std::int64_t i = 0; i < Nq; ++i) {
        const int hk = h / G;
        const std::int64_t first = window.first(i, Nq, Nk), last = window.last(i, Nq, Nk);
        if (last < first) continue;
        const std::size_t n = static_cast<std::size_t>(last - first + 1);
        std::vector<float> sc(n), th(n, 0.0f), pr(n), dp(n);
        float m = -std::numeric_limits<float>::infinity();
        for (std::size_t c = 0; c < n; ++c) {
          const std::int64_t j = first + std::int64_t(c);
          float dot = 0;
          for (int d = 0; d < D; ++d) dot += float(p.q_ptr(b, i, h)[d]) * float(p.k_ptr(b, j, hk)[d]);
          float x = round(dot * scale);
          if (cap > 0) x = round(cap * (th[c] = std::tanh(x / cap)));
          m = std::max(m, sc[c] = x);
        }
        float l = 0;
        for (std::size_t c = 0; c < n; ++c) l += (pr[c] = std::exp(sc[c] - m));
        float di = 0;
        for (int d = 0; d < D && d_from_o_in_s; ++d) {
          float o = 0;
          for (std::size_t c = 0; c < n; ++c) o += pr[c] / l * float(p.v_ptr(b, first + std::int64_t(c), hk)[d]);
          di += float(dout[qi(b, i, h) + d]) * round(o);
        }
        for (std::size_t c = 0; c < n; ++c) {
          pr[c] = round(pr[c] / l);
          float dot = 0;
          for (int d = 0; d < D; ++d)
            dot += float(dout[qi(b, i, h) + d]) * float(p.v_ptr(b, first + std::int64_t(c), hk)[d]);
          dp[c] = round(dot);
          if (!d_from_o_in_s) di += pr[c] * dp[c];
        }
        for (std::size_t c = 0; c < n; ++c) {
          const std::int64_t j = first + std::int64_t(c);
          float ds = round(pr[c] * (dp[c] - di));
          if (cap > 0) ds = round(ds * (1 - th[c] * th[c]));
          for (int d = 0; d < D; ++d) {
            aq[qi(b, i, h) + d] += ds * float(p.k_ptr(b, j, hk)[d]);
            ak[kj(b, j, hk) + d] += ds * float(p.q_ptr(b, i, h)[d]);
            av[kj(b, j, hk) + d] += pr[c] * float(dout[qi(b, i, h) + d]);
            if (mass) {
              (*mass)[0][qi(b, i, h) + d] += scale * std::abs(double(ds) * p.k_ptr(b, j, hk)[d]);
              (*mass)[1][kj(b, j, hk) + d] += scale * std::abs(double(ds) * p.q_ptr(b, i, h)[d]);
              (*mass)[2][kj(b, j, hk) + d] += std::abs(double(pr[c]) * dout[qi(b, i, h) + d]);
            }
          }
        }
      }
  dq.resize(aq.size()), dk.resize(ak.size()), dv.resize(av.size());
  for (std::size_t x = 0; x < aq.size(); ++x) dq[x] = scale * aq[x];
  for (std::size_t x = 0; x < ak.size(); ++x) dk[x] = scale * ak[x], dv[x] = av[x];
}

// FlashAttention's rule for the gradients in S: each of dq, dk, dv within twice the max error of
// the textbook backward in S (1e-6 where that one is exact), plus what reading o rounded to S for
// D = rowsum(dO o) changes in the textbook itself: FlashAttention's backward and kattn's read it
// (autograd's does not), and on rows of a handful of keys that rounding alone can reach the
// textbook's error (a one-key row: D = dO o16 against dP = dO v, where exact dS is 0). As for o
// (expect_16bit_rule), an element may instead be within the first-order error of rounding dS or P
// and the gradient once each, u (|g| + mass): on small problems the textbook's largest error is a
// small sample (bf16 pairs round P and dS as the textbook does, and failed the 2x bound alone at
// 2.03x on a 21-key problem).
struct Textbook16Backward {
  std::vector<double> grads[3];  // dq, dk, dv: autograd's textbook in S
  double allowance[3];           // max |(D from o in S) - autograd's|, per gradient, before the
                                 // last rounding to S (whose flips would only add an ulp)
  std::vector<double> mass[3];   // per element: the magnitudes the roundings of dS and P scale
  double unit_roundoff = 0;      // of S
};

template <class S>
Textbook16Backward textbook16_backward(const AttentionParams<double>& p, const std::vector<double>& dout,
                                       const Options& opt) {
  Textbook16Backward t;
  t.unit_roundoff = std::is_same_v<S, bf16> ? 0x1p-8 : 0x1p-11;
  std::vector<double> sums[3], o16[3];
  textbook_backward_sums_in<S>(p, dout, opt, sums[0], sums[1], sums[2], /*d_from_o_in_s=*/false, &t.mass);
  textbook_backward_sums_in<S>(p, dout, opt, o16[0], o16[1], o16[2], /*d_from_o_in_s=*/true);
  for (int g = 0; g < 3; ++g) {
    t.grads[g].resize(sums[g].size());
    for (std::size_t n = 0; n < sums[g].size(); ++n) t.grads[g][n] = widen(narrow<S>(static_cast<float>(sums[g][n])));
    t.allowance[g] = 0;
    for (std::size_t n = 0; n < o16[g].size(); ++n)
      if (!std::isnan(o16[g][n]) && !std::isnan(sums[g][n]))
        t.allowance[g] = std::max(t.allowance[g], std::abs(o16[g][n] - sums[g][n]));
  }
  return t;
}

// kattn's dq, dk, dv (a) against the float64 reference (ref) under the rule above; NaN where ref
// has NaN only.
inline void expect_16bit_grad_rule(const std::vector<double> (&a)[3], const Textbook16Backward& tb,
                                   const std::vector<double> (&ref)[3], const std::string& what) {
  static const char* const names[3] = {"dq ", "dk ", "dv "};
  for (int g = 0; g < 3; ++g) {
    double err_tb = 0;
    bool nan_mismatch = false;
    for (std::size_t n = 0; n < ref[g].size(); ++n) {
      if (std::isnan(a[g][n]) != std::isnan(ref[g][n])) nan_mismatch = true;
      if (!std::isnan(ref[g][n])) err_tb = std::max(err_tb, std::abs(tb.grads[g][n] - ref[g][n]));
    }
    EXPECT_FALSE(nan_mismatch) << names[g] << what << ": NaN where the reference has none, or none where it has";
    // The element that most exceeds its bound (excess <= 0 when all meet it).
    double excess = -std::numeric_limits<double>::infinity(), worst_err = 0, worst_bound = 0;
    for (std::size_t n = 0; n < ref[g].size(); ++n) {
      if (std::isnan(ref[g][n])) continue;
      const double err = std::abs(a[g][n] - ref[g][n]);
      const double rounding =
          tb.grads[g][n] == ref[g][n] ? 0 : tb.unit_roundoff * (std::abs(ref[g][n]) + tb.mass[g][n]);
      const double bound = std::max({2 * err_tb, rounding, 1e-6}) + tb.allowance[g];
      if (err - bound > excess) excess = err - bound, worst_err = err, worst_bound = bound;
    }
    EXPECT_LE(worst_err, worst_bound) << names[g] << what << ": error (the textbook in 16 bits: largest " << err_tb
                                      << ", o in 16 bits changes it by up to " << tb.allowance[g] << ")";
  }
}

// What a 16-bit backward is checked against: dout in S and its exact values (seeded seed + 3), the
// float64 reference gradients (dq, dk, dv) on p's exact inputs, and the textbook in S.
template <class S>
struct Backward16Reference {
  View4<S> dout;
  View4<double> dout_d;
  std::vector<double> grads[3];
  Textbook16Backward tb;
};

template <class S>
Backward16Reference<S> backward16_reference(const Problem16<S>& p, const Options& opt, std::uint64_t seed) {
  const Shape& s = p.shape;
  Backward16Reference<S> r;
  r.dout = View4<S>("dout", s.B, s.Nq, s.Hq, s.D);
  r.dout_d = View4<double>("dout_d", s.B, s.Nq, s.Hq, s.D);
  View4<double> dq_r("dq_r", s.B, s.Nq, s.Hq, s.D), dk_r("dk_r", s.B, s.Nk, s.Hkv, s.D),
      dv_r("dv_r", s.B, s.Nk, s.Hkv, s.D);
  fill_rounded(r.dout, r.dout_d, seed + 3);
  reference_backward(TestSpace(), p.qd, p.kd, p.vd, r.dout_d, dq_r, dk_r, dv_r, opt);
  Kokkos::fence();
  r.grads[0] = to_host(dq_r), r.grads[1] = to_host(dk_r), r.grads[2] = to_host(dv_r);
  r.tb = textbook16_backward<S>(p.host().params(), to_host(r.dout_d), opt);
  return r;
}

}  // namespace test
}  // namespace kattn
