// Ready-made block masks (block_mask.hpp) built on the host from a few parameters, the sparse
// patterns of long-sequence models; components combine as a union of kept blocks:
//
//   local:W       a band: each query block sees the key blocks within W blocks of its diagonal
//                 block (Longformer's sliding window, at block granularity)
//   global:G      the first G key blocks are seen by every query block, and the first G query
//                 blocks see every key block (Longformer/BigBird global tokens)
//   strided:S     key blocks whose distance to the diagonal block is a multiple of S (the
//                 Sparse Transformer's strided pattern)
//   dilated:W:D   W blocks on each side of the diagonal, D blocks apart (dilated sliding window)
//
// The diagonal block of query block r is key block r + (k_blocks - q_blocks), aligned at the
// bottom right like the causal mask, so a band follows the diagonal when Nk > Nq (decode). The
// patterns are symmetric; add Options::causal to keep the lower half.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "kattn/block_mask.hpp"
#include "kattn/errors.hpp"

namespace kattn {

struct BlockPattern {
  std::int64_t local = -1;        // band half-width in blocks; -1 = none
  std::int64_t global = 0;        // global blocks
  std::int64_t stride = 0;        // 0 = none
  std::int64_t dilated_width = -1;  // blocks per side; -1 = none
  std::int64_t dilation = 1;

  bool none() const { return local < 0 && global == 0 && stride == 0 && dilated_width < 0; }

  // Whether query block r sees key block c, with d the diagonal offset k_blocks - q_blocks.
  bool keeps(std::int64_t r, std::int64_t c, std::int64_t d) const {
    const std::int64_t dist = c - (r + d);
    const std::int64_t adist = dist < 0 ? -dist : dist;
    if (local >= 0 && adist <= local) return true;
    if (c < global || r < global) return true;
    if (stride > 0 && adist % stride == 0) return true;
    if (dilated_width >= 0 && adist % dilation == 0 && adist / dilation <= dilated_width) return true;
    return false;
  }
};

// The mask of `pattern` for Nq queries and Nk keys at `block` positions per block, shared by all
// heads.
inline BlockMask make_block_mask(const BlockPattern& pattern, std::int64_t block, std::int64_t q_len,
                                 std::int64_t kv_len) {
  KATTN_REQUIRE(block >= 1, "mask_block: expected a block size >= 1, got ", block);
  KATTN_REQUIRE(q_len >= 0 && kv_len >= 0, "block_mask: expected lengths >= 0, got ", q_len, ", ", kv_len);
  const std::int64_t qb = (q_len + block - 1) / block, kb = (kv_len + block - 1) / block;
  std::vector<std::int64_t> indptr(1, 0), indices;
  for (std::int64_t r = 0; r < qb; ++r) {
    for (std::int64_t c = 0; c < kb; ++c)
      if (pattern.keeps(r, c, kb - qb)) indices.push_back(c);
    indptr.push_back(static_cast<std::int64_t>(indices.size()));
  }
  return BlockMask::from_bsr(block, 1, qb, kb, std::move(indptr), std::move(indices));
}

namespace detail {

inline std::int64_t pattern_number(const std::string& text, const std::string& part, std::int64_t min) {
  char* end = nullptr;
  const long long v = text.empty() ? 0 : std::strtoll(text.c_str(), &end, 10);
  KATTN_REQUIRE(!text.empty() && end && *end == '\0' && v >= min, "pattern: expected an integer >= ", min, " in '",
                part, "', got '", text, "'");
  return static_cast<std::int64_t>(v);
}

}  // namespace detail

// Parses "local:W,global:G,strided:S,dilated:W:D" (any non-empty subset, in any order, each at
// most once) into a BlockPattern; throws kattn::Error naming "pattern" otherwise.
inline BlockPattern parse_block_pattern(const std::string& text) {
  BlockPattern p;
  KATTN_REQUIRE(!text.empty(), "pattern: expected components like local:W,global:G,strided:S,dilated:W:D, got ''");
  std::vector<std::string> seen;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string part = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    std::vector<std::string> f;
    std::size_t s = 0;
    while (true) {
      const std::size_t colon = part.find(':', s);
      f.push_back(part.substr(s, colon == std::string::npos ? std::string::npos : colon - s));
      if (colon == std::string::npos) break;
      s = colon + 1;
    }
    const std::string& name = f[0];
    for (const std::string& n : seen) KATTN_REQUIRE(n != name, "pattern: component '", name, "' given twice");
    seen.push_back(name);
    if (name == "local" && f.size() == 2) {
      p.local = detail::pattern_number(f[1], part, 0);
    } else if (name == "global" && f.size() == 2) {
      p.global = detail::pattern_number(f[1], part, 1);
    } else if (name == "strided" && f.size() == 2) {
      p.stride = detail::pattern_number(f[1], part, 1);
    } else if (name == "dilated" && f.size() == 3) {
      p.dilated_width = detail::pattern_number(f[1], part, 0);
      p.dilation = detail::pattern_number(f[2], part, 1);
    } else {
      throw Error(detail::concat("pattern: unknown component '", part,
                                 "'; expected local:W, global:G, strided:S or dilated:W:D, comma-separated"));
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return p;
}

}  // namespace kattn
