// Which global sequence positions each rank holds: contiguous shards, or zigzag shards for
// causal masks (the sequence cut into 2P segments, rank r holding segments r and 2P-1-r, so every
// rank has one early and one late segment and the same share of the causal triangle).
// Lengths need not divide by the rank count: segments differ by at most one unit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kattn/distributed/options.hpp"

namespace kattn {
namespace dist {

// A run of consecutive global positions held by one rank.
struct Segment {
  std::int64_t global = 0;  // first global position
  std::int64_t local = 0;   // its index in the rank's local array
  std::int64_t length = 0;
  int owner = 0;
};

class SequenceLayout {
 public:
  SequenceLayout() = default;
  // `length` positions over `ranks` ranks. Segment boundaries are multiples of `align` (the
  // deterministic mode's key chunk) except the end of the sequence; align = 1 balances exactly.
  SequenceLayout(std::int64_t length, int ranks, Sharding sharding, std::int64_t align = 1);

  std::int64_t length() const { return length_; }
  int ranks() const { return ranks_; }
  Sharding sharding() const { return sharding_; }
  std::int64_t align() const { return align_; }

  // Every segment in global order (empty ones left out).
  const std::vector<Segment>& segments() const { return segments_; }
  // The segments of one rank in local order (= global order).
  std::vector<Segment> segments_of(int rank) const;
  std::int64_t local_length(int rank) const;
  // Global position of a rank's local index.
  std::int64_t global_position(int rank, std::int64_t local) const;

  // The layout over ranks() x members ranks in which rank r * members + m holds part m of rank r's
  // positions here, its local array cut contiguously as SequenceLayout(local_length(r), members)
  // cuts a sequence (the 2-D grid of hybrid attention: r a ring group, m a member of it).
  SequenceLayout split_each(int members) const;

  std::string describe() const;  // "a zigzag split of 50 positions over 4 ranks"

 private:
  std::int64_t length_ = 0;
  int ranks_ = 1;
  Sharding sharding_ = Sharding::contiguous;
  std::int64_t align_ = 1;
  int members_ = 1;  // split_each: parts per rank of the layout it was cut from
  std::vector<Segment> segments_;
};

// The positions of a sequence of N that each of P ranks holds under ring and ulysses: N over P
// ranks as d.sharding says, on whole chunks in deterministic mode.
inline SequenceLayout sharded_layout(std::int64_t N, int P, const DistOptions& d) {
  return SequenceLayout(N, P, d.sharding, shard_align(d));
}

// The positions each of the P ranks holds under hybrid (d.ulysses_size, d.sharding, and the chunk
// alignment of deterministic mode): the ring's layout over P / U groups, each group's share cut
// contiguously over its U members (rank g U + u holds part u of group g's share). Throws
// kattn::Error when U does not divide P.
SequenceLayout hybrid_layout(std::int64_t N, int P, const DistOptions& d);

// The positions of a sequence of N that each of P ranks holds under d.scheme: sharded_layout for
// ring and ulysses, hybrid_layout for hybrid; for sharded_kv, the keys in rank order (contiguous,
// shards on whole chunks in deterministic mode), its queries being replicated on every rank.
SequenceLayout layout_of(std::int64_t N, int P, const DistOptions& d);

}  // namespace dist
}  // namespace kattn
