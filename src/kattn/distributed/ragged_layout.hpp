// Ragged (packed variable-length) batches over the ranks of a ring: every sequence is cut the way
// the dense ring cuts one sequence (SequenceLayout with align 1 on equal pieces: P chunks when
// contiguous, 2P when zigzag, rank r holding chunks r and 2P-1-r), and each rank packs, sequence
// after sequence, its chunk(s) of every sequence in global order (ring-flash-attn's varlen
// functions and Megatron's context parallelism shard packed documents so). Every sequence length
// must divide by the number of pieces: then every rank holds N_b / P positions of sequence b and
// the local indptr is the same on every rank.
//
// The deterministic mode (DistOptions::deterministic) cuts every sequence as it cuts one dense
// sequence, SequenceLayout(N_b, P, sharding, chunk): shard boundaries on whole key chunks, which
// are positions of the sequence and so do not move with the rank count. Any lengths are taken;
// ranks then hold different numbers of positions, and each its own local indptr. The overloads
// taking DistOptions give either sharding, as the options ask: use them with the call's options.
#pragma once

#include <cstdint>
#include <vector>

#include "kattn/distributed/options.hpp"
#include "kattn/distributed/layout.hpp"

namespace kattn {
namespace dist {

// The local indptr [B + 1] of every rank (the same on each) from the global indptr [B + 1] of a
// ragged batch: global_indptr[b] / ranks. Throws kattn::Error naming `argument` when an offset is
// out of order or a sequence length does not divide by ranks (contiguous) or 2 * ranks (zigzag).
std::vector<std::int64_t> ragged_local_indptr(const std::vector<std::int64_t>& global_indptr, int ranks,
                                              Sharding sharding, const char* argument = "indptr");

// The global packed row of each of rank `rank`'s local rows (ragged_local_indptr's order): what a
// rank takes from a whole packed array, and where its rows of a packed result go.
std::vector<std::int64_t> ragged_positions(const std::vector<std::int64_t>& global_indptr, int rank, int ranks,
                                           Sharding sharding, const char* argument = "indptr");

// Rank `rank`'s local indptr [B + 1] under the sharding `d` asks for: ragged_local_indptr's above,
// or in deterministic mode every sequence's chunk-aligned shard (any length; the indptr differ
// between ranks). Throws kattn::Error naming `argument` as above, or the field of d no call takes.
std::vector<std::int64_t> ragged_local_indptr(const std::vector<std::int64_t>& global_indptr, int rank, int ranks,
                                              const DistOptions& d, const char* argument = "indptr");

// The global packed row of each of rank `rank`'s local rows under the sharding `d` asks for.
std::vector<std::int64_t> ragged_positions(const std::vector<std::int64_t>& global_indptr, int rank, int ranks,
                                           const DistOptions& d, const char* argument = "indptr");

}  // namespace dist
}  // namespace kattn
