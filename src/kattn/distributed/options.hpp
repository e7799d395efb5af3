// Options and measurements of kattn::dist::attention and attention_backward (attention.hpp): which
// scheme spreads the work over the ranks, how the sequence is sharded, the deterministic mode, and
// what one call did on this rank.
#pragma once

#include <cstdint>
#include <vector>
#include <functional>
#include <string>

namespace kattn {
namespace dist {

// How the work is spread over the ranks (docs/distributed.md, "Which scheme when"):
enum class Scheme {
  // The sequence sharded, K/V shards passed round a ring while each rank folds partial states
  // (dense or ragged batches; forward and backward).
  ring,
  // The sequence sharded; an all-to-all gives each rank the whole sequence of Hq / P heads
  // (DeepSpeed-Ulysses; Hq a multiple of P; dense; forward and backward).
  ulysses,
  // ulysses inside groups of `ulysses_size` ranks, the ring across the P / ulysses_size groups
  // (USP; dense; forward and backward).
  hybrid,
  // The KV cache sharded in rank order, the queries replicated; the ranks' finished rows merged by
  // a reduction (distributed decode; dense; forward only).
  sharded_kv,
  // A rows x cols grid of the ranks (DistOptions::grid): queries gathered along a grid column, K/V
  // along a grid row, each rank computing one (query group, key group) block; the blocks' finished
  // states merged along the column in a fixed order (forward only; a ragged batch one sequence at
  // a time). 1 x P is the ring's
  // traffic pattern (docs/distributed.md, "The grid").
  grid,
};

// "ring", "ulysses", "hybrid", "sharded-kv", "grid".
const char* name(Scheme s);
// The scheme of that name ("sharded_kv" also); throws kattn::Error naming `argument` for any other.
Scheme scheme_named(const std::string& name, const char* argument = "scheme");

// Contiguous shards, or zigzag shards for causal masks (layout.hpp).
enum class Sharding { contiguous, zigzag };

const char* name(Sharding s);

// How device buffers reach MPI: `automatic` passes device pointers when the MPI is GPU-aware
// (and host memory always directly), else stages through host mirrors; `host` always stages
// (also for host memory: exercises the staging path); `direct` never stages.
enum class Staging { automatic, host, direct };

// Keys per chunk of the deterministic mode when DistOptions::chunk is 0. The chunk is part of
// what fixes the bits of a deterministic result: runs that must agree use the same chunk.
constexpr std::int64_t kDefaultChunk = 1024;

struct DistOptions {
  Scheme scheme = Scheme::ring;
  // ring, ulysses, hybrid: how Q, K and V are sharded over the ranks. The local arrays of rank r
  // hold exactly layout_of(N, P, *this).segments_of(r) (layout.hpp).
  Sharding sharding = Sharding::contiguous;
  // Bitwise the same outputs for every rank count, sharding and split count: the keys are cut
  // into fixed-size global chunks (`chunk`, 0 = kDefaultChunk) whose partial states are folded
  // into each query row in global chunk order; block_k is fixed from the global problem when
  // Options::block_k is 0. Costs: K/V chunks go point to point in global order instead of round
  // a ring, and one partial per (row, chunk it sees) is written and folded (docs/distributed.md).
  bool deterministic = false;
  std::int64_t chunk = 0;
  Staging staging = Staging::automatic;
  // hybrid: ranks per head-sharding group, U in the grid P = U x R (rank g U + u is member u of
  // ring group g); 0 means P (one group). Ignored by the other schemes.
  int ulysses_size = 0;
  // grid: the grid's shape, rows x cols = P (rank r * cols + c sits in row r, column c); {0, 0}
  // chooses the most square one, rows <= cols (grid_shape). Ignored by the other schemes.
  struct GridShape {
    int rows = 0, cols = 0;
  } grid;
  // sharded_kv: -1 gives every rank the result (MPI_Allreduce); a rank number gives it to that rank
  // only (MPI_Reduce); the others' o and lse are then left as they were. Ignored by the others.
  int root = -1;
  // false: the same local work with every transfer removed (each step computes on the shard
  // already held, with the masks of the shard it stands for). For measuring the ring's overlap
  // only: every other scheme, and every backward, refuses it.
  bool communicate = true;
  // Called on every rank after each step (step = 1..steps), e.g. for progress lines. An exception
  // from it ends the call on every rank with that error (docs/distributed-reference.md, Errors);
  // once a rank knows of a failure, it calls it no more.
  std::function<void(int step, int steps)> progress;
};

// What one call did on this rank.
struct DistStats {
  double seconds = 0;              // whole call, wall clock
  double compute_seconds = 0;      // local attention kernels and partial-state folds
  double compute_cpu_seconds = 0;  // the same in process CPU time: on a shared host it measures the work
                                   // a rank did, not how long others held its core (host backends)
  double comm_seconds = 0;         // exposed communication: waiting for transfers (and staging copies)
  std::int64_t bytes_sent = 0;     // bytes this rank handed to MPI send calls (a broadcast counts at its
                                   // root); dist::traffic (traffic.hpp) predicts it
  std::int64_t messages_sent = 0;
  double flops = 0;     // useful work done here: per visible (query, key) pair and query head, 4 D
                        // (forward) or 10 D (backward)
  int steps = 0;        // ring steps run (or key segments, tour items, or chain hops)
  bool staged = false;  // buffers went through host staging
  // The backward with Options::sinks: their gradient over every rank's rows, the same on every rank
  // (an exact sum: the same bits at every rank count). Empty otherwise.
  std::vector<double> dsinks;
};

// Keys per deterministic chunk for these options.
inline std::int64_t chunk_of(const DistOptions& d) { return d.chunk > 0 ? d.chunk : kDefaultChunk; }

// Shard boundaries fall on multiples of this: the chunk in deterministic mode, else anywhere.
inline std::int64_t shard_align(const DistOptions& d) { return d.deterministic ? chunk_of(d) : 1; }

// hybrid: U, the ranks of one head-sharding group, in a grid of `ranks` ranks.
inline int ulysses_ranks(int ranks, const DistOptions& d) { return d.ulysses_size > 0 ? d.ulysses_size : ranks; }

// grid: the shape used on `ranks` ranks: d.grid, or for {0, 0} rows the largest divisor of ranks
// that is at most its square root and cols = ranks / rows (2 -> 1 x 2, 4 -> 2 x 2, 8 -> 2 x 4).
// Throws kattn::Error naming `grid` when rows x cols is not ranks.
DistOptions::GridShape grid_shape(int ranks, const DistOptions& d);

// Throws kattn::Error naming the field when d holds a value no call takes (a scheme out of range, a
// negative chunk, root or group size). Every call checks it first (on every rank, collectively).
void validate(const DistOptions& d);

}  // namespace dist
}  // namespace kattn
