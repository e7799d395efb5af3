// The textbook oracle with an element mask: S = scale q k^T [softcapped], kept where the element
// mask and the options' causal/window mask both keep it, P = softmax(S), O = P V, and the
// textbook backward (dS = P (dP - rowsum(P dP)), dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO).
// Plain host loops, independent of the tiled kernels: the oracle of the block-sparse tests and of
// `kattn run --block-mask ... --check`, whose element mask is the block mask expanded
// (expand_block_mask). Host-accessible dense views only; O(Nq Nk) work and mask memory per head.
#pragma once

#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kattn/block_mask.hpp"
#include "kattn/core/alibi.hpp"
#include "kattn/core/key_window.hpp"
#include "kattn/options.hpp"

namespace kattn {

// keep[(h * Nq + i) * Nk + j] (h = 0 only when heads == 1: shared).
struct ElementMask {
  int heads = 1;
  std::int64_t q_len = 0, kv_len = 0;
  std::vector<std::uint8_t> keep;

  bool keeps(int h, std::int64_t i, std::int64_t j) const {
    return keep[static_cast<std::size_t>(((heads == 1 ? 0 : h) * q_len + i) * kv_len + j)] != 0;
  }
};

// The element mask of a block mask for Nq queries and Nk keys.
inline ElementMask expand_block_mask(const BlockMask& m, std::int64_t q_len, std::int64_t kv_len) {
  ElementMask e;
  e.heads = m.heads();
  e.q_len = q_len;
  e.kv_len = kv_len;
  e.keep.assign(static_cast<std::size_t>(std::int64_t(m.heads()) * q_len * kv_len), 0);
  const std::int64_t B = m.block();
  for (int h = 0; h < m.heads(); ++h)
    for (std::int64_t i = 0; i < q_len; ++i)
      for (std::int64_t j = 0; j < kv_len; ++j)
        e.keep[static_cast<std::size_t>((h * q_len + i) * kv_len + j)] = m.listed(h, i / B, j / B) ? 1 : 0;
  return e;
}

namespace detail {

// ALiBi's bias and the bias tensor's of (b, h, i, j) under opt (0 without either). The bias
// tensor must be in host memory.
template <class T>
T added_bias(const Options& opt, int b, int h, std::int64_t i, std::int64_t j, std::int64_t Nq, std::int64_t Nk) {
  T x = 0;
  if (!opt.alibi_slopes.empty())
    x = alibi_bias(static_cast<T>(opt.alibi_slopes[static_cast<std::size_t>(h)]), KeyWindow::from(opt), i, j, Nq, Nk);
  if (opt.bias.active())
    opt.bias.dispatch([&](auto tag) { x += bias_value<T>(opt.bias.row<decltype(tag)>(b, h, i)[j]); });
  return x;
}

// Scaled, softcapped, ALiBi-biased, masked scores of one (b, h, i) row; -inf where masked.
template <class QView, class KView, class T>
void masked_scores(const QView& q, const KView& k, const ElementMask& mask, const Options& opt, int b, int h,
                   std::int64_t i, std::vector<T>& s) {
  const std::int64_t Nq = q.extent(1), Nk = k.extent(1);
  const int D = static_cast<int>(q.extent(3)), G = static_cast<int>(q.extent(2) / k.extent(2));
  const T scale = static_cast<T>(opt.scale != 0.0 ? opt.scale : 1.0 / std::sqrt(double(D)));
  const KeyWindow w = KeyWindow::from(opt);
  s.assign(static_cast<std::size_t>(Nk), -std::numeric_limits<T>::infinity());
  for (std::int64_t j = 0; j < Nk; ++j) {
    if (!mask.keeps(h, i, j) || !w.visible(i, j, Nq, Nk)) continue;
    T dot = 0;
    for (int d = 0; d < D; ++d) dot += q(b, i, h, d) * k(b, j, h / G, d);
    T x = scale * dot;
    if (opt.softcap > 0.0) x = static_cast<T>(opt.softcap) * std::tanh(x / static_cast<T>(opt.softcap));
    s[static_cast<std::size_t>(j)] = x + added_bias<T>(opt, b, h, i, j, Nq, Nk);
  }
}

// P of the row in place, with the sink as one more logit of no value; returns the natural-log LSE
// (-inf when the row sees no key and has no sink: P = 0).
template <class T>
T softmax_row(std::vector<T>& s, T sink = -std::numeric_limits<T>::infinity()) {
  T m = sink;
  for (T x : s) m = x > m ? x : m;
  if (m == -std::numeric_limits<T>::infinity()) {
    for (T& x : s) x = 0;
    return m;
  }
  T l = std::exp(sink - m);
  for (T& x : s) {
    x = std::exp(x - m);
    l += x;
  }
  for (T& x : s) x /= l;
  return m + std::log(l);
}

}  // namespace detail

// q [B, Nq, Hq, D], k, v [B, Nk, Hkv, D], o [B, Nq, Hq, D], lse [B, Hq, Nq] (may be empty).
template <class QView, class KView, class VView, class OView, class LseView>
void reference_masked(const QView& q, const KView& k, const VView& v, const OView& o, const LseView& lse,
                      const ElementMask& mask, const Options& opt = {}) {
  using T = typename OView::non_const_value_type;
  const int B = static_cast<int>(q.extent(0)), Hq = static_cast<int>(q.extent(2)), D = static_cast<int>(q.extent(3));
  const int G = static_cast<int>(q.extent(2) / k.extent(2));
  const std::int64_t Nq = q.extent(1), Nk = k.extent(1);
  std::vector<T> s;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hq; ++h)
      for (std::int64_t i = 0; i < Nq; ++i) {
        detail::masked_scores(q, k, mask, opt, b, h, i, s);
        const T l = detail::softmax_row(s, static_cast<T>(sink_of(opt, h)));
        if (lse.size() > 0) lse(b, h, i) = l;
        for (int d = 0; d < D; ++d) {
          T acc = 0;
          for (std::int64_t j = 0; j < Nk; ++j)
            if (s[static_cast<std::size_t>(j)] != T(0)) acc += s[static_cast<std::size_t>(j)] * v(b, j, h / G, d);
          o(b, i, h, d) = acc;
        }
      }
}

