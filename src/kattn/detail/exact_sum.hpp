// An exact sum of doubles (a Kulisch-style long accumulator): every finite double is an integer
// multiple of 2^-1074, held here as such an integer in limbs of 32 bits kept in int64 (each limb
// absorbs 2^31 additions before it could overflow). Integer addition is associative, so the sum
// of any set of terms is the same whatever their order, their partition into partial sums, and
// the number of threads or MPI ranks that formed them: what a reduction must be to give the same
// bits at every rank count. value() is a fixed function of the exact sum. Non-finite terms
// (NaN, +-inf) are summed apart in double, where their order does not matter either. Host only.
#pragma once

#include <cmath>
#include <cstdint>

namespace kattn {
namespace detail {

class ExactSum {
 public:
  // Limbs of 32 bits cover bits 0 .. 2176 of x * 2^1074: the largest double's top bit is 2097,
  // and a term spans at most 3 limbs.
  static constexpr int kLimbs = 68;

  void add(double x) {
    if (x == 0.0) return;
    if (!std::isfinite(x)) {
      special_ += x;
      return;
    }
    int e = 0;
    const double m = std::frexp(std::fabs(x), &e);  // |x| = m 2^e, m in [0.5, 1)
    auto mantissa = static_cast<std::uint64_t>(std::ldexp(m, 53));  // exact: 53 bits
    int bit = e - 53 + 1074;  // |x| = mantissa 2^(bit - 1074)
    if (bit < 0) {  // a subnormal: a multiple of 2^-1074, so the bits shifted out are 0
      mantissa >>= -bit;
      bit = 0;
    }
    const int limb = bit / 32, s = bit % 32;
    // mantissa << s as 96 bits: three 32-bit parts.
    const std::uint64_t lo = mantissa << s, hi = s == 0 ? 0 : mantissa >> (64 - s);
    const std::int64_t parts[3] = {std::int64_t(lo & 0xffffffffu), std::int64_t(lo >> 32), std::int64_t(hi)};
    for (int k = 0; k < 3; ++k) limbs_[limb + k] += x < 0 ? -parts[k] : parts[k];
  }
  void add(const ExactSum& other) {
    for (int k = 0; k < kLimbs; ++k) limbs_[k] += other.limbs_[k];
    special_ += other.special_;
  }

  // The sum rounded to double: its magnitude in canonical limbs (each in [0, 2^32)), added from
  // the top limb down, and its sign.
  double value() const {
    if (special_ != 0.0) return special_;  // NaN or an infinity (NaN != 0 too)
    std::int64_t l[kLimbs];
    for (int k = 0; k < kLimbs; ++k) l[k] = limbs_[k];
    carry_up(l);
    const bool negative = l[kLimbs - 1] < 0;
    if (negative) {
      for (std::int64_t& x : l) x = -x;
      carry_up(l);
    }
    double v = 0.0;
    for (int k = kLimbs - 1; k >= 0; --k)
      if (l[k] != 0) v += std::ldexp(static_cast<double>(l[k]), 32 * k - 1074);
    return negative ? -v : v;
  }

  // The state, for a reduction over MPI: kLimbs int64 limbs (summed) and the non-finite part.
  std::int64_t* limbs() { return limbs_; }
  double& special() { return special_; }

 private:
  // Carries moved up: every limb but the top one in [0, 2^32) (floor division), the same value.
  static void carry_up(std::int64_t* l) {
    for (int k = 0; k + 1 < kLimbs; ++k) {
      const std::int64_t carry = l[k] >= 0 ? l[k] >> 32 : -((-l[k] + 0xffffffff) >> 32);
      l[k] -= carry * (std::int64_t(1) << 32);
      l[k + 1] += carry;
    }
  }

  std::int64_t limbs_[kLimbs] = {};
  double special_ = 0.0;
};

}  // namespace detail
}  // namespace kattn
