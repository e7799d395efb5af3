// The subcommands of the `kattn` program; each returns the exit status.
#pragma once

#include "args.hpp"

namespace kattn {
namespace cli {

int cmd_run(Args& args);
int cmd_grad(Args& args);
int cmd_io(Args& args);
int cmd_version(Args& args);
int cmd_scale(Args& args);
int cmd_plan(Args& args);

// Threads of the host execution space, as set by --kokkos-num-threads or OMP_NUM_THREADS.
int host_threads();

}  // namespace cli
}  // namespace kattn
