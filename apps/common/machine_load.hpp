// How busy the machine was when a measurement started: timings taken on shared cores are read
// against it (the CSV and JSON of `kattn scale` record it).
#pragma once

#include <fstream>

namespace kattn {
namespace cli {

// The one-minute load average (/proc/loadavg); -1 where the system does not give it.
inline double load_average() {
  std::ifstream f("/proc/loadavg");
  double one = -1;
  if (!(f >> one)) return -1;
  return one;
}

}  // namespace cli
}  // namespace kattn
