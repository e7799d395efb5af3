// Chosen rows of the gradients of attention, each computed exactly as the textbook backward does
// (P = softmax(S), dP = dO V^T, D = rowsum(P * dP), dS = P (dP - D)) in float64, without the
// [Nq, Nk] matrices: a check of the backward at any sequence length. Host memory only.
//   a dQ row costs one pass over the keys its query sees (O(keys) memory);
//   dK and dV rows of one KV head need every query row's lse and D of its GQA group, one float64
//   forward pass over those rows (O(queries) memory), then one pass over the queries per key row.
#pragma once

#include <cstdint>
#include <vector>

#include "kattn/backward_params.hpp"
#include "kattn/options.hpp"
#include "kattn/reference_rows.hpp"

namespace kattn {

// One key row of dK and dV: sequence b, key position j of that sequence, KV head h.
struct KeyRow {
  int b = 0;
  std::int64_t j = 0;
  int h = 0;
};

// Row (b, i, h) of dQ for the q, k, v, dO of p (o, lse and the gradients are not read): writes
// head_dim values to dq_row. A row that sees no key gets 0.
void reference_dq_row(const BackwardParams<double>& p, const Options& opt, const QueryRow& row, double* dq_row);

// dK and dV of each of `rows` (row r's head_dim values at dk + r * head_dim, dv + r * head_dim),
// summed over the KV head's GQA group as the backward does. Keys no query sees get 0.
void reference_dkdv_rows(const BackwardParams<double>& p, const Options& opt, const std::vector<KeyRow>& rows,
                         double* dk, double* dv);

// The key rows worth checking, each once: for every sequence its first and last key and the keys
// on either side of every masked edge (where a key stops being seen by the first query row,
// starts being seen by the last one, or is seen by no row), on the first and last KV head; then
// `random_rows` rows drawn uniformly with `seed`. Sorted by (b, j, h).
std::vector<KeyRow> key_rows_to_check(const BackwardParams<double>& p, const Options& opt, std::int64_t random_rows,
                                      std::uint64_t seed);

}  // namespace kattn
