// The distributed commands' shared steps: the sharding and its flags, the flags compared across
// the ranks, every rank's shard gathered on rank 0 (for --check), and the rank-0 phase that follows. Arrays are [outer,
// N, inner] in C order with the sequence in the middle: [B, N, H, D] is outer = B, inner = H * D; lse [B, H, N] is
// outer = B * H, inner = 1.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "args.hpp"
#include "collective_steps.hpp"
#include "kattn/distributed/collective.hpp"
#include "kattn/distributed/options.hpp"
#include "kattn/distributed/layout.hpp"
#include "kattn/distributed/traffic.hpp"
#include "inputs.hpp"
#include "json.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace cli {

// The --dist schemes: ring, ulysses and hybrid shard the sequence; decode shards the KV cache and
// replicates the queries.
int mode_number(const std::string& mode);  // 0 ring, 1 decode, 2 ulysses, 3 hybrid, 4 grid; -1 otherwise
inline bool shards_sequence(const std::string& mode) {
  return mode == "ring" || mode == "ulysses" || mode == "hybrid" || mode == "grid";
}

// The scheme of --dist MODE ("decode" is sharded_kv), --ulysses-size U (hybrid only: ranks per
// head-sharding group, a divisor of the P ranks) and --grid ROWS,COLS (grid only; absent: the most
// square shape, dist::grid_shape; the library checks ROWS x COLS = P) into d.
void read_grid(Args& args, const std::string& mode, int ranks, dist::DistOptions& d);

// The problem of dense inputs for the traffic model, its arrays stored in `bytes_per_value`.
dist::TrafficProblem traffic_problem(const DenseInputs& in, int bytes_per_value);

// " grid=UxR" for hybrid, " grid=ROWSxCOLS" for grid, empty otherwise (for the header line).
std::string grid_text(const std::string& mode, int ranks, const dist::DistOptions& d);

// The header's scheme, "dist=MODE ranks=P[ grid=..] sharding=S[ deterministic]", and its JSON
// fields (dist, ranks, sharding, ulysses_size, grid, deterministic).
std::string dist_heading(const std::string& mode, int ranks, const dist::DistOptions& d);
void add_dist_fields(Json& j, const std::string& mode, int ranks, const dist::DistOptions& d);

// The largest x over the ranks (MPI_MIN: the smallest).
double max_over(MPI_Comm comm, double x, MPI_Op op = MPI_MAX);
// The slowest rank's stats of a distributed call (the most of each time and of bytes_sent over
// the ranks), the fastest rank's compute time, and the most bytes dist::traffic predicts for a
// rank (`model_sent` this rank's; negative on every rank: no model, model_bytes -1).
struct SlowestRank {
  dist::DistStats stats;
  double compute_min = 0;
  long long model_bytes = -1;
};
SlowestRank slowest_rank(MPI_Comm comm, const dist::DistStats& s, double model_sent = -1);

// The time line and JSON fields of a distributed forward (run) and backward (grad; its forward's
// slowest time beside it), on rank 0.
void report_dist_forward(std::FILE* text, Json& j, double flops, int ranks, const SlowestRank& s, long long peak_rss);
void report_dist_backward(std::FILE* text, Json& j, double flops, double forward_seconds, const SlowestRank& s,
                          long long peak_rss);

// Rank 0 gets the whole array of `size` elements assembled from every rank's `local`, rank r's
// being block_of(r) of it (the other ranks get an empty vector); `sum`: the blocks are the same
// elements, added in rank order. Only --check needs it, and a gradient every rank holds a share of
// (dist_files.hpp): the files are read and written per rank.
std::vector<double> gather_blocks(MPI_Comm comm, const std::vector<double>& local, std::int64_t size,
                                  const std::function<RowBlock(int rank)>& block_of, bool sum = false);
// The global array of positions `layout` spreads over the ranks, [outer, N, inner].
std::vector<double> gather_positions(MPI_Comm comm, const std::vector<double>& local, std::int64_t outer,
                                     std::int64_t inner, const dist::SequenceLayout& layout);

// A distributed command's flags compared across the ranks before its first other collective step:
// the mode (--dist), --check, the distributed and the attention options, and `extra`; the first
// difference is the same kattn::Error on every rank.
void agree_on_command(MPI_Comm comm, const std::string& mode, const Options& opt, const dist::DistOptions& d,
                      bool check, const std::vector<dist::Agreed>& extra = {});

}  // namespace cli
}  // namespace kattn
