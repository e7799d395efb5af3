// Built without MPI: the subcommands that run ranks say how to get them.
#include "kattn/errors.hpp"
#include "scale_commands.hpp"

namespace kattn {
namespace cli {

int scale_measure(Args&) {
  KATTN_REQUIRE(false, "measure: needs MPI (configure with -DKATTN_ENABLE_MPI=ON); model and report work without it");
  return 2;
}

int scale_pingpong(Args&) {
  KATTN_REQUIRE(false, "pingpong: needs MPI (configure with -DKATTN_ENABLE_MPI=ON)");
  return 2;
}

}  // namespace cli
}  // namespace kattn
