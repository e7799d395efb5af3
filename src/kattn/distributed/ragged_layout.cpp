#include "kattn/distributed/ragged_layout.hpp"

#include "kattn/errors.hpp"
#include "kattn/ragged.hpp"

namespace kattn {
namespace dist {

namespace {

int ragged_pieces(int ranks, Sharding sharding) { return sharding == Sharding::zigzag ? 2 * ranks : ranks; }

// Offsets from 0, non-decreasing (any number of sequences).
void require_offsets(const std::vector<std::int64_t>& global_indptr, const char* argument) {
  kattn::detail::check_indptr(global_indptr, argument, -1, "");
}

void require_rank(int rank, int ranks) {
  KATTN_REQUIRE(ranks >= 1, "ranks: expected at least one rank, got ", ranks);
  KATTN_REQUIRE(rank >= 0 && rank < ranks, "rank: expected 0 .. ", ranks - 1, ", got ", rank);
}

// Sequence b of the batch as it is sharded: in equal pieces (align 1), or on whole chunks.
SequenceLayout sequence_layout(const std::vector<std::int64_t>& global_indptr, std::size_t b, int ranks,
                               Sharding sharding, std::int64_t align) {
  return SequenceLayout(global_indptr[b + 1] - global_indptr[b], ranks, sharding, align);
}

// The global packed rows rank `rank` holds, every sequence sharded with `align`.
std::vector<std::int64_t> rows_of(const std::vector<std::int64_t>& global_indptr, int rank, int ranks,
                                  Sharding sharding, std::int64_t align) {
  std::vector<std::int64_t> rows;
  for (std::size_t b = 0; b + 1 < global_indptr.size(); ++b)
    for (const Segment& s : sequence_layout(global_indptr, b, ranks, sharding, align).segments_of(rank))
      for (std::int64_t i = 0; i < s.length; ++i) rows.push_back(global_indptr[b] + s.global + i);
  return rows;
}

}  // namespace

std::vector<std::int64_t> ragged_local_indptr(const std::vector<std::int64_t>& global_indptr, int ranks,
                                              Sharding sharding, const char* argument) {
  KATTN_REQUIRE(ranks >= 1, "ranks: expected at least one rank, got ", ranks);
  require_offsets(global_indptr, argument);
  const int pieces = ragged_pieces(ranks, sharding);
  std::vector<std::int64_t> local(global_indptr.size(), 0);
  for (std::size_t b = 0; b + 1 < global_indptr.size(); ++b) {
    const std::int64_t n = global_indptr[b + 1] - global_indptr[b];
    KATTN_REQUIRE(n % pieces == 0, argument, ": sequence ", b, " has ", n, " positions, not a multiple of ", pieces,
                  " (", name(sharding), " sharding over ", ranks,
                  " ranks cuts every sequence into that many equal pieces): pad it");
    local[b + 1] = local[b] + n / ranks;
  }
  return local;
}

std::vector<std::int64_t> ragged_positions(const std::vector<std::int64_t>& global_indptr, int rank, int ranks,
                                           Sharding sharding, const char* argument) {
  const std::vector<std::int64_t> local = ragged_local_indptr(global_indptr, ranks, sharding, argument);
  require_rank(rank, ranks);
  return rows_of(global_indptr, rank, ranks, sharding, 1);
}

std::vector<std::int64_t> ragged_local_indptr(const std::vector<std::int64_t>& global_indptr, int rank, int ranks,
                                              const DistOptions& d, const char* argument) {
  require_rank(rank, ranks);
  validate(d);
  if (!d.deterministic) return ragged_local_indptr(global_indptr, ranks, d.sharding, argument);
  require_offsets(global_indptr, argument);
  std::vector<std::int64_t> local(global_indptr.size(), 0);
  for (std::size_t b = 0; b + 1 < global_indptr.size(); ++b)
    local[b + 1] = local[b] + sequence_layout(global_indptr, b, ranks, d.sharding, chunk_of(d)).local_length(rank);
  return local;
}

std::vector<std::int64_t> ragged_positions(const std::vector<std::int64_t>& global_indptr, int rank, int ranks,
                                           const DistOptions& d, const char* argument) {
  require_rank(rank, ranks);
  validate(d);
  if (!d.deterministic) return ragged_positions(global_indptr, rank, ranks, d.sharding, argument);
  require_offsets(global_indptr, argument);
  return rows_of(global_indptr, rank, ranks, d.sharding, chunk_of(d));
}

}  // namespace dist
}  // namespace kattn
