#include "program.hpp"

#include <Kokkos_Core.hpp>

#include <algorithm>
#include <exception>
#include <iostream>
#include <vector>

#include "kattn/compat.hpp"
#include "kattn/errors.hpp"
#include "kokkos_args.hpp"
#include "threads_notice.hpp"

namespace kattn {
namespace cli {

int run_program(const char* name, const char* usage, const std::map<std::string, Command>& commands, int argc,
                char* argv[]) {
  const std::string first = argc > 1 ? argv[1] : "";
  if (first == "--help" || first == "-h" || first.empty()) {
    std::cout << usage;
    return first.empty() ? 2 : 0;
  }
  record_requested_threads(argc, argv);
  const bool help = wants_kattn_help(argc, argv);
  std::vector<char*> kargv = kokkos_arguments(argc, argv);
  int kargc = static_cast<int>(kargv.size()) - 1;
  compat::initialize(kargc, kargv.data());  // consumes the --kokkos-* arguments
  if (wants_kokkos_help(argc, argv)) {      // Kokkos printed its help
    Kokkos::finalize();
    return 0;
  }
  std::vector<std::string> rest(kargv.begin() + std::min(kargc, 2), kargv.begin() + kargc);
  if (help) rest.push_back("--help");
  int status = 0;
  std::string command = kargc > 1 ? kargv[1] : "";
  if (command == "--version" && commands.count("version")) command = "version";
  const auto it = commands.find(command);
  if (it == commands.end()) {
    std::cerr << name << ": unknown command '" << command << "' (" << name << " --help lists the commands)\n";
    status = 2;
  } else {
    try {
      Args args(command, rest);
      status = it->second(args);
    } catch (const Error& e) {
      std::cerr << e.what() << "\n";
      status = 2;
    } catch (const std::exception& e) {
      std::cerr << name << ": " << e.what() << "\n";
      status = 1;
    }
  }
  Kokkos::finalize();
  return status;
}

}  // namespace cli
}  // namespace kattn
