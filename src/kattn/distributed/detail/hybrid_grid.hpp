// The 2-D process grid of hybrid attention (USP): P = U x R ranks, rank g U + u being member u of
// ring group g. Positions: the ring's layout over the R groups, each group's share cut
// contiguously over its U members. The members of a group share heads by all-to-all (Ulysses);
// the ranks with the same member index form a ring over the groups.
#pragma once

#include <mpi.h>

#include <cstdint>

#include "kattn/distributed/detail/agreement.hpp"
#include "kattn/distributed/options.hpp"
#include "kattn/distributed/detail/inner_stats.hpp"
#include "kattn/distributed/layout.hpp"
#include "kattn/errors.hpp"

namespace kattn {
namespace dist {
namespace detail {

// The same kattn::Error on every rank (P and the options are agreed before) when U does not divide
// P or the query heads do not divide over U.
inline void require_grid(int ranks, int heads_q, const DistOptions& d) {
  const int U = ulysses_ranks(ranks, d);
  KATTN_REQUIRE(U <= ranks && ranks % U == 0, "ulysses_size: expected a divisor of the ", ranks, " ranks, got ", U);
  KATTN_REQUIRE(heads_q % U == 0, "q: expected a number of heads that is a multiple of the ", U,
                " ranks sharing them (head sharding), got ", heads_q);
}

// Local lengths of every rank checked against hybrid_layout, alike on every rank.
inline GlobalSplit hybrid_split(MPI_Comm comm, std::int64_t q_len, std::int64_t kv_len, const DistOptions& d) {
  return global_split(comm, q_len, kv_len, [&](std::int64_t N, int P) { return hybrid_layout(N, P, d); });
}

// The positions of this rank's group (rank / U of the P / U groups) as the ring over the groups
// holds them: the ring's layout over the groups (HybridGrid::ring_layout), its local length.
inline std::int64_t group_length(std::int64_t length, int rank, int ranks, const DistOptions& d) {
  const int U = ulysses_ranks(ranks, d);
  return sharded_layout(length, ranks / U, d).local_length(rank / U);
}

// This rank's two sub-communicators of the grid, freed on destruction (collective, like their
// creation: every rank makes and frees them in the same calls), and the ring's layouts over the
// groups. Made after require_grid.
class HybridGrid {
 public:
  HybridGrid(MPI_Comm comm, const DistOptions& d) : sharding_(d.sharding), align_(shard_align(d)) {
    int rank = 0, P = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &P);
    U_ = ulysses_ranks(P, d);
    R_ = P / U_;
    group_ = rank / U_, member_ = rank % U_;
    MPI_Comm_split(comm, group_, member_, &heads_);
    MPI_Comm_split(comm, member_, group_, &ring_);
  }
  ~HybridGrid() {
    MPI_Comm_free(&heads_);
    MPI_Comm_free(&ring_);
  }
  HybridGrid(const HybridGrid&) = delete;
  HybridGrid& operator=(const HybridGrid&) = delete;

  MPI_Comm heads() const { return heads_; }  // the U members of this rank's group
  MPI_Comm ring() const { return ring_; }    // the R ranks with this rank's member index
  int group() const { return group_; }
  int groups() const { return R_; }
  int members() const { return U_; }

  // The ring's layout of `length` positions over the groups, as hybrid_layout places them.
  SequenceLayout ring_layout(std::int64_t length) const { return SequenceLayout(length, R_, sharding_, align_); }
  // This rank's group's whole share of `length` positions as a sequence cut over its members, as
  // hybrid_layout cuts it.
  SequenceLayout group_layout(std::int64_t length) const {
    return SequenceLayout(ring_layout(length).local_length(group_), U_, Sharding::contiguous);
  }

 private:
  Sharding sharding_;
  std::int64_t align_;
  int U_ = 1, R_ = 1, group_ = 0, member_ = 0;
  MPI_Comm heads_ = MPI_COMM_NULL, ring_ = MPI_COMM_NULL;
};

}  // namespace detail
}  // namespace dist
}  // namespace kattn
