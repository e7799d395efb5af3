// A problem whose merge of partial states must keep a NaN under a weight that underflows to 0 in
// float: the first half of the keys score -200 against every query (the V row of key 5 holds a
// NaN in dim 0), the second half score 0 with V = 1. The textbook gives o[., 0] = NaN,
// o[., 1..] = 1 and lse = ln(Nk / 2) for every row. Any split, shard or tile boundary between
// the halves makes a part (o = NaN, lse ~ -196) whose weight e^-200 is 0 in float.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "support.hpp"

namespace kattn {
namespace test {

inline Problem<float> underflowing_nan_problem(int Nq, int Nk) {
  Shape s;
  s.Nq = Nq, s.Nk = Nk, s.Hq = 2, s.Hkv = 1, s.D = 4;
  Problem<float> p(s, fresh_seed());
  auto q = Kokkos::create_mirror_view(p.q);
  auto k = Kokkos::create_mirror_view(p.k);
  auto v = Kokkos::create_mirror_view(p.v);
  for (int i = 0; i < s.Nq; ++i)
    for (int h = 0; h < s.Hq; ++h)
      for (int d = 0; d < s.D; ++d) q(0, i, h, d) = d == 0 ? 1.0f : 0.0f;
  for (int j = 0; j < s.Nk; ++j)
    for (int d = 0; d < s.D; ++d) {
      k(0, j, 0, d) = (j < Nk / 2 && d == 0) ? -200.0f : 0.0f;
      v(0, j, 0, d) = (j == 5 && d == 0) ? std::numeric_limits<float>::quiet_NaN() : 1.0f;
    }
  Kokkos::deep_copy(p.q, q);
  Kokkos::deep_copy(p.k, k);
  Kokkos::deep_copy(p.v, v);
  return p;
}

// The options the problem is built for (scores are q.k exactly).
inline Options underflowing_nan_options() {
  Options opt;
  opt.scale = 1.0;
  return opt;
}

// Checks rows of o [1, n, 2, 4] and lse [1, 2, n] against the textbook's answer.
template <class OView, class LseView>
void expect_underflowing_nan_result(const OView& o_view, const LseView& lse_view, int Nk, const std::string& what) {
  auto o = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o_view);
  auto lse = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse_view);
  for (std::size_t i = 0; i < o.extent(1); ++i)
    for (std::size_t h = 0; h < o.extent(2); ++h) {
      EXPECT_TRUE(std::isnan(o(0, i, h, 0))) << what << ": row " << i << " head " << h << " o[0] = " << o(0, i, h, 0);
      for (std::size_t d = 1; d < o.extent(3); ++d) EXPECT_NEAR(o(0, i, h, d), 1.0f, 1e-5f) << what;
      EXPECT_NEAR(lse(0, h, i), std::log(Nk / 2.0f), 1e-5f) << what;
    }
}

}  // namespace test
}  // namespace kattn
