#include "kokkos_args.hpp"

#include <Kokkos_Core.hpp>
#include <deque>

namespace kattn {
namespace cli {

std::vector<char*> kokkos_arguments(int argc, char* argv[]) {
  static std::deque<std::string> renamed;  // owns the renamed arguments until exit
  std::vector<char*> out;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (i > 0 && (a == "--help" || a == "-h")) continue;  // kattn's, not Kokkos'
#if KOKKOS_VERSION >= 30700
    // Kokkos 3's spelling for Kokkos 4 and later (compat::initialize renames the other way).
    const std::string old_flag = "--kokkos-threads";
    if (a == old_flag || a.rfind(old_flag + "=", 0) == 0) {
      renamed.push_back("--kokkos-num-threads" + a.substr(old_flag.size()));
      out.push_back(&renamed.back()[0]);
      continue;
    }
#endif
    out.push_back(argv[i]);
  }
  out.push_back(nullptr);
  return out;
}

bool wants_kokkos_help(int argc, char* argv[]) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--kokkos-help") return true;
  return false;
}

bool wants_kattn_help(int argc, char* argv[]) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") return true;
  }
  return false;
}

}  // namespace cli
}  // namespace kattn
