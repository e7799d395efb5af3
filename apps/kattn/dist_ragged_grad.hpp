// kattn grad --dist ring over a ragged batch (the one-process grad's ragged inputs, CLI.md): every
// rank reads (or draws) only its rows of the batch and of dO (each sequence sharded as the dense
// ring shards one), runs dist::attention then dist::attention_backward (scheme ring) on them and
// writes its rows of dq, dk and dv in place; --check gathers them on rank 0 against the float64
// textbook backward of the whole batch, sequence by sequence.
#pragma once

#include <mpi.h>

#include <vector>

#include "batch_inputs.hpp"
#include "grad_ragged.hpp"
#include "kattn/backward_options.hpp"
#include "kattn/distributed/options.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace cli {

// After the flags are agreed; returns rank 0's exit status on every rank. text: where the report
// goes (standard error under --json, whose JSON alone goes to standard output).
int grad_ragged_ring(MPI_Comm comm, const BatchInputs& in, const BatchSource& src, const RaggedDout& dout,
                     const Options& opt,
                     const BackwardOptions& bopt, const dist::DistOptions& d, const GradPaths& paths, bool check,
                     bool json);

}  // namespace cli
}  // namespace kattn
