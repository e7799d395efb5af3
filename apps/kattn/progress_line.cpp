#include "progress_line.hpp"

#include <unistd.h>

#include <cstdio>

namespace kattn {
namespace cli {

std::function<bool(double)> ProgressLine::callback() {
  return [this](double fraction) {
    update(fraction);
    return true;
  };
}

void ProgressLine::restart() {
  finish();
  start_ = std::chrono::steady_clock::now();
  last_ = {};
}

void ProgressLine::update(double fraction) {
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (!immediate_ && elapsed < 2.0) return;
  if (fraction < 1.0 && shown_ && std::chrono::duration<double>(now - last_).count() < 0.5) return;
  last_ = now;
  const double left = fraction > 0 ? elapsed * (1.0 - fraction) / fraction : 0.0;
  const double gflops = elapsed > 0 ? fraction * flops_ / elapsed / 1e9 : 0.0;
  std::fprintf(stderr, "\r%s: %5.1f%%, %.2f GFLOP/s, %.0f s elapsed, %.0f s left   ", what_.c_str(), 100.0 * fraction,
               gflops, elapsed, left);
  std::fflush(stderr);
  shown_ = true;
}

void ProgressLine::finish() {
  if (!shown_) return;
  std::fprintf(stderr, "\n");
  shown_ = false;
}

bool progress_wanted(bool forced, bool quiet, double flops) {
  if (forced) return true;
  return !quiet && flops > 1e10 && ::isatty(STDERR_FILENO) == 1;
}

}  // namespace cli
}  // namespace kattn
