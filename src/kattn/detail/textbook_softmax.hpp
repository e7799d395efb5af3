// The textbook algorithm's first two steps, shared by the float64 references of the forward
// (reference.cpp) and the backward (reference_backward.cpp): S = scale q k^T (softcapped, ALiBi's
// bias and the bias tensor added, masked to -inf) for every (query, key) pair, then the row softmax P = exp(S - max) / l in place (with
// the head's sink, if any, as one more logit in max and l).
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "kattn/compat.hpp"
#include "kattn/detail/score_matrix.hpp"
#include "kattn/core/alibi.hpp"
#include "kattn/core/attention_params.hpp"
#include "kattn/core/key_window.hpp"
#include "kattn/core/score_bias.hpp"
#include "kattn/core/state.hpp"

namespace kattn {
namespace detail {

// S and P share one [B, Hq, Nq, Nk] array (ScoreMatrix): the softmax reads S and writes P in place;
// it writes lse too where p.lse is set.

template <class ExecSpace, class T>
struct TextbookScores {
  AttentionParams<T> p;
  ScoreMatrix<ExecSpace, T> s;
  KeyWindow window;
  T scale, softcap;
  const T* alibi = nullptr;  // Options::alibi_slopes per query head (natural units), or null
  ScoreBias bias;            // Options::bias

  KOKKOS_INLINE_FUNCTION void operator()(const int b, const int h, const std::int64_t i, const std::int64_t j) const {
    const std::int64_t q_len = p.seq_q_len(b), kv_len = p.seq_kv_len(b);
    if (i >= q_len || j >= kv_len) return;
    if (!window.visible(i, j, q_len, kv_len)) {
      s(b, h, i, j) = -compat::infinity<T>();
      return;
    }
    const T* q = p.q_ptr(b, i, h);
    const T* k = p.k_ptr(b, j, h / p.group_size());
    T dot = 0;
    for (int d = 0; d < p.head_dim; ++d) dot += q[d] * k[d];
    T x = scale * dot;
    if (softcap > T(0)) x = softcap * compat::tanh(x / softcap);
    if (alibi) x += alibi_bias(alibi[h], window, i, j, q_len, kv_len);
    if (bias.active()) bias.dispatch([&](auto tag) { x += bias_value<T>(bias.row<decltype(tag)>(b, h, i)[j]); });
    s(b, h, i, j) = x;
  }
};

template <class ExecSpace, class T>
struct TextbookSoftmax {
  AttentionParams<T> p;
  ScoreMatrix<ExecSpace, T> s;
  KeyWindow window;
  // Options::sinks per query head (natural log), or null: one more logit in the row, no value.
  const T* sinks = nullptr;

  KOKKOS_INLINE_FUNCTION void operator()(const int b, const int h, const std::int64_t i) const {
    const std::int64_t q_len = p.seq_q_len(b), kv_len = p.seq_kv_len(b);
    if (i >= q_len) return;
    T m = sinks ? sinks[h] : -compat::infinity<T>();
    for (std::int64_t j = 0; j < kv_len; ++j) m = max_nan(m, s(b, h, i, j));
    T l = 0;
    if (m != -compat::infinity<T>()) {
      if (sinks) l = compat::exp(sinks[h] - m);
      for (std::int64_t j = 0; j < kv_len; ++j) {
        const T e = compat::exp(s(b, h, i, j) - m);
        s(b, h, i, j) = e;
        l += e;
      }
      for (std::int64_t j = 0; j < kv_len; ++j) s(b, h, i, j) /= l;
    } else {
      for (std::int64_t j = 0; j < kv_len; ++j) s(b, h, i, j) = T(0);
    }
    if (p.lse) *p.lse_ptr(b, i, h) = (l == T(0)) ? -compat::infinity<T>() : m + compat::log(l);
  }
};

}  // namespace detail
}  // namespace kattn
