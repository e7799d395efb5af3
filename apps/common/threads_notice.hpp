// The one notice a user of a default install needs: Kokkos runs fewer host threads than asked, or
// only its Serial backend on a machine with several cores, and what to do instead.
#pragma once

#include <string>

namespace kattn {
namespace cli {

// Threads of the host execution space, as set by --kokkos-num-threads or OMP_NUM_THREADS.
int host_threads();

// Records the thread count asked for (--kokkos-num-threads=N, --kokkos-threads=N or
// OMP_NUM_THREADS), before Kokkos is initialised; 0 when none.
void record_requested_threads(int argc, char* argv[]);

// The notice, or "" when Kokkos runs as many threads as asked (or the machine has one core).
std::string threads_notice();

// Prints the notice once on standard error (kattn: ...), unless it is empty.
void print_threads_notice_once();

}  // namespace cli
}  // namespace kattn
