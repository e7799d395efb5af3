// The distributed parts of the `kattn` program (built with KATTN_ENABLE_MPI; without it they
// refuse with a message saying how to build them).
#pragma once

#include <string>

#include "args.hpp"

namespace kattn {
namespace cli {

// kattn run --dist ring|ulysses|hybrid|decode ...: every rank reads (or draws) its own positions and
// writes its own rows of the outputs; every rank exits with the same status, rank 0 prints.
int run_distributed(Args& args, const std::string& mode);

// kattn grad --dist ring|ulysses|hybrid ...: the forward and backward; each rank reads and writes its own part.
int grad_distributed(Args& args, const std::string& mode);

}  // namespace cli
}  // namespace kattn
