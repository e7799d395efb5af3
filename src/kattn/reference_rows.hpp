// Chosen query rows of attention, each computed exactly as the textbook algorithm does (S, then the
// softmax, then P V) in float64, in O(keys) memory per row: a check that works at any sequence
// length, where the full reference's [Nq, Nk] score matrix would not fit. Host memory only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "kattn/options.hpp"
#include "kattn/core/attention_params.hpp"
#include "kattn/core/key_window.hpp"

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

// The textbook softmax of one row over the keys it sees, [first, first + scores.size()), and the
// head's sink (Options::sinks) if any: the keys' (scaled, softcapped) scores, their softmax
// weights and lse. No key seen, or every score -inf: p is all 0 and lse = the sink (-inf without
// one), as kattn::reference.
struct RowSoftmax {
  std::int64_t first = 0;
  std::vector<double> scores, p;
  std::vector<double> capped;  // each score before ALiBi and the bias: what softcap's derivative reads
  double lse = 0;
};

// The textbook's score of the row's query and key j: scale q . k, softcapped (`capped`), plus
// ALiBi's and the bias's terms (`logit`). The one rule of the row references.
struct TextbookScore {
  double capped = 0, logit = 0;
};
TextbookScore textbook_score(const AttentionParams<double>& p, const Options& opt, const KeyWindow& window,
                             double scale, const QueryRow& row, std::int64_t j);
RowSoftmax row_softmax(const AttentionParams<double>& p, const Options& opt, const QueryRow& row);

// The rule of a sample of rows (query rows here, key rows for the backward): for every sequence b
// of length(b) positions, its first and last position and both sides of every change of
// state(b, position), on head 0 and head heads - 1; then `random_rows` (b, position, head) drawn
// uniformly over every position and head with `seed`. Sorted, each once, as Row{b, position, head}.
template <class Row, class Length, class State>
std::vector<Row> sample_rows(int batch, int heads, const Length& length, const State& state,
                             std::int64_t random_rows, std::uint64_t seed) {
  std::vector<std::tuple<int, std::int64_t, int>> picked;
  const auto add = [&](int b, std::int64_t at) {
    picked.emplace_back(b, at, 0);
    if (heads > 1) picked.emplace_back(b, at, heads - 1);
  };
  std::int64_t total = 0;
  for (int b = 0; b < batch; ++b) {
    const std::int64_t n = length(b);
    total += n;
    if (n == 0) continue;
    add(b, 0);
    add(b, n - 1);
    for (std::int64_t at = 1; at < n; ++at)
      if (state(b, at) != state(b, at - 1)) {
        add(b, at - 1);
        add(b, at);
      }
  }
  if (total > 0 && random_rows > 0) {
    // A global position drawn uniformly, then the sequence that holds it.
    std::mt19937_64 gen(seed);
    std::uniform_int_distribution<std::int64_t> position(0, total - 1);
    std::uniform_int_distribution<int> head(0, heads - 1);
    for (std::int64_t n = 0; n < random_rows; ++n) {
      std::int64_t at = position(gen);
      int b = 0;
      while (at >= length(b)) at -= length(b++);
      picked.emplace_back(b, at, head(gen));
    }
  }
  std::sort(picked.begin(), picked.end());
  picked.erase(std::unique(picked.begin(), picked.end()), picked.end());
  std::vector<Row> rows;
  for (const auto& [b, at, h] : picked) rows.push_back(Row{b, at, h});
  return rows;
}

}  // namespace detail

// The rows worth checking, each once: for every sequence its first and last row and the rows on
// either side of every masked edge (where a row starts or stops seeing the first or the last key,
// or sees no key at all), on the first and the last query head; then `random_rows` rows drawn
// uniformly with `seed`. Sorted by (b, i, h).
std::vector<QueryRow> rows_to_check(const AttentionParams<double>& p, const Options& opt, std::int64_t random_rows,
                                    std::uint64_t seed);

}  // namespace kattn
