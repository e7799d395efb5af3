// --repeat N: one warm-up call, then N timed calls; their median and spread. The calls share one
// kattn::Workspace, as a loop of calls would (--no-workspace: each allocates its own scratch).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "args.hpp"
#include "kattn/options.hpp"
#include "kattn/workspace.hpp"

namespace kattn {
namespace cli {

struct Timing {
  int repeat = 0;               // 0: one call, no warm-up
  bool workspace = true;        // repeated calls share a kattn::Workspace
  std::vector<double> seconds;  // of each timed call

  double median() const {
    if (seconds.empty()) return 0;
    std::vector<double> s = seconds;
    std::sort(s.begin(), s.end());
    const std::size_t n = s.size();
    return n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
  }
  double min() const { return seconds.empty() ? 0 : *std::min_element(seconds.begin(), seconds.end()); }
  double max() const { return seconds.empty() ? 0 : *std::max_element(seconds.begin(), seconds.end()); }
  // Calls: a warm-up and `repeat` timed ones, or one timed call.
  int calls() const { return repeat > 0 ? repeat + 1 : 1; }
  bool timed(int call) const { return repeat == 0 || call > 0; }
};

inline Timing read_timing(Args& args) {
  Timing t;
  t.repeat = static_cast<int>(args.integer("--repeat", 1, 100000).value_or(0));
  t.workspace = !args.flag("--no-workspace");
  return t;
}

// The workspace repeated calls share: opt takes it while this lives (when `t` repeats, unless
// --no-workspace), so the warm-up call allocates the scratch the timed calls reuse.
class RepeatWorkspace {
 public:
  RepeatWorkspace(const Timing& t, Options& opt) : opt_(opt) {
    if (t.repeat > 0 && t.workspace) opt_.workspace = &ws_;
  }
  ~RepeatWorkspace() { opt_.workspace = nullptr; }
  RepeatWorkspace(const RepeatWorkspace&) = delete;
  RepeatWorkspace& operator=(const RepeatWorkspace&) = delete;

 private:
  Workspace ws_;
  Options& opt_;
};

// Runs `call` (which fences) as `t` says, recording the timed calls; `before` runs before each.
template <class Call, class Before>
void time_calls(Timing& t, Call&& call, Before&& before) {
  for (int c = 0; c < t.calls(); ++c) {
    before();
    const auto t0 = std::chrono::steady_clock::now();
    call();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (t.timed(c)) t.seconds.push_back(s);
  }
}

}  // namespace cli
}  // namespace kattn
