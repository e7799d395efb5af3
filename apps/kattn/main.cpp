// kattn: the command-line program (see README.md and the contract in CLI.md).
#include "commands.hpp"
#include "program.hpp"

namespace {

const char* kUsage =
    "usage: kattn <command> [options]   (kattn <command> --help for its options)\n"
    "commands:\n"
    "  run      attention on .npy inputs or random ones (--algo naive|flash|splitkv), dense, ragged or paged\n"
    "  grad     gradients dq, dk, dv of attention by the recomputing backward pass\n"
    "  plan     how split-KV attention would cut the keys of a problem (splits, chunk, work units)\n"
    "  io       the HBM-traffic model of standard vs tiled attention\n"
    "  version  kattn's version, Kokkos version, backends and options (also --version)\n"
    "Kokkos options (--kokkos-num-threads=N, ...) are accepted by every command; kattn --kokkos-help lists them.\n"
    "Scaling studies are the program kattn-scale (measure, pingpong, model, report).\n";

}  // namespace

int main(int argc, char* argv[]) {
  return kattn::cli::run_program("kattn", kUsage,
                                 {{"run", kattn::cli::cmd_run},
                                  {"grad", kattn::cli::cmd_grad},
                                  {"io", kattn::cli::cmd_io},
                                  {"version", kattn::cli::cmd_version},
                                  {"plan", kattn::cli::cmd_plan}},
                                 argc, argv);
}
