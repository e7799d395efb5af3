// kattn: the command-line program (see README.md and the contract in CLI.md).
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "commands.hpp"
#include "kokkos_args.hpp"
#include "threads_notice.hpp"
#include "kattn/compat.hpp"
#include "kattn/errors.hpp"

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
  const std::string first = argc > 1 ? argv[1] : "";
  if (first == "--help" || first == "-h" || first.empty()) {
    std::cout << kUsage;
    return first.empty() ? 2 : 0;
  }
  kattn::cli::record_requested_threads(argc, argv);
  const bool help = kattn::cli::wants_kattn_help(argc, argv);
  std::vector<char*> kargv = kattn::cli::kokkos_arguments(argc, argv);
  int kargc = static_cast<int>(kargv.size()) - 1;
  kattn::compat::initialize(kargc, kargv.data());  // consumes the --kokkos-* arguments
  if (kattn::cli::wants_kokkos_help(argc, argv)) {  // Kokkos printed its help
    Kokkos::finalize();
    return 0;
  }
  std::vector<std::string> rest(kargv.begin() + std::min(kargc, 2), kargv.begin() + kargc);
  if (help) rest.push_back("--help");
  int status = 0;
  {
    const std::map<std::string, int (*)(kattn::cli::Args&)> commands = {
        {"run", kattn::cli::cmd_run},
        {"grad", kattn::cli::cmd_grad},
        {"io", kattn::cli::cmd_io},
        {"version", kattn::cli::cmd_version},
        {"plan", kattn::cli::cmd_plan},
    };
    std::string command = kargc > 1 ? kargv[1] : "";
    if (command == "--version") command = "version";
    auto it = commands.find(command);
    if (it == commands.end()) {
      std::cerr << "kattn: unknown command '" << command << "' (kattn --help lists the commands)\n";
      status = 2;
    } else {
      try {
        kattn::cli::Args args(command, rest);
        status = it->second(args);
      } catch (const kattn::Error& e) {
        std::cerr << e.what() << "\n";
        status = 2;
      } catch (const std::exception& e) {
        std::cerr << "kattn: " << e.what() << "\n";
        status = 1;
      }
    }
  }
  Kokkos::finalize();
  return status;
}
