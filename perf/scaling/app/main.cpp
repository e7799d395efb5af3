// kattn-scale: the scaling study of kattn's distributed attention, its own program beside the
// benchmarks (docs/distributed.md, "Scaling studies"). It runs the library's public distributed
// door and reads its public traffic model; the model of kattn's performance lives here
// (perf/scaling/model), not in the installed library.
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <exception>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "kattn/compat.hpp"
#include "kattn/errors.hpp"
#include "kokkos_args.hpp"
#include "scale_commands.hpp"
#include "threads_notice.hpp"

namespace {

const char* kUsage =
    "usage: kattn-scale <command> [options]   (kattn-scale <command> --help for its options)\n"
    "commands:\n"
    "  measure   one row of a weak or strong scaling study at the rank count of this run (under mpirun)\n"
    "  pingpong  latency and bandwidth between ranks 0 and 1 (under mpirun), for the model's links\n"
    "  model     predicted time and efficiency from one rank up to many\n"
    "  report    the CSVs of measured runs as a table and an SVG figure\n"
    "Kokkos options (--kokkos-num-threads=N, ...) are accepted by every command.\n";

const std::map<std::string, const char*> kCommandUsage = {
    {"measure",
     "usage: mpirun -np P kattn-scale measure [--study weak|strong] [--tokens N] [--dist ring|decode|ulysses|hybrid]\n"
     "                 [--ulysses-size U] [--batch B] [--heads HQ,HKV] [--dim D] [--queries NQ]\n"
     "                 [--dtype f32|f64|bf16|f16]\n"
     "                 [--causal] [--zigzag] [--deterministic] [--chunk KEYS] [--repeat R] [--warmup W]\n"
     "                 [--nocomm-baseline] [--backward] [--no-workspace] [--csv FILE] [--json]\n"
     "         weak: --tokens is per rank; strong: --tokens is the whole sequence (ring, ulysses,\n"
     "         hybrid) or KV cache (decode). Hybrid: groups of U ranks share heads (fewer ranks: one\n"
     "         group). --backward: each repetition is a forward and its backward. The calls share one\n"
     "         kattn::Workspace; --no-workspace: each allocates its own buffers (rows NAME-no-workspace).\n"
     "         Appends one row per timed repetition to --csv (and as many for the comm-removed ring\n"
     "         with --nocomm-baseline).\n"},
    {"pingpong", "usage: mpirun -np 2 kattn-scale pingpong [--both-ways] [--sizes BYTES,...] [--repeat R] [--json]\n"},
    {"model",
     "usage: kattn-scale model [--dist ring|decode|ulysses|hybrid] [--ulysses-size U] [--study weak|strong]\n"
     "                 --tokens N [--heads HQ,HKV]\n"
     "                 [--dim D] [--batch B] [--queries NQ] [--dtype f32|f64|bf16|f16] [--causal]\n"
     "                 [--sharding zigzag|contiguous]\n"
     "                 (--tflops-per-rank F | --rate-curve TOKENS:TFLOPS,... | --from-csv FILE)\n"
     "                 [--bandwidth BYTES_PER_S] [--latency S] (intra-node; from kattn-scale pingpong)\n"
     "                 [--ranks-per-node K --inter-bandwidth BYTES_PER_S --inter-latency S]\n"
     "                 [--step-overhead S] [--mem-bandwidth BYTES_PER_S] [--merge-passes X]\n"
     "                 [--backward-ratio R] [--max-ranks P] [--csv FILE] [--compare STUDY.csv]\n"
     "       kattn-scale model --anchor ring-flash-attn-fwd|ring-flash-attn-fwd-bwd|meta-cp-1m [--max-ranks P]\n"},
    {"report", "usage: kattn-scale report --csv A.csv[,B.csv...] [--table T.md] [--plot P.svg]\n"},
};

}  // namespace

int main(int argc, char* argv[]) {
  const std::string first = argc > 1 ? argv[1] : "";
  if (first == "--help" || first == "-h" || first.empty()) {
    std::cout << kUsage;
    return first.empty() ? 2 : 0;
  }
  kattn::cli::record_requested_threads(argc, argv);
  const bool help = kattn::cli::wants_kattn_help(argc, argv);  // Kokkos would take --help itself
  std::vector<char*> kargv = kattn::cli::kokkos_arguments(argc, argv);
  int kargc = static_cast<int>(kargv.size()) - 1;
  kattn::compat::initialize(kargc, kargv.data());  // consumes the --kokkos-* arguments
  const std::vector<std::string> rest(kargv.begin() + std::min(kargc, 2), kargv.begin() + kargc);
  int status = 0;
  {
    const std::map<std::string, int (*)(kattn::cli::Args&)> commands = {
        {"measure", kattn::cli::scale_measure},
        {"pingpong", kattn::cli::scale_pingpong},
        {"model", kattn::cli::scale_model},
        {"report", kattn::cli::scale_report},
    };
    const std::string command = kargc > 1 ? kargv[1] : "";
    const auto it = commands.find(command);
    if (it == commands.end()) {
      std::cerr << "kattn-scale: unknown command '" << command << "' (kattn-scale --help lists the commands)\n";
      status = 2;
    } else if (help) {
      std::cout << kCommandUsage.at(command);
    } else {
      try {
        kattn::cli::Args args(command, rest);
        status = it->second(args);
      } catch (const kattn::Error& e) {
        std::cerr << e.what() << "\n";
        status = 2;
      } catch (const std::exception& e) {
        std::cerr << "kattn-scale: " << e.what() << "\n";
        status = 1;
      }
    }
  }
  Kokkos::finalize();
  return status;
}
