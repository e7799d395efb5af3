// Built without MPI: the distributed commands say how to get them.
#include "dist_commands.hpp"
#include "kattn/errors.hpp"

namespace kattn {
namespace cli {

int run_distributed(Args&, const std::string&) {
  KATTN_REQUIRE(false, "--dist: this kattn was built without MPI (configure with -DKATTN_ENABLE_MPI=ON)");
  return 2;
}

int grad_distributed(Args& args, const std::string& mode) { return run_distributed(args, mode); }

}  // namespace cli
}  // namespace kattn
