// The steps of an MPI program that every rank takes together: rank 0's own phase (its failure
// ends every rank with its message) and the peak memory of the ranks.
#pragma once

#include <mpi.h>

#include <functional>

namespace kattn {
namespace cli {

// The part of a command that rank 0 runs alone after the collective work (report, outputs, the
// check against the reference): every rank calls it and waits for it, so that a failure there (a
// file that cannot be written, a reference that does not fit) ends every rank with rank 0's
// message instead of leaving them waiting; returns rank 0's exit status on every rank.
int on_rank0(MPI_Comm comm, const std::function<int()>& body);

// The largest peak resident set size (bytes) of the ranks, on every rank.
long long peak_rss_max(MPI_Comm comm);

}  // namespace cli
}  // namespace kattn
