// kattn run --dist ring over a ragged batch (the one-process run's ragged inputs, CLI.md): every
// rank reads (or draws) only its rows of the batch (dist::ragged_positions: each sequence sharded
// as the dense ring shards one), runs dist::attention (scheme ring) on them and writes its rows of o and
// lse in place; --check gathers them on rank 0 against the float64 reference on the whole batch.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "batch_inputs.hpp"
#include "console.hpp"
#include "kattn/distributed/options.hpp"
#include "kattn/options.hpp"
#include "kattn/ragged.hpp"

namespace kattn {
namespace cli {

// Rank 0 gets the packed [total, width] array of every rank's rows (`rows`: their packed
// indices); the others an empty vector.
std::vector<double> gather_packed_rows(MPI_Comm comm, const std::vector<double>& local,
                                       const std::vector<std::int64_t>& rows, std::int64_t total, std::int64_t width);
// This rank's part of a ragged batch (each sequence sharded as the dense ring shards one, on whole
// chunks in deterministic mode): its packed rows of q and of k/v, and their local indptr.
// Collective: a batch the ranks cannot shard fails on every rank.
struct RaggedShard {
  std::vector<std::int64_t> q_rows, kv_rows, q_local, kv_local;
  // The layout of this rank's rows, for kv::ragged.
  RaggedLayout<Kokkos::DefaultExecutionSpace::memory_space> layout() const;
};
RaggedShard ragged_shard(MPI_Comm comm, const BatchInputs& in, const dist::DistOptions& d);

// After the flags are agreed; returns rank 0's exit status on every rank.
int run_ragged_ring(MPI_Comm comm, const BatchInputs& in, const BatchSource& src, const Options& opt,
                    const dist::DistOptions& d,
                    const std::optional<std::string>& out_path, const std::optional<std::string>& lse_path, bool check,
                    const Console& console);

}  // namespace cli
}  // namespace kattn
