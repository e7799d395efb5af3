// The grid scheme's schedule (grid.cpp) and traffic (traffic.cpp), one arithmetic for both: who
// computes which (query shard, key shard) block, which query shards and which keys travel, and in
// deterministic mode the partials each block sends to its query rows' owner, in the order the owner
// folds them. Host-side, no communication: every rank computes the same plan. Internal.
//
// The P ranks form a rows x cols grid (DistOptions::grid; rank g * cols + c is row g, column c)
// and hold the ring's shards (sharded_layout over P). Rank (g, c) computes the queries of its
// column's shards, shards (0, c) .. (rows - 1, c), against the keys of its row's shards, (g, 0) ..
// (g, cols - 1): every (query shard, key shard) pair exactly once, at (row of the key shard, column
// of the query shard). Query shards travel along the columns, keys along the rows, and the blocks'
// results come back along the columns to the query shards' owners.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "kattn/core/key_window.hpp"
#include "kattn/distributed/detail/shard_math.hpp"
#include "kattn/distributed/layout.hpp"
#include "kattn/distributed/options.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace dist {
namespace detail {

// One deterministic partial: query rows [row, row + rows) of query segment qs (rows relative to the
// segment) against the global key chunk [key, key + keys), which lies in `piece` (a run of keys the
// computing rank holds) at `at` keys from its start.
struct GridItem {
  Segment qs;
  std::int64_t row = 0, rows = 0;
  Segment piece;
  std::int64_t at = 0, keys = 0;
};

// One block of the deterministic backward: query rows [cq, cq + nq) of segment qs against keys
// [ck, ck + nk) of `piece`, each a global chunk (or its end): the blocks of the ring's tour.
struct GridBlock {
  Segment qs;
  std::int64_t cq = 0, nq = 0;
  Segment piece;
  std::int64_t ck = 0, nk = 0;
  std::int64_t q_global() const { return qs.global + cq; }
  std::int64_t k_global() const { return piece.global + ck; }
};

// The orders in which the deterministic backward adds the blocks: every dQ row its key chunks in
// ascending order, every dK/dV row its query chunks in descending order, as the ring's tour does.
inline bool dq_order(const GridBlock& a, const GridBlock& b) {
  return a.k_global() != b.k_global() ? a.k_global() < b.k_global() : a.q_global() < b.q_global();
}
inline bool dkv_order(const GridBlock& a, const GridBlock& b) {
  return a.q_global() != b.q_global() ? a.q_global() > b.q_global() : a.k_global() < b.k_global();
}

// Query rows per launch: as the ring cuts them (its piece_rows), so that the launches stay small.
inline std::int64_t grid_piece_rows(std::int64_t seg_len) {
  constexpr std::int64_t kMinPieceRows = 2048, kPiecesPerSegment = 8;
  return std::max<std::int64_t>(kMinPieceRows, (seg_len + kPiecesPerSegment - 1) / kPiecesPerSegment);
}

class GridPlan {
 public:
  GridPlan(const Options& opt, std::int64_t Nq, std::int64_t Nk, int ranks, const DistOptions& d)
      : opt_(opt), Nq_(Nq), Nk_(Nk), align_(shard_align(d)), chunk_(chunk_of(d)) {
    const DistOptions::GridShape shape = grid_shape(ranks, d);
    R_ = shape.rows, C_ = shape.cols;
    ql_ = sharded_layout(Nq, ranks, d);
    kl_ = sharded_layout(Nk, ranks, d);
    for (int c = 0; c < C_; ++c) {
      std::vector<Segment> segs;
      for (int g = 0; g < R_; ++g)
        for (const Segment& s : ql_.segments_of(at(g, c))) segs.push_back(s);
      col_q_.push_back(std::move(segs));
    }
  }

  int rows() const { return R_; }
  int cols() const { return C_; }
  int at(int row, int col) const { return row * C_ + col; }
  int row_of(int rank) const { return rank / C_; }
  int col_of(int rank) const { return rank % C_; }
  const SequenceLayout& q_layout() const { return ql_; }
  const SequenceLayout& kv_layout() const { return kl_; }
  std::int64_t Nq() const { return Nq_; }
  std::int64_t Nk() const { return Nk_; }
  std::int64_t chunk() const { return chunk_; }
  const Options& options() const { return opt_; }

