// A block-sparse attention mask (FlashAttention's block-sparse variant, FlashInfer's BSR masks):
// the (query block, key block) pairs, at `block` positions per block, whose scores are kept; every
// other block of S is skipped, its K and V never loaded. Held on the host in BSR form (block row
// pointers and sorted block column indices), per query head or one mask shared by all heads.
//
// Query position i sees key j iff block (i / block, j / block) is listed for its head, and the
// causal / window options allow it. Blocks count from position 0 of both sequences (top-left
// aligned, whatever Nq and Nk). A row that sees no key finishes as o = 0, lse = -inf.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kattn/errors.hpp"

namespace kattn {

class BlockMask {
 public:
  BlockMask() = default;

  // From BSR arrays: for head h (0 only when shared) and query block r, the listed key blocks are
  // indices[indptr[h * q_blocks + r] .. indptr[h * q_blocks + r + 1]), strictly increasing.
  //   heads: 1 (shared by all query heads) or the query head count; indptr: heads * q_blocks + 1
  //   entries, starting at 0, non-decreasing, ending at indices.size().
  static BlockMask from_bsr(std::int64_t block, int heads, std::int64_t q_blocks, std::int64_t k_blocks,
                            std::vector<std::int64_t> indptr, std::vector<std::int64_t> indices) {
    KATTN_REQUIRE(block >= 1, "block_mask: expected a block size >= 1, got ", block);
    KATTN_REQUIRE(heads >= 1, "block_mask: expected at least one head, got ", heads);
    KATTN_REQUIRE(q_blocks >= 0 && k_blocks >= 0, "block_mask: expected block counts >= 0, got ", q_blocks, " x ",
                  k_blocks);
    const std::int64_t rows = std::int64_t(heads) * q_blocks;
    KATTN_REQUIRE(std::int64_t(indptr.size()) == rows + 1, "block_mask: expected ", rows + 1,
                  " block row pointers (heads x query blocks + 1), got ", indptr.size());
    KATTN_REQUIRE(indptr[0] == 0, "block_mask: block row pointers must start at 0, got ", indptr[0]);
    for (std::int64_t r = 0; r < rows; ++r)
      KATTN_REQUIRE(indptr[r + 1] >= indptr[r], "block_mask: block row pointers must not decrease: indptr[", r + 1,
                    "] = ", indptr[r + 1], " < indptr[", r, "] = ", indptr[r]);
    KATTN_REQUIRE(indptr[rows] == std::int64_t(indices.size()), "block_mask: the last block row pointer is ",
                  indptr[rows], ", expected the number of column indices ", indices.size());
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t e = indptr[r]; e < indptr[r + 1]; ++e) {
        const std::int64_t c = indices[e];
        KATTN_REQUIRE(c >= 0 && c < k_blocks, "block_mask: column index ", c, " of head ", r / (q_blocks ? q_blocks : 1),
                      ", query block ", r % (q_blocks ? q_blocks : 1), " is out of range [0, ", k_blocks, ")");
        KATTN_REQUIRE(e == indptr[r] || c > indices[e - 1], "block_mask: column indices of head ",
                      r / (q_blocks ? q_blocks : 1), ", query block ", r % (q_blocks ? q_blocks : 1),
                      " must be strictly increasing (sorted, no duplicates), got ", indices[e - 1], " then ", c);
      }
    }
    BlockMask m;
    m.block_ = block;
    m.heads_ = heads;
    m.q_blocks_ = q_blocks;
    m.k_blocks_ = k_blocks;
    m.indptr_ = std::move(indptr);
    m.indices_ = std::move(indices);
    return m;
  }

  // From a dense boolean block matrix, row-major [heads, q_blocks, k_blocks] (heads = 1: shared):
  // nonzero = the block is kept.
  template <class Bool>
  static BlockMask from_dense(std::int64_t block, int heads, std::int64_t q_blocks, std::int64_t k_blocks,
                              const std::vector<Bool>& dense) {
    KATTN_REQUIRE(heads >= 1 && q_blocks >= 0 && k_blocks >= 0, "block_mask: expected a [heads >= 1, q_blocks >= 0, ",
                  "k_blocks >= 0] block matrix, got [", heads, ", ", q_blocks, ", ", k_blocks, "]");
    KATTN_REQUIRE(std::int64_t(dense.size()) == std::int64_t(heads) * q_blocks * k_blocks, "block_mask: a [", heads,
                  ", ", q_blocks, ", ", k_blocks, "] block matrix has ", std::int64_t(heads) * q_blocks * k_blocks,
                  " entries, got ", dense.size());
    std::vector<std::int64_t> indptr(1, 0), indices;
    for (std::int64_t r = 0; r < std::int64_t(heads) * q_blocks; ++r) {
      for (std::int64_t c = 0; c < k_blocks; ++c)
        if (dense[static_cast<std::size_t>(r * k_blocks + c)]) indices.push_back(c);
      indptr.push_back(static_cast<std::int64_t>(indices.size()));
    }
    return from_bsr(block, heads, q_blocks, k_blocks, std::move(indptr), std::move(indices));
  }

  std::int64_t block() const { return block_; }
  int heads() const { return heads_; }  // 1: shared by every query head
  std::int64_t q_blocks() const { return q_blocks_; }
  std::int64_t k_blocks() const { return k_blocks_; }
  const std::vector<std::int64_t>& indptr() const { return indptr_; }
  const std::vector<std::int64_t>& indices() const { return indices_; }
  bool empty() const { return indptr_.empty(); }  // default-constructed: no mask at all

  // Whether query head h (any head when shared), query block r sees key block c.
  bool listed(int h, std::int64_t r, std::int64_t c) const {
    const std::int64_t row = (heads_ == 1 ? 0 : h) * q_blocks_ + r;
    std::int64_t lo = indptr_[row], hi = indptr_[row + 1];
    while (lo < hi) {
      const std::int64_t mid = lo + (hi - lo) / 2;
      if (indices_[mid] < c)
        lo = mid + 1;
      else
        hi = mid;
    }
    return lo < indptr_[row + 1] && indices_[lo] == c;
  }

  // Listed blocks over all blocks (per head when not shared, averaged).
  double density() const {
    const double all = double(heads_) * double(q_blocks_) * double(k_blocks_);
    return all > 0 ? double(indices_.size()) / all : 0.0;
  }

  // The dense [heads, q_blocks, k_blocks] boolean matrix (1 = kept).
  std::vector<std::uint8_t> to_dense() const {
    std::vector<std::uint8_t> d(static_cast<std::size_t>(std::int64_t(heads_) * q_blocks_ * k_blocks_), 0);
    for (std::int64_t r = 0; r < std::int64_t(heads_) * q_blocks_; ++r)
      for (std::int64_t e = indptr_[r]; e < indptr_[r + 1]; ++e) d[static_cast<std::size_t>(r * k_blocks_ + indices_[e])] = 1;
    return d;
  }

 private:
  std::int64_t block_ = 0;
  int heads_ = 1;
  std::int64_t q_blocks_ = 0, k_blocks_ = 0;
  std::vector<std::int64_t> indptr_, indices_;
};

// Refuses a mask that does not fit a problem of `heads_q` query heads, Nq queries, Nk keys.
inline void check_block_mask(const BlockMask& mask, int heads_q, std::int64_t q_len, std::int64_t kv_len) {
  KATTN_REQUIRE(!mask.empty(), "block_mask: the mask is empty (default-constructed); build it with BlockMask::from_bsr, ",
                "from_dense or make_block_mask");
  const std::int64_t B = mask.block();
  KATTN_REQUIRE(mask.heads() == 1 || mask.heads() == heads_q, "block_mask: expected 1 head (shared) or ", heads_q,
                " (one per query head), got ", mask.heads());
  KATTN_REQUIRE(mask.q_blocks() == (q_len + B - 1) / B, "block_mask: expected ", (q_len + B - 1) / B,
                " query blocks (", q_len, " queries / block ", B, ", rounded up), got ", mask.q_blocks());
  KATTN_REQUIRE(mask.k_blocks() == (kv_len + B - 1) / B, "block_mask: expected ", (kv_len + B - 1) / B,
                " key blocks (", kv_len, " keys / block ", B, ", rounded up), got ", mask.k_blocks());
}

}  // namespace kattn
