// The reduction operator of distributed attention: an MPI_Op on finished rows [lse, o_0 .. o_{D-1}]
// (o normalised, lse natural log; -inf and o = 0 for a row that saw no key) that merges them
// with the state algebra (row_merge.hpp). A few numbers per query row, whatever the context.
//
//   MPI_Datatype row = kattn::dist::finished_row_type<double>(D);   // D + 1 doubles
//   MPI_Allreduce(MPI_IN_PLACE, rows, n_rows, row, kattn::dist::finished_row_merge<double>(), comm);
//   MPI_Type_free(&row);
//
// The operator is declared non-commutative, so MPI combines in rank order and a given rank count
// always gives the same bits (the merge is commutative but not associative in floating point).
#pragma once

#include <mpi.h>

namespace kattn {
namespace dist {

// The merge operator for rows of T (float or double). Created on first use, freed by MPI_Finalize.
template <class T>
MPI_Op finished_row_merge();

// A committed contiguous datatype of D + 1 values of T (one finished row); the caller frees it.
// The operator reads D from the datatype's size.
template <class T>
MPI_Datatype finished_row_type(int head_dim);

}  // namespace dist
}  // namespace kattn
