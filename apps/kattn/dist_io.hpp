// Rank 0's global arrays to every rank's shard and back, for the distributed commands. Arrays are
// [outer, N, inner] in C order with the sequence in the middle: [B, N, H, D] is outer = B,
// inner = H * D; lse [B, H, N] is outer = B * H, inner = 1.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "kattn/dist/layout.hpp"

namespace kattn {
namespace cli {

// Every rank gets its positions of rank 0's `global` (ignored elsewhere).
std::vector<double> scatter_positions(MPI_Comm comm, const std::vector<double>& global, std::int64_t outer,
                                      std::int64_t inner, const dist::SequenceLayout& layout);

// Rank 0 gets the global array assembled from every rank's `local` (others get an empty vector).
std::vector<double> gather_positions(MPI_Comm comm, const std::vector<double>& local, std::int64_t outer,
                                     std::int64_t inner, const dist::SequenceLayout& layout);

}  // namespace cli
}  // namespace kattn
