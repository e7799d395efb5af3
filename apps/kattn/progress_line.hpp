// The progress line of a long run on standard error: percent done, rate, time left, rewritten in
// place about twice a second; shown past the first two seconds (at once with --progress).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <utility>

namespace kattn {
namespace cli {

class ProgressLine {
 public:
  // `flops`: the work of the whole call, for the rate; `immediate`: show from the start; `what`:
  // the line's first word(s), what is under way.
  ProgressLine(double flops, bool immediate, std::string what = "progress")
      : flops_(flops), immediate_(immediate), what_(std::move(what)) {}
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;
  ~ProgressLine() { finish(); }

  // A callback for Options::progress (it always continues).
  std::function<bool(double)> callback();
  // Ends the line (a newline) if one was shown; called again, does nothing.
  void finish();
  // Starts timing anew (for each repetition of --repeat).
  void restart();

 private:
  void update(double fraction);

  double flops_;
  bool immediate_;
  std::string what_;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_{};
};

// Whether to show progress: --progress forces it, --quiet turns it off, else when standard
// error is a terminal and the call does more than 1e10 flops (about a second on one core; short
// calls keep their single launch).
bool progress_wanted(bool forced, bool quiet, double flops);

}  // namespace cli
}  // namespace kattn
