// Every rank's own part of the distributed commands' files: the inputs' headers read on every
// rank and agreed on, each rank's rows read in place (or drawn), and each rank's rows of the
// outputs written in place, so no rank holds more than its share of the sequence.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "bias_tensor.hpp"
#include "inputs.hpp"
#include "kattn/distributed/layout.hpp"
#include "npy_rows.hpp"

namespace kattn {
namespace cli {

// The positions `rank` holds under `layout` (none for a rank the layout does not have).
std::vector<PositionRun> runs_of(const dist::SequenceLayout& layout, int rank);

// The input flags read on every rank (the files' headers, or --random's shape) and compared: a bad
// file on any rank, or files that differ between ranks, is the same kattn::Error on every rank.
// `extra` names a further [B, Nq, Hq, D] input ("--do"), "" for none.
DenseInputs describe_on_every_rank(MPI_Comm comm, const char* command, const std::vector<std::string>& input_args,
                                   const std::string& extra, DenseSource& source);

// opt with this rank's slice of --bias (in input_args), read or drawn on every rank into `bias`; a
// bad file on any rank is the same kattn::Error on every rank. opt unchanged without --bias.
Options with_bias_slice(MPI_Comm comm, const char* command, const std::vector<std::string>& input_args,
                        const BiasSlice& slice, BiasTensor& bias, Options opt);

// Writes a [B, N, H, D] array in in.dtype and in.layout whose positions `layout` spreads over the
// ranks, `local` being this rank's [B, n, H, D] (bnhd): rank 0 the header, every rank its rows.
void write_dense_positions(MPI_Comm comm, const std::string& path, const DenseInputs& in, std::int64_t H,
                           const dist::SequenceLayout& layout, const std::vector<double>& local);

// The same for an lse [B, H, N] (in f32 for 16-bit runs), `local` being this rank's [B, H, n].
void write_lse_positions(MPI_Comm comm, const std::string& path, const DenseInputs& in, std::int64_t H,
                         const dist::SequenceLayout& layout, const std::vector<double>& local);

// Writes the gradient of a bias of `shape` (the whole's) in float64, `local` being this rank's
// slice of it. A slice along a broadcast axis is every rank's share of the whole gradient: the
// shares are summed on rank 0 (in rank order), which writes them.
void write_dbias(MPI_Comm comm, const std::string& path, const std::vector<std::int64_t>& shape,
                 const std::function<BiasSlice(int rank)>& slice_of, const std::vector<double>& local);

// Writes a packed [total, ...] array `shape` (a ragged batch's outputs) in `dtype`, `local` being
// this rank's rows `rows` (packed indices) in that order: rank 0 the header, every rank its rows.
void write_packed_rows(MPI_Comm comm, const std::string& path, io::DType dtype, const std::vector<std::int64_t>& shape,
                       const std::vector<std::int64_t>& rows, const std::vector<double>& local);

// This process's rank in comm, and comm's number of ranks.
inline int rank_of(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}
inline int ranks_in(MPI_Comm comm) {
  int P = 1;
  MPI_Comm_size(comm, &P);
  return P;
}

}  // namespace cli
}  // namespace kattn
