// Where a query row stands for the score variants that depend on it (ALiBi's distance, the bias
// tensor's row), written once for every kernel. A row is query `position` of sequence `seq`, a
// problem of q_len queries over kv_len keys: in every call the row's own sequence, except in a
// cascade's prefix pass (detail/cascade.hpp), where the queries of many requests are the rows of
// one sequence over the prefix that they share, and each row keeps the place it has in its own
// request (prefix + suffix). No Kokkos here.
#pragma once

#include <cstdint>

#include "kattn/core/host_device.hpp"

namespace kattn {

// Query `position` of sequence `seq`, which has q_len queries and kv_len keys.
struct QueryAt {
  int seq = 0;
  std::int64_t position = 0, q_len = 0, kv_len = 0;
};

// The requests whose queries are the rows of one sequence: row i is query i - indptr[r] of
// request r (indptr[r] <= i < indptr[r + 1]), whose own keys are kv_len[r], the sequence's keys
// first (the shared prefix, then the request's suffix). Inactive (null): the rows are the
// sequence's own.
struct RequestRows {
  const std::int64_t* indptr = nullptr;  // [count + 1], from 0, in the kernels' memory
  const std::int64_t* kv_len = nullptr;  // [count]: each request's keys, the shared ones included
  int count = 0;
  std::int64_t longest = 0;  // the queries of the longest request

  KATTN_CORE_INLINE bool active() const { return indptr != nullptr; }

  // Row i (0 <= i < indptr[count]) as a query of its request: the last r with indptr[r] <= i, which
  // skips requests without queries. O(log count).
  KATTN_CORE_INLINE QueryAt at(std::int64_t i) const {
    int lo = 0, hi = count - 1;  // indptr[lo] <= i < indptr[hi + 1]
    while (lo < hi) {
      const int mid = lo + (hi - lo + 1) / 2;
      if (indptr[mid] <= i)
        lo = mid;
      else
        hi = mid - 1;
    }
    return QueryAt{lo, i - indptr[lo], indptr[lo + 1] - indptr[lo], kv_len[lo]};
  }
};

}  // namespace kattn
