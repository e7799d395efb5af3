// The MPI layer's clocks for its statistics: wall seconds and this process's CPU seconds.
#pragma once

#include <chrono>
#include <ctime>

namespace kattn {
namespace dist {
namespace detail {

inline double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double cpu_now() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

}  // namespace detail
}  // namespace dist
}  // namespace kattn
