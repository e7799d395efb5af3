// kattn version (also `kattn --version`): kattn's version, the Kokkos it was built with, the
// enabled backends and options, and what this run gets (execution space, thread count).
#include <Kokkos_Core.hpp>
#include <iostream>
#include <string>

#include "args.hpp"
#include "commands.hpp"
#include "json.hpp"
#include "kattn/config.hpp"
#include "kattn/version.hpp"
#include "threads_notice.hpp"

namespace kattn {
namespace cli {

int cmd_version(Args& args) {
  if (args.help("usage: kattn version [--json]   (or kattn --version)\n")) return 0;
  const bool json = args.flag("--json");
  args.finish();
  const BuildInfo info = build_info();
  const std::string space = Kokkos::DefaultExecutionSpace::name();
  const int concurrency = Kokkos::DefaultExecutionSpace().concurrency();
  // What is compiled is not what runs: the CUDA kernels (kernels/cuda) are built with CUDA=on, but
  // kattn's commands run the Kokkos kernels on the execution space above.
  std::ostream& text = json ? std::cerr : std::cout;
  text << version_text() << "execution space: " << space << " (concurrency " << concurrency << ")\n"
       << "host threads: " << host_threads() << "\n"
       << "CUDA kernels compiled: " << (KATTN_ENABLE_CUDA ? "yes" : "no")
       << "; used by the kattn commands: no (they run the Kokkos kernels on " << space << ")\n";
  if (!json) print_threads_notice_once();
  if (json) {
    Json j;
    j.add("version", info.version)
        .add("kokkos", info.kokkos_version)
        .add("kokkos_kernels", info.kokkos_kernels_version);
    j.add("backends", info.backends).add("options", info.options).add("compiler", info.compiler);
    j.add("build", info.build).add("execution_space", space).add("concurrency", concurrency);
    j.add("threads", host_threads()).add("cuda_kernels_compiled", bool(KATTN_ENABLE_CUDA)).add("cuda_kernels_used", false);
    const std::string notice = threads_notice();
    if (!notice.empty()) j.add("notice", notice.substr(7));
    std::cout << j.str() << "\n";
  }
  return 0;
}

}  // namespace cli
}  // namespace kattn
