// Measured inputs of the scaling model (scaling_model.hpp): the kernel's rate as a function of
// the tokens per rank, interpolated between the sizes it was measured at, and a link's latency
// and bandwidth fitted to ping-pong times. Plain arithmetic, no MPI: `kattn-scale` measures, this
// turns the measurements into model inputs.
#pragma once

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "kattn/errors.hpp"

namespace kattn {
namespace scaling {

// One measurement of the local attention kernel: FLOP/s per rank at a shard of this many tokens.
struct RatePoint {
  double tokens_per_rank = 0;
  double flops_per_second = 0;
};

// The kernel's rate against the shard size. Small shards run below peak (launches, partial tiles,
// short loops), so one number measured at one size misstates the others. Between measured sizes
// the rate is interpolated linearly in log(tokens); outside them it is held at the nearest end
// (an extrapolation the caller should state).
class KernelRate {
 public:
  KernelRate() = default;
  // The same rate at every size (a peak given by hand).
  explicit KernelRate(double flops_per_second) : points_{{1.0, flops_per_second}} {
    KATTN_REQUIRE(flops_per_second > 0, "kernel rate: expected a positive FLOP/s, got ", flops_per_second);
  }
  // Points in any order; a size measured twice keeps the mean of its rates.
  explicit KernelRate(std::vector<RatePoint> points) {
    std::sort(points.begin(), points.end(),
              [](const RatePoint& a, const RatePoint& b) { return a.tokens_per_rank < b.tokens_per_rank; });
    for (std::size_t i = 0; i < points.size();) {
      std::size_t j = i;
      double sum = 0;
      for (; j < points.size() && points[j].tokens_per_rank == points[i].tokens_per_rank; ++j) {
        KATTN_REQUIRE(points[j].tokens_per_rank > 0 && points[j].flops_per_second > 0,
                      "kernel rate: expected positive sizes and rates, got ", points[j].flops_per_second, " FLOP/s at ",
                      points[j].tokens_per_rank, " tokens per rank");
        sum += points[j].flops_per_second;
      }
      points_.push_back({points[i].tokens_per_rank, sum / double(j - i)});
      i = j;
    }
    KATTN_REQUIRE(!points_.empty(), "kernel rate: expected at least one measured size");
  }

  bool empty() const { return points_.empty(); }
  const std::vector<RatePoint>& points() const { return points_; }
  bool measured_at_one_size() const { return points_.size() == 1; }
  // Outside the measured sizes (the rate there is the nearest end's).
  bool extrapolates(double tokens_per_rank) const {
    return points_.size() > 1 &&
           (tokens_per_rank < points_.front().tokens_per_rank || tokens_per_rank > points_.back().tokens_per_rank);
  }

  double at(double tokens_per_rank) const {
    if (points_.empty()) throw std::logic_error("kernel rate: no measurement");
    if (tokens_per_rank <= points_.front().tokens_per_rank) return points_.front().flops_per_second;
    if (tokens_per_rank >= points_.back().tokens_per_rank) return points_.back().flops_per_second;
    std::size_t i = 1;
    while (points_[i].tokens_per_rank < tokens_per_rank) ++i;
    const RatePoint &a = points_[i - 1], &b = points_[i];
    const double t = std::log(tokens_per_rank / a.tokens_per_rank) / std::log(b.tokens_per_rank / a.tokens_per_rank);
    return a.flops_per_second + t * (b.flops_per_second - a.flops_per_second);
  }

 private:
  std::vector<RatePoint> points_;
};

// A link: one message of b bytes takes latency + b / bandwidth, one way.
struct Link {
  double bytes_per_second = 0;
  double latency_seconds = 0;
  double seconds(double bytes) const { return latency_seconds + bytes / bytes_per_second; }
};

// One ping-pong size: the one-way time of a message (half the round trip).
struct LinkSample {
  double bytes = 0;
  double seconds = 0;
};

// The line seconds = latency + bytes / bandwidth through ping-pong samples of at least two sizes,
// fitted by least squares on the relative error (weights 1 / seconds^2): the sizes span decades,
// and a plain fit would let the largest message alone decide. A negative intercept (noise at small
// sizes) is clamped to zero.
inline Link fit_link(const std::vector<LinkSample>& samples) {
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const LinkSample& s : samples) {
    const double w = 1.0 / (s.seconds * s.seconds);
    sw += w, sx += w * s.bytes, sy += w * s.seconds, sxx += w * s.bytes * s.bytes, sxy += w * s.bytes * s.seconds;
  }
  const double det = sw * sxx - sx * sx;
  KATTN_REQUIRE(samples.size() >= 2 && det > 0, "link fit: expected ping-pong times at two sizes or more");
  const double slope = (sw * sxy - sx * sy) / det;
  KATTN_REQUIRE(slope > 0, "link fit: the one-way time does not grow with the message size (too noisy: more --repeat)");
  Link l;
  l.bytes_per_second = 1.0 / slope;
  l.latency_seconds = std::max(0.0, (sy - slope * sx) / sw);
  return l;
}

}  // namespace scaling
}  // namespace kattn
