#include "collective_steps.hpp"

#include <sys/resource.h>

#include "kattn/distributed/collective.hpp"

namespace kattn {
namespace cli {

int on_rank0(MPI_Comm comm, const std::function<int()>& body) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  int status = 0;
  dist::collective_check(comm, [&] {
    if (rank == 0) status = body();
  });
  MPI_Bcast(&status, 1, MPI_INT, 0, comm);
  return status;
}

long long peak_rss_max(MPI_Comm comm) {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  long long bytes = static_cast<long long>(u.ru_maxrss) * 1024;  // Linux: kilobytes
  MPI_Allreduce(MPI_IN_PLACE, &bytes, 1, MPI_LONG_LONG, MPI_MAX, comm);
  return bytes;
}

}  // namespace cli
}  // namespace kattn
