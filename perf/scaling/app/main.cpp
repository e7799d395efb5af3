// kattn-scale: the scaling study of kattn's distributed attention, its own program beside the
// benchmarks (docs/distributed.md, "Scaling studies"). It runs the library's public distributed
// door and reads its public traffic model; the model of kattn's performance lives here
// (perf/scaling/model), not in the installed library.
#include "program.hpp"
#include "scale_commands.hpp"

namespace {

const char* kUsage =
    "usage: kattn-scale <command> [options]   (kattn-scale <command> --help for its options)\n"
    "commands:\n"
    "  measure   one row of a weak or strong scaling study at the rank count of this run (under mpirun)\n"
    "  pingpong  latency and bandwidth between ranks 0 and 1 (under mpirun), for the model's links\n"
    "  model     predicted time and efficiency from one rank up to many\n"
    "  report    the CSVs of measured runs as a table and an SVG figure\n"
    "Kokkos options (--kokkos-num-threads=N, ...) are accepted by every command.\n";

}  // namespace

int main(int argc, char* argv[]) {
  return kattn::cli::run_program("kattn-scale", kUsage,
                                 {{"measure", kattn::cli::scale_measure},
                                  {"pingpong", kattn::cli::scale_pingpong},
                                  {"model", kattn::cli::scale_model},
                                  {"report", kattn::cli::scale_report}},
                                 argc, argv);
}
