// ALiBi (Press et al., "Train Short, Test Long"; FlashAttention's alibi_slopes), written once for
// every kernel and reference: the score of query i and key j of head h gains
//   -slope_h * |diagonal(i) - j|,
// diagonal(i) = i + Nk - Nq (KeyWindow::diagonal, so a shard of a longer sequence, placed by its
// diagonal shift, measures global distances). Added after softcap, before the mask. No Kokkos.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "kattn/core/host_device.hpp"
#include "kattn/core/key_window.hpp"

namespace kattn {

// The bias at a signed distance (diagonal - key) for a head of this slope (in the units of the
// slope: natural, or log2 where kernels score in log2 units).
template <class T>
KATTN_CORE_INLINE T alibi_bias(T slope, T distance) {
  return -slope * (distance < T(0) ? -distance : distance);
}
// The bias of query i and key j.
template <class T>
KATTN_CORE_INLINE T alibi_bias(T slope, const KeyWindow& window, std::int64_t i, std::int64_t j, std::int64_t q_len,
                               std::int64_t kv_len) {
  return alibi_bias(slope, static_cast<T>(window.diagonal(i, q_len, kv_len) - j));
}

// The slopes of the ALiBi paper for `heads` heads (its reference code's get_slopes): for a power
// of two n, 2^(-8 h / n) for h = 1 ... n; otherwise those of the largest power of two n below,
// then every other slope of 2n, in that order.
inline std::vector<double> alibi_standard_slopes(int heads) {
  const auto power_of_two = [](int n) {
    std::vector<double> s(static_cast<std::size_t>(n));
    for (int h = 0; h < n; ++h) s[static_cast<std::size_t>(h)] = std::exp2(-8.0 * (h + 1) / n);
    return s;
  };
  if (heads <= 0) return {};
  int n = 1;
  while (n * 2 <= heads) n *= 2;
  std::vector<double> s = power_of_two(n);
  const std::vector<double> twice = power_of_two(2 * n);
  for (int h = 0; int(s.size()) < heads; h += 2) s.push_back(twice[static_cast<std::size_t>(h)]);
  return s;
}

}  // namespace kattn
