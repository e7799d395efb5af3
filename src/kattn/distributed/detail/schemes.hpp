// The schemes behind kattn::dist::attention and attention_backward, on validated params: declared
// here, each compiled once in its own source (ring.cpp, ring_backward.cpp, head_sharded.cpp,
// sharded_kv.cpp) for every backend and storage it takes. The door (door.hpp) checks the arguments,
// agrees the call on every rank and calls one of these. Internal.
#pragma once

#include <mpi.h>

#include "kattn/backward_options.hpp"
#include "kattn/backward_params.hpp"
#include "kattn/core/attention_params.hpp"
#include "kattn/distributed/options.hpp"
#include "kattn/options.hpp"
#include "kattn/ragged.hpp"

namespace kattn {
namespace dist {
namespace detail {

class FailureLatch;

// Ring attention (ring.cpp): K/V shards travel round the ring with non-blocking point-to-point
// messages while the local tile work runs, and each rank folds the partial states of its query
// rows with the state algebra. In deterministic mode the keys are folded in fixed-size global
// chunks in global order instead, so the outputs are bitwise the same for every rank count and
// sharding. Instantiated for (T, KV) = (float, float), (double, double), (float, bf16) and (float,
// fp16): K/V travel in their storage type, partial states and the merge are in T.
// outer: the latch of an enclosing distributed call (hybrid), which settles failures itself;
// null: the call has its own latch and settles before returning.
template <class ExecSpace, class T, class KV>
DistStats ring_forward_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<T, T, KV>& p,
                            const Options& opt, const DistOptions& d, FailureLatch* outer = nullptr);

// A ragged batch (ragged_pieces.hpp): p the ragged params of this rank's packed arrays, lengths its
// local lengths. S: float, double, bf16 or fp16 (q, k, v, o; lse float for 16 bits).
template <class ExecSpace, class S>
DistStats ring_ragged_forward_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<S>& p,
                                   const BatchLengths& lengths, const Options& opt, const DistOptions& d);

// Ring attention's backward (ring_backward.cpp): dQ stays on the rank of its queries; dK and dV
// accumulators travel with their K/V shards round the ring (the K/V shards ahead, the accumulators
// one step behind, overlapping the local work) and come back to their owners. Every (query shard,
// key shard) pair is kattn::attention_backward with the global LSE and the mask placed by
// diagonal_shift. Deterministic mode: every pair of fixed-size global chunks is its own backward
// call with a deterministic dQ strategy; dQ folds the key chunks in ascending global order, and
// each key segment's dK/dV accumulator tours the query segments (owner -> owner of the last query
// segment -> ... -> of the first -> owner) adding the query chunks in descending global order.
template <class ExecSpace, class T>
DistStats ring_backward_impl(MPI_Comm comm, const ExecSpace& space, const BackwardParams<T>& p, const Options& opt,
                             const DistOptions& d, const BackwardOptions& bopt, FailureLatch* outer = nullptr);

// K and V stored as KV (T, or bf16 or fp16 under float T), with p.fwd's k and v strides (p.fwd.k
// and p.fwd.v unused): they travel as stored.
template <class ExecSpace, class T, class KV>
DistStats ring_backward_impl(MPI_Comm comm, const ExecSpace& space, const BackwardParams<T>& p, const KV* k,
                             const KV* v, const Options& opt, const DistOptions& d, const BackwardOptions& bopt,
                             FailureLatch* outer = nullptr);

// A ragged batch: p the ragged params of this rank's packed arrays, lengths its local lengths. S:
// float, double, bf16 or fp16 (every array; lse float for 16 bits).
template <class ExecSpace, class S>
DistStats ring_ragged_backward_impl(MPI_Comm comm, const ExecSpace& space, const BackwardParams<S>& p,
                                    const BatchLengths& lengths, const Options& opt, const DistOptions& d,
                                    const BackwardOptions& bopt);

// Head sharding, alone (ulysses) or inside groups with a ring across them (hybrid), forward and
// backward (head_sharded.cpp): an all-to-all gives each rank the whole sequence (ulysses) or its
// group's share (hybrid) of its heads, kattn's local attention (ulysses) or the ring across the
// groups (hybrid) runs on it, and an all-to-all brings the results back to the positions; a KV
// head whose query heads sit on several ranks gets its dK, dV summed over them in rank order.
// d.scheme says which. T: float, double, bf16 or fp16 for every array (lse float for 16 bits): the
// all-to-alls move them in their type, the attention computes in float, each result rounded once.
template <class ExecSpace, class T>
DistStats head_sharded_forward_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<T>& p,
                                    const Options& opt, const DistOptions& d);
