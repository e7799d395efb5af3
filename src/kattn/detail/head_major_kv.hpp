// K and V of interleaved heads ([B, N, H, D], H > 1: one head's rows H D values apart, 4 KB for 8
// heads of 128 floats) copied head-major ([B, H, N, D]) before a long forward on a host backend,
// in float and 16-bit storage.
// A key tile's rows then fill consecutive L1 sets instead of the few that addresses 4 KB apart
// share (and one page per row), which costs the tile loop 4-6% of its rate at 8 and 16 heads
// (perf/RESULTS.md, "Many heads: K and V copied head-major"). The copy reads and writes K and V
// once; the kernel then reads each key tile once per query tile, so it pays only for long
// queries, and it is made only within a memory budget. The kernel reads the same values: the
// results' bits do not change.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <exception>
#include <type_traits>

#include "kattn/compat.hpp"
#include "kattn/core/attention_params.hpp"
#include "kattn/detail/memory_check.hpp"
#include "kattn/detail/strided_rows.hpp"
#include "kattn/workspace.hpp"

namespace kattn {
namespace detail {

// Query rows per KV head (queries x GQA group) from which the copy pays. Its cost grows with the
// keys, the forward's with keys x rows: measured on a Zen 4 core (8 heads of 128 floats), the copy
// and the page faults of its fresh memory cost more than it saves at 2048 rows (0.97 of the rate
// without it) and save 3.7% at 4096.
constexpr std::int64_t kHeadMajorMinRows = 4096;

// The head-major copies a forward reads instead of the caller's K and V (empty when not made).
template <class ExecSpace, class KV>
struct HeadMajorKV {
  Kokkos::View<KV*, typename ExecSpace::memory_space> k, v;
  explicit operator bool() const { return k.extent(0) > 0; }
};

// Whether a dense forward of p on this backend reads head-major copies (see above).
template <class ExecSpace, class Q, class T, class KV>
bool wants_head_major(const AttentionParams<Q, T, KV>& p) {
  if constexpr (!std::is_same_v<typename ExecSpace::memory_space, Kokkos::HostSpace>) {
    return false;  // GPUs have no such cache sets to alias
  } else if constexpr (sizeof(KV) > 4) {
    return false;  // double: the same rate with the copy as without (within the noise), at twice the bytes
  } else {
    if (p.heads_kv < 2 || p.kv_len == 0 || p.q_len * p.group_size() < kHeadMajorMinRows) return false;
    if (p.k.stride_seq == p.head_dim && p.v.stride_seq == p.head_dim) return false;  // already head-major
    return fits_copy_budget<Kokkos::HostSpace>(2 * std::uint64_t(p.batch) * p.heads_kv * p.kv_len * p.head_dim *
                                               sizeof(KV));
  }
}

// Makes the copies (from ws when not null) and points p's K and V at them; leaves p alone when
// !wants_head_major(p) or when their memory cannot be had.
template <class ExecSpace, class Q, class T, class KV>
HeadMajorKV<ExecSpace, KV> make_head_major(const ExecSpace& space, AttentionParams<Q, T, KV>& p, Workspace* ws) {
  using Mem = typename ExecSpace::memory_space;
  HeadMajorKV<ExecSpace, KV> c;
  if (!wants_head_major<ExecSpace>(p)) return c;
  compat::ScopedRegion region("kattn::attention");
  const std::int64_t rows = std::int64_t(p.batch) * p.heads_kv * p.kv_len;
  try {
    c.k = take_buffer<KV, Mem>(ws, space, "kattn::attention::head_major_k", rows * p.head_dim);
    c.v = take_buffer<KV, Mem>(ws, space, "kattn::attention::head_major_v", rows * p.head_dim);
  } catch (const std::exception&) {
    return HeadMajorKV<ExecSpace, KV>{};  // no memory for the copies: the kernel reads K and V in place
  }
  const std::int64_t per_head = p.kv_len * p.head_dim, per_batch = p.heads_kv * per_head;
  const Operand<KV> k_copy(c.k.data(), per_batch, p.head_dim, per_head),
      v_copy(c.v.data(), per_batch, p.head_dim, per_head);
  const auto copy = [&](const Operand<const KV>& from, const Operand<KV>& to) {
    copy_rows(space, from, 0, to, p.batch, p.kv_len, p.heads_kv, p.head_dim, "kattn::attention::head_major_kv");
  };
  copy(p.k, k_copy);
  copy(p.v, v_copy);
  p.k = k_copy, p.v = v_copy;
  return c;
}

}  // namespace detail
}  // namespace kattn
