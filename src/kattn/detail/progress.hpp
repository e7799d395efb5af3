// Options::progress for the kernels that run in pieces: the one report rule (the callback's false
// stops the call with an Error), and the backward's pieces (key tiles for the key pass, query
// tiles for the query pass) with the fraction of the work each completes. No Kokkos here.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kattn/backward_options.hpp"
#include "kattn/core/key_window.hpp"
#include "kattn/errors.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace detail {

inline void report_progress(const Options& opt, double fraction) {
  KATTN_REQUIRE(opt.progress(fraction), "progress: stopped by the callback at ", 100.0 * fraction, "% of the work");
}

// How a dense backward call with a progress callback is cut: about 100 pieces per pass, each
// with at least `teams` teams at work (all key chunks of the key pass, or `teams` tiles), the work
// counted as visible (query, key) pairs; the key pass holds `key_share` of the call's work.
class BackwardPieces {
 public:
  // Sequences of q_len queries and kv_len keys; key tiles of block_k keys, query tiles of block_q
  // rows (positions x group); `chunks` key-pass teams per (sequence, KV head), each taking one
  // tile of every round of `chunks` tiles; `heads` = batch x KV heads; `concurrency`: the execution
  // space's.
  BackwardPieces(const KeyWindow& window, std::int64_t q_len, std::int64_t kv_len, int group, int block_q,
                 int block_k, int chunks, DqStrategy dq, std::int64_t heads, int concurrency)
      : key_share_(dq == DqStrategy::query_pass ? 4.0 / 7.0 : 1.0) {  // 4 of the 7 tile products
    const std::int64_t key_tiles = (kv_len + block_k - 1) / block_k;
    const std::int64_t rows = q_len * group, row_tiles = (rows + block_q - 1) / block_q;
    // The tiles each launch needs to keep `concurrency` teams busy.
    const std::int64_t fill = std::max<std::int64_t>(1, (concurrency + heads - 1) / std::max<std::int64_t>(heads, 1));
    if (chunks < key_tiles) {  // a team per chunk walks its tiles: a piece holds whole rounds of every chunk
      const std::int64_t rounds = (key_tiles + chunks - 1) / chunks;
      key_step_ = std::int64_t(chunks) * ((rounds + 99) / 100);
    } else {  // a team per key tile
      key_step_ = std::max((key_tiles + 99) / 100, fill);
    }
    row_step_ = std::max((row_tiles + 99) / 100, fill);
    // Visible pairs per key tile and per query tile, summed as the pieces end.
    key_pairs_.assign(std::size_t(key_tiles), 0.0);
    row_pairs_.assign(std::size_t(row_tiles), 0.0);
    for (std::int64_t j = 0; j < kv_len; ++j)
      key_pairs_[std::size_t(j / block_k)] +=
          double(std::max<std::int64_t>(0, window.last_query(j, q_len, kv_len) - window.first_query(j, q_len, kv_len) + 1));
    for (std::int64_t t = 0; t < rows; ++t) {
      const std::int64_t i = t / group;
      row_pairs_[std::size_t(t / block_q)] +=
          double(std::max<std::int64_t>(0, window.last(i, q_len, kv_len) - window.first(i, q_len, kv_len) + 1)) / group;
    }
    for (const double x : key_pairs_) total_ += x;
  }

  std::int64_t key_tiles() const { return std::int64_t(key_pairs_.size()); }
  std::int64_t row_tiles() const { return std::int64_t(row_pairs_.size()); }
  std::int64_t key_step() const { return key_step_; }
  std::int64_t row_step() const { return row_step_; }

  // The fraction of the call done when the key pass has finished tiles [0, end), or the query
  // pass tiles [0, end).
  double after_key_tiles(std::int64_t end) const { return key_share_ * done(key_pairs_, end); }
  double after_row_tiles(std::int64_t end) const { return key_share_ + (1.0 - key_share_) * done(row_pairs_, end); }

 private:
  double done(const std::vector<double>& pairs, std::int64_t end) const {
    if (!(total_ > 0)) return pairs.empty() ? 1.0 : double(end) / double(pairs.size());
    double d = 0;
    for (std::int64_t t = 0; t < end; ++t) d += pairs[std::size_t(t)];
    return std::min(1.0, d / total_);
  }

  double key_share_;
  std::int64_t key_step_ = 1, row_step_ = 1;
  std::vector<double> key_pairs_, row_pairs_;
  double total_ = 0;
};

}  // namespace detail
}  // namespace kattn
