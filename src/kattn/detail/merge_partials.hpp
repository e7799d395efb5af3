// Merge of per-split partial states (o / l, lse) into the final rows, in split order, with the
// one merge of the state algebra. Fixed order: the result does not depend on the schedule.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>

#include "kattn/core/attention_params.hpp"
#include "kattn/core/state.hpp"
#include "kattn/detail/column_tiles.hpp"
#include "kattn/detail/merge_rows.hpp"

namespace kattn {
namespace detail {

// P: the problem's params (AttentionParams); partials and states in its accumulation type.
template <class ExecSpace, class P>
struct MergePartials {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using T = typename P::acc_type;

  P p;
  SplitWorkspace<T> ws;
  int splits = 1;

  // One team per (sequence, query position); threads over heads, vector lanes over dims.
  int league_size() const { return p.batch * static_cast<int>(p.q_len); }

  // The running o is split 0's partial, in place (read before written), so an output stored in
  // 16 bits is rounded once, at the end.
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    const int b = member.league_rank() / static_cast<int>(p.q_len);
    const std::int64_t i = member.league_rank() % p.q_len;
    if (i >= p.seq_q_len(b)) return;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, p.heads_q), [&](const int h) {
      const std::int64_t row = p.q_row(b, i) * p.heads_q + h;
      const auto part_o = [&](int s) { return ws.o + (s * ws.rows + row) * p.head_dim; };
      merge_row(
          member, splits, p.head_dim, part_o, [&](int s) { return ws.lse[s * ws.rows + row]; }, part_o(0),
          p.o_ptr(b, i, h), p.lse ? p.lse_ptr(b, i, h) : nullptr);
    });
  }
};

}  // namespace detail
}  // namespace kattn
