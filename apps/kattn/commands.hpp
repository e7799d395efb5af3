// The subcommands of the `kattn` program; each returns the exit status.
#pragma once

#include "args.hpp"
#include "threads_notice.hpp"

namespace kattn {
namespace cli {

int cmd_run(Args& args);
int cmd_grad(Args& args);
int cmd_io(Args& args);
int cmd_version(Args& args);
int cmd_plan(Args& args);

}  // namespace cli
}  // namespace kattn