template <class ExecSpace, class T>
DistStats head_sharded_backward_impl(MPI_Comm comm, const ExecSpace& space, const BackwardParams<T>& p,
                                     const Options& opt, const DistOptions& d, const BackwardOptions& bopt);

// Sharded KV (sharded_kv.cpp): the KV cache sharded in rank order, the queries replicated. Each
// rank attends over its shard and makes a finished partial state per query row; a user-defined
// MPI_Op (merge_op.hpp) merges them in MPI_Allreduce (every rank gets the output) or MPI_Reduce
// (one rank does): D + 1 numbers per query row, whatever the context length. Deterministic mode
// folds fixed-size key chunks in global order along the ranks instead (a chain). Partial rows
// travel in T. Instantiated for (Q, T, KV) = (float, float, float), (double, double, double),
// (float, float, bf16) and (float, float, fp16).
template <class ExecSpace, class Q, class T, class KV>
DistStats sharded_kv_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<Q, T, KV>& p,
                          const Options& opt, const DistOptions& d);

// The grid (grid.cpp, grid_plan.hpp): query shards gathered along the grid's columns, K/V along its
// rows, every (query shard, key shard) block computed once with the local kernels, the blocks'
// finished rows merged at the query shard's owner in grid-row order; in deterministic mode the
// blocks' chunk partials travel instead and the owner folds them in global chunk order (the bits of
// one rank). Instantiated as ring_forward_impl. outer: as for the ring.
template <class ExecSpace, class T, class KV>
DistStats grid_forward_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<T, T, KV>& p,
                            const Options& opt, const DistOptions& d, FailureLatch* outer = nullptr);

// A ragged batch over the grid: the dense grid on each sequence in turn (every sequence sharded as
// a dense sequence is: ragged_local_indptr), under one failure latch. S: float, double, bf16 or fp16.
template <class ExecSpace, class S>
DistStats grid_ragged_forward_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<S>& p,
                                   const BatchLengths& lengths, const Options& opt, const DistOptions& d);

// The grid's backward (grid_backward.cpp): the forward's transfers plus each query shard's o, dout
// and lse along the columns, every block's gradients with the local kernels, dQ summed back along
// the columns in grid-row order and dK/dV along the rows in grid-column order; in deterministic
// mode the ring tour's chunk blocks travel as they are and are added in the tour's order (the bits
// of one rank). Instantiated as ring_backward_impl (k, v as stored). outer: as for the ring.
template <class ExecSpace, class T, class KV>
DistStats grid_backward_impl(MPI_Comm comm, const ExecSpace& space, const BackwardParams<T>& p, const KV* k,
                             const KV* v, const Options& opt, const DistOptions& d, const BackwardOptions& bopt,
                             FailureLatch* outer = nullptr);
// A ragged batch: the dense grid's backward on each sequence in turn. S: float, double, bf16 or fp16.
template <class ExecSpace, class S>
DistStats grid_ragged_backward_impl(MPI_Comm comm, const ExecSpace& space, const BackwardParams<S>& p,
                                    const BatchLengths& lengths, const Options& opt, const DistOptions& d,
                                    const BackwardOptions& bopt);

}  // namespace detail
}  // namespace dist
}  // namespace kattn
