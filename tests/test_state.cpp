// The state algebra (m, l, o): fold, merge, finish, the empty state, and the exp2 it relies on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kattn/detail/exp2.hpp"
#include "kattn/core/state.hpp"

namespace kattn {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The state of a row of scores (natural-log units in, log2 inside), built by folding one score
// at a time, with a 1-dim value v = score index so o carries information.
struct Row {
  RowState<double> st = RowState<double>::empty();
  double o = 0;
  void fold(double s, double v) {
    const double alpha = fold_max(st, s * kLog2e);
    o *= alpha;
    const double p = std::exp2(s * kLog2e - st.m);
    st.l += p;
    o += p * v;
  }
};

TEST(State, MergeWithEmptyIsIdentity) {
  Row a;
  a.fold(0.3, 1.0);
  a.fold(-2.0, 2.0);
  const Merge<double> m1 = merge(a.st, RowState<double>::empty());
  const Merge<double> m2 = merge(RowState<double>::empty(), a.st);
  EXPECT_EQ(m1.state.m, a.st.m);
  EXPECT_EQ(m1.state.l, a.st.l);
  EXPECT_EQ(m1.alpha_a, 1.0);
  EXPECT_EQ(m1.alpha_b, 0.0);
  EXPECT_EQ(m2.state.m, a.st.m);
  EXPECT_EQ(m2.state.l, a.st.l);
  EXPECT_EQ(m2.alpha_a, 0.0);
  EXPECT_EQ(m2.alpha_b, 1.0);
}

TEST(State, MergingTwoEmptyStatesIsEmptyWithoutNaN) {
  const Merge<double> m = merge(RowState<double>::empty(), RowState<double>::empty());
  EXPECT_TRUE(m.state.is_empty());
  EXPECT_EQ(m.alpha_a, 0.0);
  EXPECT_EQ(m.alpha_b, 0.0);
  const Finish<double> f = finish(m.state);
  EXPECT_EQ(f.inv_l, 0.0);
  EXPECT_EQ(f.lse, -kInf);
}

TEST(State, MergeOfSplitsEqualsOneFold) {
  std::mt19937_64 gen(std::random_device{}());
  std::normal_distribution<double> dist(0.0, 3.0);
  std::vector<double> s(1000);
  for (auto& x : s) x = dist(gen);
  Row whole;
  for (std::size_t i = 0; i < s.size(); ++i) whole.fold(s[i], double(i));
  // Splits from 1 to more than the number of scores: empty splits are empty states.
  for (std::size_t splits : {1, 2, 3, 7, 64, 999, 1000, 1500}) {
    RowState<double> st = RowState<double>::empty();
    double o = 0;
    const std::size_t chunk = (s.size() + splits - 1) / splits;
    for (std::size_t c = 0; c < splits; ++c) {
      Row part;
      for (std::size_t i = c * chunk; i < std::min(s.size(), (c + 1) * chunk); ++i) part.fold(s[i], double(i));
      const Merge<double> m = merge(st, part.st);
      o = m.alpha_a * o + m.alpha_b * part.o;
      st = m.state;
    }
    const Finish<double> a = finish(st), b = finish(whole.st);
    EXPECT_NEAR(o * a.inv_l, whole.o * b.inv_l, 1e-12 * 1000) << splits << " splits";
    EXPECT_NEAR(a.lse, b.lse, 1e-12) << splits << " splits";
  }
}

TEST(State, FinishedRowsMergeLikeStates) {
  // Two halves finished into (o / l, lse) and merged through from_lse equal the whole row.
  Row a, b, whole;
  for (int i = 0; i < 10; ++i) (i < 4 ? a : b).fold(0.1 * i * i - 2, i), whole.fold(0.1 * i * i - 2, i);
  const Finish<double> fa = finish(a.st), fb = finish(b.st), fw = finish(whole.st);
  const Merge<double> m = merge(from_lse(fa.lse), from_lse(fb.lse));
  const double o = m.alpha_a * a.o * fa.inv_l + m.alpha_b * b.o * fb.inv_l;
  const Finish<double> f = finish(m.state);
  EXPECT_NEAR(o * f.inv_l, whole.o * fw.inv_l, 1e-13);
  EXPECT_NEAR(f.lse, fw.lse, 1e-13);
  EXPECT_TRUE(from_lse(-kInf).is_empty());
}

// A sink is one more logit with a zero value: finish_with_sink equals the textbook softmax over
// the scores and the sink, for a row of keys, an empty row, no sink and a dominating sink.
TEST(State, SinkIsOneMoreLogitWithZeroValue) {
  const std::vector<double> scores = {0.3, -1.2, 2.5, 0.0, -0.7};
  for (double sink : {-kInf, -3.0, 0.4, 2.5, 40.0}) {
    Row r;
    for (std::size_t i = 0; i < scores.size(); ++i) r.fold(scores[i], double(i));
    const Finish<double> f = finish_with_sink(r.st, sink * kLog2e);
    double z = std::exp(sink), ov = 0;
    for (std::size_t i = 0; i < scores.size(); ++i) z += std::exp(scores[i]), ov += std::exp(scores[i]) * double(i);
    EXPECT_NEAR(r.o * f.inv_l, ov / z, 1e-14) << "sink " << sink;
    EXPECT_NEAR(f.lse, std::log(z), 1e-14) << "sink " << sink;
    // The gradient: d lse-weighted loss L = sum_d dO_d O_d over the sink's logit is -p_sink D.
    const double delta = 0.7 * (ov / z), eps = 1e-6;
    if (sink != -kInf) {
      const auto out = [&](double s) {
        double zz = std::exp(s), oo = 0;
        for (std::size_t i = 0; i < scores.size(); ++i) zz += std::exp(scores[i]), oo += std::exp(scores[i]) * double(i);
        return 0.7 * oo / zz;  // dO = 0.7, so L = 0.7 O and D = dO O
      };
      const double fd = (out(sink + eps) - out(sink - eps)) / (2 * eps);
      EXPECT_NEAR(sink_gradient(sink, f.lse, delta), fd, 1e-8) << "sink " << sink;
    } else {
      EXPECT_EQ(sink_gradient(sink, f.lse, delta), 0.0);
    }
  }
  // A row that saw no key: o = 0, lse = the sink; without a sink, as finish.
  const Finish<double> e = finish_with_sink(RowState<double>::empty(), 1.5 * kLog2e);
  EXPECT_EQ(e.inv_l, 0.0);
  EXPECT_NEAR(e.lse, 1.5, 1e-15);
  const Finish<double> none = finish_with_sink(RowState<double>::empty(), -kInf);
  EXPECT_EQ(none.inv_l, 0.0);
  EXPECT_EQ(none.lse, -kInf);
  EXPECT_TRUE(std::isnan(finish_with_sink(RowState<double>{1.0, 1.0}, std::nan("")).lse));
}

TEST(State, LargeScoreGapsNeverMakeNaN) {
  Row r;
  r.fold(-1e300, 1);
  r.fold(1e300, 2);
  r.fold(0, 3);
  const Finish<double> f = finish(r.st);
  EXPECT_FALSE(std::isnan(r.o * f.inv_l));
  EXPECT_EQ(r.o * f.inv_l, 2.0);
}

TEST(State, NaNPropagates) {
  Row r;
  r.fold(1, 1);
  r.fold(std::nan(""), 2);
  r.fold(3, 3);
  EXPECT_TRUE(std::isnan(r.st.m));
  EXPECT_TRUE(std::isnan(finish(r.st).lse));
  EXPECT_TRUE(std::isnan(max_nan(1.0, std::nan(""))));
  EXPECT_TRUE(std::isnan(max_nan(std::nan(""), 1.0)));
}

TEST(Exp2, AccurateAndExactAtTheEnds) {
  std::mt19937_64 gen(std::random_device{}());
  std::uniform_real_distribution<double> u(-120, 120);
  double worst_f = 0, worst_d = 0;
  for (int i = 0; i < 100000; ++i) {
    const double x = u(gen);
    const float xf = static_cast<float>(x);
    worst_f = std::max(worst_f, std::abs(detail::exp2(xf) - std::exp2(double(xf))) / std::exp2(double(xf)));
    worst_d = std::max(worst_d, std::abs(detail::exp2(x) - std::exp2(x)) / std::exp2(x));
  }
  EXPECT_LT(worst_f, 2.0 * std::numeric_limits<float>::epsilon());
  EXPECT_LT(worst_d, 4.0 * std::numeric_limits<double>::epsilon());
  EXPECT_EQ(detail::exp2(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(detail::exp2(-kInf), 0.0);
  EXPECT_EQ(detail::exp2(0.0), 1.0);
  EXPECT_TRUE(std::isnan(detail::exp2(std::nan(""))));
  EXPECT_TRUE(std::isinf(detail::exp2(2000.0)));
}

#if KATTN_HOST_SIMD
// The softmax's exp2 without clamps gives exp2's bits on its whole domain, x <= 0 or NaN: over
// [-130, 0] (across the lowest exponent), far below it, -0, -Inf and NaN.
template <class T>
void expect_nonpositive_matches() {
  std::mt19937_64 gen(std::random_device{}());
  std::uniform_real_distribution<double> u(-130, 0);
  const auto one = [](T x) { return detail::exp2_nonpositive<T>(detail::simd::splat<T>(x))[0]; };
  const auto same = [](T a, T b) { return std::memcmp(&a, &b, sizeof a) == 0 || (a != a && b != b); };
  std::vector<T> xs = {T(0), T(-0.0), T(-126), T(-1022), T(-1e4), T(-1e30), -std::numeric_limits<T>::infinity(),
                       std::numeric_limits<T>::quiet_NaN(), -std::numeric_limits<T>::denorm_min()};
  for (int i = 0; i < 100000; ++i) xs.push_back(static_cast<T>(u(gen)));
  for (T x : xs) ASSERT_TRUE(same(one(x), detail::exp2_scalar(x))) << x;
}

TEST(Exp2, NonPositiveFormGivesTheSameBits) {
  expect_nonpositive_matches<float>();
  expect_nonpositive_matches<double>();
}
#endif

}  // namespace
}  // namespace kattn
