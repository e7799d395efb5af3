#include "kattn/dist/ragged_layout.hpp"

#include "kattn/errors.hpp"

namespace kattn {
namespace dist {

namespace {
int ragged_pieces(int ranks, Sharding sharding) { return sharding == Sharding::zigzag ? 2 * ranks : ranks; }
}  // namespace

std::vector<std::int64_t> ragged_local_indptr(const std::vector<std::int64_t>& global_indptr, int ranks,
                                              Sharding sharding, const char* argument) {
  KATTN_REQUIRE(ranks >= 1, "ranks: expected at least one rank, got ", ranks);
  KATTN_REQUIRE(!global_indptr.empty() && global_indptr[0] == 0, argument,
                ": expected B + 1 offsets starting at 0");
  const int pieces = ragged_pieces(ranks, sharding);
  std::vector<std::int64_t> local(global_indptr.size(), 0);
  for (std::size_t b = 0; b + 1 < global_indptr.size(); ++b) {
    const std::int64_t n = global_indptr[b + 1] - global_indptr[b];
    KATTN_REQUIRE(n >= 0, argument, ": expected non-decreasing offsets, got ", global_indptr[b], " then ",
                  global_indptr[b + 1], " at positions ", b, " and ", b + 1);
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
  KATTN_REQUIRE(rank >= 0 && rank < ranks, "rank: expected 0 .. ", ranks - 1, ", got ", rank);
  std::vector<std::int64_t> rows;
  rows.reserve(local.back());
  for (std::size_t b = 0; b + 1 < global_indptr.size(); ++b) {
    const SequenceLayout seq(global_indptr[b + 1] - global_indptr[b], ranks, sharding);
    for (const Segment& s : seq.segments_of(rank))
      for (std::int64_t i = 0; i < s.length; ++i) rows.push_back(global_indptr[b] + s.global + i);
  }
  return rows;
}

}  // namespace dist
}  // namespace kattn
