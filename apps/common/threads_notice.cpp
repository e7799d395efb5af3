#include "threads_notice.hpp"

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <type_traits>


namespace kattn {
namespace cli {
namespace {

int requested = 0;

int to_threads(const char* text) {
  char* end = nullptr;
  const long v = std::strtol(text, &end, 10);
  return end != text && *end == '\0' && v > 0 && v < (1 << 20) ? static_cast<int>(v) : 0;
}

bool serial_only() {
#ifdef KOKKOS_ENABLE_SERIAL
  return std::is_same<Kokkos::DefaultHostExecutionSpace, Kokkos::Serial>::value;
#else
  return false;
#endif
}

const char* kWhatToDo =
    "for more cores, run MPI ranks on this machine (mpiexec -n 2 kattn run --dist ring ...) or build "
    "with a Kokkos that has OpenMP (spack install kattn +openmp)";

}  // namespace

int host_threads() { return Kokkos::DefaultHostExecutionSpace().concurrency(); }

void record_requested_threads(int argc, char* argv[]) {
  if (const char* env = std::getenv("OMP_NUM_THREADS")) requested = to_threads(env);
  for (int i = 1; i < argc; ++i)
    for (const std::string flag : {"--kokkos-num-threads=", "--kokkos-threads="}) {
      const std::string arg = argv[i];
      if (arg.rfind(flag, 0) == 0) requested = to_threads(arg.c_str() + flag.size());
    }
}

std::string threads_notice() {
  const int threads = host_threads();
  const unsigned cores = std::thread::hardware_concurrency();
  if (serial_only() && (cores > 1 || requested > 1))
    return "kattn: this Kokkos has only the Serial backend, so kattn runs on one core" +
           (cores > 1 ? " of " + std::to_string(cores) : std::string()) +
           (requested > 1 ? " (" + std::to_string(requested) + " threads asked for)" : std::string()) + "; " +
           kWhatToDo;
  if (requested > threads)
    return "kattn: Kokkos runs " + std::to_string(threads) + " host threads, " + std::to_string(requested) +
           " asked for; " + kWhatToDo;
  return "";
}

void print_threads_notice_once() {
  static bool printed = false;
  const std::string notice = threads_notice();
  if (printed || notice.empty()) return;
  printed = true;
  std::fprintf(stderr, "%s\n", notice.c_str());
}

}  // namespace cli
}  // namespace kattn
