// The whole [B, N, H, D] array (or [B, H, N] lse) on every rank from each rank's rows under a
// SequenceLayout, as doubles: what the float64 accuracy rules and the bit comparisons read. The
// sum over ranks starts every value at -0, the one identity of IEEE addition, so a -0 (a 16-bit
// gradient too small for the type) keeps its sign (each position has one owner, so a poisoned
// NaN shows through).
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <vector>

#include "dist_support.hpp"
#include "kattn/core/storage.hpp"
#include "kattn/distributed/layout.hpp"

namespace kattn {
namespace test {

template <class View>
std::vector<double> gathered_rows(const View& local, const dist::SequenceLayout& layout,
                                  std::vector<std::size_t> global_extents, MPI_Comm comm = MPI_COMM_WORLD) {
  const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), local);
  std::size_t total = 1;
  for (std::size_t e : global_extents) total *= e;
  std::vector<double> mine(total, -0.0), all(total);
  for (const dist::Segment& s : layout.segments_of(rank_of(comm)))
    for (std::size_t b = 0; b < h.extent(0); ++b)
      for (std::int64_t j = 0; j < s.length; ++j) {
        if constexpr (View::rank == 4) {
          for (std::size_t x = 0; x < h.extent(2); ++x)
            for (std::size_t d = 0; d < h.extent(3); ++d)
              mine[((b * global_extents[1] + s.global + j) * h.extent(2) + x) * h.extent(3) + d] =
                  widen(h(b, s.local + j, x, d));
        } else {
          for (std::size_t x = 0; x < h.extent(1); ++x)
            mine[(b * global_extents[1] + x) * global_extents[2] + s.global + j] = widen(h(b, x, s.local + j));
        }
      }
  MPI_Allreduce(mine.data(), all.data(), static_cast<int>(total), MPI_DOUBLE, MPI_SUM, comm);
  return all;
}

}  // namespace test
}  // namespace kattn
