// Part of an .npy array read and written in place (pread / pwrite): the array is [outer, N, inner]
// in C order with the sequence in the middle, and a part is some runs of its N positions, held
// locally as [outer, n, inner]. This is how a rank touches only its own rows of a shared file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kattn/io/npy.hpp"

namespace kattn {
namespace cli {

// Positions [global, global + length) of the sequence, at index `local` of the local array.
struct PositionRun {
  std::int64_t global = 0, local = 0, length = 0;
};

struct RowBlock {
  std::int64_t outer = 1, N = 0, inner = 1;
  std::vector<PositionRun> runs;
  std::int64_t local_length() const;  // n: the positions of all runs
  std::int64_t local_size() const { return outer * local_length() * inner; }
};

// The runs of consecutive indices in `rows` (positions of the sequence, in the local order: the
// local index of rows[i] is i), as a ragged rank's packed rows are.
std::vector<PositionRun> packed_runs(const std::vector<std::int64_t>& rows);

// Calls f(array element, local element, count) for every run of every outer index: where each
// contiguous span of the local array lies in the whole one.
template <class F>
void for_each_span(const RowBlock& rows, F&& f) {
  const std::int64_t n = rows.local_length();
  for (std::int64_t o = 0; o < rows.outer; ++o)
    for (const PositionRun& r : rows.runs)
      f((o * rows.N + r.global) * rows.inner, (o * n + r.local) * rows.inner, r.length * rows.inner);
}

// The runs' values of the array whose header is `h` (read by io::read_npy_header), as float64.
std::vector<double> read_rows(const std::string& path, const io::NpyHeader& h, const RowBlock& rows);
// The same runs' elements as stored (h.dtype's bytes).
std::vector<unsigned char> read_row_bytes(const std::string& path, const io::NpyHeader& h, const RowBlock& rows);

// Creates (or truncates) `path` holding the header of a `dtype` array of `shape`; its data is
// written by write_rows.
void create_npy(const std::string& path, io::DType dtype, const std::vector<std::int64_t>& shape);

// Writes `values` ([outer, n, inner]) as `dtype` into the runs' places of the file create_npy made.
void write_rows(const std::string& path, io::DType dtype, const std::vector<std::int64_t>& shape, const RowBlock& rows,
                const std::vector<double>& values);

}  // namespace cli
}  // namespace kattn
