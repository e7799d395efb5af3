// The subcommands of the `kattn` program; each returns the exit status.
#pragma once

#include "args.hpp"

namespace kattn {
namespace cli {

int cmd_run(Args& args);
int cmd_io(Args& args);

}  // namespace cli
}  // namespace kattn