// The gradients of sum(o * dout) under the element mask: dq like q, dk and dv like k (summed over
// each GQA group). Overwrites dq, dk, dv; returns the sinks' gradient (empty without sinks).
template <class QView, class KView, class VView, class DoView, class DqView, class DkView, class DvView>
std::vector<double> reference_backward_masked(const QView& q, const KView& k, const VView& v, const DoView& dout, const DqView& dq,
                               const DkView& dk, const DvView& dv, const ElementMask& mask, const Options& opt = {}) {
  using T = typename DqView::non_const_value_type;
  const int B = static_cast<int>(q.extent(0)), Hq = static_cast<int>(q.extent(2)), D = static_cast<int>(q.extent(3));
  const int G = static_cast<int>(q.extent(2) / k.extent(2));
  const std::int64_t Nq = q.extent(1), Nk = k.extent(1);
  const T scale = static_cast<T>(opt.scale != 0.0 ? opt.scale : 1.0 / std::sqrt(double(D)));
  Kokkos::deep_copy(dq, T(0));
  Kokkos::deep_copy(dk, T(0));
  Kokkos::deep_copy(dv, T(0));
  std::vector<T> s, p, ds;
  std::vector<double> dsinks(opt.sinks.size(), 0.0);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < Hq; ++h)
      for (std::int64_t i = 0; i < Nq; ++i) {
        detail::masked_scores(q, k, mask, opt, b, h, i, s);
        p = s;
        const T sink = static_cast<T>(sink_of(opt, h));
        const T lse = detail::softmax_row(p, sink);
        ds.assign(static_cast<std::size_t>(Nk), T(0));
        T di = 0;
        for (std::int64_t j = 0; j < Nk; ++j) {
          if (p[static_cast<std::size_t>(j)] == T(0)) continue;
          T dp = 0;
          for (int d = 0; d < D; ++d) dp += dout(b, i, h, d) * v(b, j, h / G, d);
          ds[static_cast<std::size_t>(j)] = dp;
          di += p[static_cast<std::size_t>(j)] * dp;
        }
        if (!opt.sinks.empty() && sink != -std::numeric_limits<T>::infinity())
          dsinks[static_cast<std::size_t>(h)] -= double(std::exp(sink - lse) * di);  // d(sink) = -p_sink D
        for (std::int64_t j = 0; j < Nk; ++j) {
          const T pj = p[static_cast<std::size_t>(j)];
          if (pj == T(0)) continue;
          T g = pj * (ds[static_cast<std::size_t>(j)] - di);
          if (opt.softcap > 0.0) {
            const T capped = s[static_cast<std::size_t>(j)] - detail::added_bias<T>(opt, b, h, i, j, Nq, Nk);
            const T th = capped / static_cast<T>(opt.softcap);  // = tanh(x / cap)
            g *= T(1) - th * th;
          }
          for (int d = 0; d < D; ++d) {
            dq(b, i, h, d) += scale * g * k(b, j, h / G, d);
            dk(b, j, h / G, d) += scale * g * q(b, i, h, d);
            dv(b, j, h / G, d) += pj * dout(b, i, h, d);
          }
        }
      }
  return dsinks;
}

}  // namespace kattn
