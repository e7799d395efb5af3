// The main of a program of subcommands (kattn, kattn-scale): help, Kokkos' arguments and its
// lifetime, the dispatch, and every error as one line on standard error with the exit status
// (2: bad input, a kattn::Error; 1: anything else).
#pragma once

#include <map>
#include <string>

#include "args.hpp"

namespace kattn {
namespace cli {

using Command = int (*)(Args&);

// Runs the command argv[1] names (`name --version` runs "version" where there is one); a command
// prints its own options when its Args hold --help. `usage` is printed for `name --help`.
int run_program(const char* name, const char* usage, const std::map<std::string, Command>& commands, int argc,
                char* argv[]);

}  // namespace cli
}  // namespace kattn
