// The backward's two per-row kernels around the tile passes, one team per (sequence, query
// position), a thread per head:
//   BackwardPrepare: D = rowsum(dO * O) and lse2 (the LSE in log2 units, +inf for a row that saw
//     no key) into the workspace; dQ = 0 where the key pass adds into it (key_chunks, atomic).
//   BackwardSumDq: dQ (chunk 0's sum, key_chunks) plus the partial dQ of chunks 1, 2, ... in chunk
//     order (with 1 chunk, or 0 for the atomic strategy, dQ stays in place), element d NaN for every
//     row of a KV head that has a key whose k[d] is not finite (backward_nonfinite.hpp).
// Every sum runs in a fixed order on one thread, so the results never depend on the schedule.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "kattn/backward_params.hpp"
#include "kattn/compat.hpp"
#include "kattn/detail/backward_nonfinite.hpp"
#include "kattn/detail/backward_workspace.hpp"
#include "kattn/core/state.hpp"

namespace kattn {
namespace detail {

template <class ExecSpace, class T>
struct BackwardPrepare {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;

  BackwardParams<T> p;
  BackwardWorkspace<T> ws;
  bool zero_dq = false;

  int league_size() const { return p.fwd.batch * static_cast<int>(p.fwd.q_len); }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    const int b = member.league_rank() / static_cast<int>(p.fwd.q_len);
    const std::int64_t i = member.league_rank() % p.fwd.q_len;
    if (i >= p.fwd.seq_q_len(b)) return;
    const int G = p.fwd.group_size();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, p.fwd.heads_q), [&](const int h) {
      const T* o = p.fwd.o_ptr(b, i, h);
      const T* dout = p.do_ptr(b, i, h);
      Kokkos::single(Kokkos::PerThread(member), [&]() {
        T di = 0;
        for (int d = 0; d < p.fwd.head_dim; ++d) di += dout[d] * o[d];
        const T lse = *p.fwd.lse_ptr(b, i, h);
        const std::int64_t row = ws.row(p.fwd, b, h / G, i * G + h % G);
        ws.di[row] = di;
        ws.lse2[row] = lse == -compat::infinity<T>() ? compat::infinity<T>() : lse * T(kLog2e);
      });
      if (zero_dq) {
        T* dq = p.dq_ptr(b, i, h);
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, p.fwd.head_dim), [&](const int d) { dq[d] = T(0); });
      }
    });
  }
};

template <class ExecSpace, class T>
struct BackwardSumDq {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;

  BackwardParams<T> p;
  BackwardWorkspace<T> ws;
  int chunks = 1;

  int league_size() const { return p.fwd.batch * static_cast<int>(p.fwd.q_len); }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    const int b = member.league_rank() / static_cast<int>(p.fwd.q_len);
    const std::int64_t i = member.league_rank() % p.fwd.q_len;
    if (i >= p.fwd.seq_q_len(b)) return;
    const int G = p.fwd.group_size();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, p.fwd.heads_q), [&](const int h) {
      T* dq = p.dq_ptr(b, i, h);
      const std::int64_t t = i * G + h % G;
      const int* bad_k = ws.bad_keys_of(p.fwd, b, h / G);
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, p.fwd.head_dim), [&](const int d) {
        if (chunks > 1) {
          T sum = dq[d];
          for (int c = 1; c < chunks; ++c) sum += ws.dq_row(p.fwd, c, b, h / G, t)[d];
          dq[d] = sum;
        }
        if (bad_k[d] != 0) dq[d] = nan_value<T>();
      });
    });
  }
};

}  // namespace detail
}  // namespace kattn