  // Whether some query of shard `qrank` sees some key of row `row`'s shards: then rank
  // (row, column of qrank) computes that block (and receives the shard's queries).
  bool sees(int qrank, int row) const {
    for (const Segment& q : ql_.segments_of(qrank))
      for (int c = 0; c < C_; ++c)
        for (const Segment& k : kl_.segments_of(at(row, c)))
          if (!visible_keys(shard_options(opt_, q.global, q.length, Nq_, k.global, k.length, Nk_), q.length, k.length)
                   .empty())
            return true;
    return false;
  }

  // The keys of key segment ks that the queries of column `col` see, as pieces (whole chunks in
  // deterministic mode), in global order.
  std::vector<Segment> pieces_of(const Segment& ks, int col) const {
    return needed_keys_of(opt_, col_q_[col], Nq_, Nk_, ks, align_);
  }
  // Every piece of key shard `owner` that the queries of column `col` see: what `owner` sends the
  // rank of its row in column `col`, in the order it sends them.
  std::vector<Segment> pieces(int owner, int col) const {
    std::vector<Segment> out;
    for (const Segment& ks : kl_.segments_of(owner))
      for (const Segment& p : pieces_of(ks, col)) out.push_back(p);
    return out;
  }

  // Deterministic mode: the partials of key segment ks for the rows of query shard `qrank`, in the
  // order its owner folds them (the ring's order: pieces, then query segments, then chunks).
  std::vector<GridItem> items(const Segment& ks, int qrank) const {
    std::vector<GridItem> out;
    for (const Segment& piece : pieces_of(ks, col_of(qrank)))
      for (const Segment& qs : ql_.segments_of(qrank))
        for_each_chunk_rows(
            opt_, qs, piece, Nq_, Nk_, chunk_, grid_piece_rows(qs.length),
            [&](std::int64_t i, std::int64_t n, std::int64_t j0, std::int64_t keys) {
              out.push_back(GridItem{qs, i, n, piece, j0, keys});
            },
            [] {});
    return out;
  }
  // Deterministic backward: the blocks of query shard qrank against key shard kown that some
  // query sees (the keys those the column of qrank receives), in no particular order.
  std::vector<GridBlock> blocks(int qrank, int kown) const {
    std::vector<GridBlock> out;
    for (const Segment& ks : kl_.segments_of(kown))
      for (const Segment& piece : pieces_of(ks, col_of(qrank)))
        for (const Segment& qs : ql_.segments_of(qrank))
          for (std::int64_t cq = 0; cq < qs.length; cq += chunk_) {
            const std::int64_t nq = std::min(chunk_, qs.length - cq);
            // The keys the chunk's rows see form one interval: every chunk it touches has a visible pair.
            const KeyRange seen = visible_keys(
                shard_options(opt_, qs.global + cq, nq, Nq_, piece.global, piece.length, Nk_), nq, piece.length);
            if (seen.empty()) continue;
            for (std::int64_t ck = seen.lo / chunk_ * chunk_; ck <= seen.hi; ck += chunk_)
              out.push_back(GridBlock{qs, cq, nq, piece, ck, std::min(chunk_, piece.length - ck)});
          }
    return out;
  }

  // Query rows over every item of key row `row` for shard qrank: its stream's length in rows.
  std::int64_t stream_rows(int row, int qrank) const {
    std::int64_t n = 0;
    for (const Segment& ks : kl_.segments())
      if (row_of(ks.owner) == row)
        for (const GridItem& it : items(ks, qrank)) n += it.rows;
    return n;
  }

 private:
  Options opt_;
  std::int64_t Nq_, Nk_, align_, chunk_;
  int R_ = 1, C_ = 1;
  SequenceLayout ql_, kl_;
  std::vector<std::vector<Segment>> col_q_;
};

}  // namespace detail
}  // namespace dist
}  // namespace kattn
