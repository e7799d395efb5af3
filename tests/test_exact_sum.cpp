// The exact accumulator of the sinks' gradient (detail/exact_sum.hpp): sums that double addition
// gets wrong, any order and any partition into partial sums giving the same bits, subnormals,
// the extremes of the range, and non-finite terms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kattn/detail/exact_sum.hpp"

namespace kattn {
namespace test {
namespace {

using detail::ExactSum;

double exact_sum(const std::vector<double>& xs) {
  ExactSum s;
  for (double x : xs) s.add(x);
  return s.value();
}

TEST(ExactSum, CancellationThatDoubleAdditionLoses) {
  EXPECT_EQ(exact_sum({1e300, 1.0, -1e300}), 1.0);
  EXPECT_EQ(exact_sum({1.0, 1e-30, -1.0}), 1e-30);
  // 0.1 + 0.2 - 0.3 in double is 5.55e-17; the exact sum of the three doubles is 2^-54 + 2^-56 ... ,
  // which is (0.1 + 0.2) - 0.3 computed without the rounding of 0.1 + 0.2.
  EXPECT_EQ(exact_sum({0.1, 0.2, -0.3}), double((long double)0.1 + (long double)0.2 - (long double)0.3));
  EXPECT_EQ(exact_sum({}), 0.0);
  EXPECT_EQ(exact_sum({-2.5}), -2.5);
  EXPECT_EQ(exact_sum({3.0, -3.0}), 0.0);
}

TEST(ExactSum, TheRangesEnds) {
  const double tiny = std::numeric_limits<double>::denorm_min(), big = std::numeric_limits<double>::max();
  EXPECT_EQ(exact_sum({tiny, tiny, tiny}), 3 * tiny);
  EXPECT_EQ(exact_sum({big, -big, tiny}), tiny);
  EXPECT_EQ(exact_sum({big / 2, big / 4}), big / 2 + big / 4);
  EXPECT_EQ(exact_sum({big, big}), std::numeric_limits<double>::infinity());
}

TEST(ExactSum, AnyOrderAndPartitionGivesTheSameBits) {
  std::mt19937_64 gen(7);
  std::normal_distribution<double> n(0.0, 1.0);
  std::uniform_int_distribution<int> e(-60, 60);
  std::vector<double> xs(5000);
  for (double& x : xs) x = std::ldexp(n(gen), e(gen));
  const double first = exact_sum(xs);
  long double reference = 0;  // a check of the value, not of the bits
  for (double x : xs) reference += x;
  EXPECT_NEAR(first, double(reference), 1e-12 * std::abs(double(reference)) + 1e-300);
  for (int trial = 0; trial < 5; ++trial) {
    std::shuffle(xs.begin(), xs.end(), gen);
    EXPECT_EQ(exact_sum(xs), first);
    // Partial sums over pieces, then added: what ranks do.
    ExactSum total;
    const std::size_t cut = gen() % xs.size();
    ExactSum a, b;
    for (std::size_t i = 0; i < xs.size(); ++i) (i < cut ? a : b).add(xs[i]);
    total.add(b);
    total.add(a);
    EXPECT_EQ(total.value(), first);
  }
}

TEST(ExactSum, NonFiniteTermsPropagate) {
  const double inf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(exact_sum({1.0, inf, 2.0}), inf);
  EXPECT_EQ(exact_sum({-inf, 1.0}), -inf);
  EXPECT_TRUE(std::isnan(exact_sum({inf, -inf})));
  EXPECT_TRUE(std::isnan(exact_sum({1.0, std::nan("")})));
}

}  // namespace
}  // namespace test
}  // namespace kattn
