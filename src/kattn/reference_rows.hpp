// Chosen query rows of attention, each computed exactly as the textbook algorithm does (S, then the
// softmax, then P V) in float64, in O(keys) memory per row: a check that works at any sequence
// length, where the full reference's [Nq, Nk] score matrix would not fit. Host memory only.
#pragma once

#include <cstdint>
#include <vector>

#include "kattn/options.hpp"
#include "kattn/params.hpp"

namespace kattn {

// One query row: sequence b, position i of that sequence, query head h.
struct QueryRow {
  int b = 0;
  std::int64_t i = 0;
  int h = 0;
};

// Row (b, i, h) of p (q, k, v read through its pointers and strides, host memory; o and lse
// ignored): writes head_dim values to o_row and returns lse. A row that sees no key gets o = 0 and
// lse = -inf, as kattn::reference.
double reference_row(const AttentionParams<double>& p, const Options& opt, const QueryRow& row, double* o_row);

namespace detail {

// The textbook softmax of one row over the keys it sees, [first, first + scores.size()): its
// (scaled, softcapped) scores, their softmax and lse. No key seen, or every score -inf: p is all 0
// and lse = -inf, as kattn::reference.
struct RowSoftmax {
  std::int64_t first = 0;
  std::vector<double> scores, p;
  double lse = 0;
};
RowSoftmax row_softmax(const AttentionParams<double>& p, const Options& opt, const QueryRow& row);

}  // namespace detail

// The rows worth checking, each once: for every sequence its first and last row and the rows on
// either side of every masked edge (where a row starts or stops seeing the first or the last key,
// or sees no key at all), on the first and the last query head; then `random_rows` rows drawn
// uniformly with `seed`. Sorted by (b, i, h).
std::vector<QueryRow> rows_to_check(const AttentionParams<double>& p, const Options& opt, std::int64_t random_rows,
                                    std::uint64_t seed);

}  // namespace kattn
