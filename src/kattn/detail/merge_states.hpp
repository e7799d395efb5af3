// The merge kernel of kattn::merge (merge.hpp): parts from up to two sources, strided, merged per
// row and head with merge_row (merge_rows.hpp). Parts' o are stored in P (the output's type S, or
// its accumulation type), every lse in the accumulation type.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <type_traits>

#include "kattn/core/storage.hpp"
#include "kattn/detail/merge_rows.hpp"

namespace kattn {
namespace detail {

// `count` parts of one source: part s, row n, head h at o + s * o_part + n * o_row + h * o_head.
template <class P, class Acc>
struct PartSource {
  const P* o = nullptr;
  const Acc* lse = nullptr;
  int count = 0;
  std::int64_t o_part = 0, o_row = 0, o_head = 0;
  std::int64_t lse_part = 0, lse_row = 0, lse_head = 0;
};

// One team per row; threads over heads, lanes over the head dim. Parts of `a`, then of `b`.
template <class ExecSpace, class P, class S>
struct MergeStates {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  using Acc = accumulate_t<S>;
  using ScratchRow =
      Kokkos::View<Acc*, typename ExecSpace::scratch_memory_space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  // An output stored in 16 bits keeps its running o in a float row of the thread's scratch, so it
  // is rounded once, at the end; any other output is its own running o.
  static constexpr bool running_o_in_scratch = !std::is_same<S, Acc>::value;

  PartSource<P, Acc> a, b;
  S* o = nullptr;
  std::int64_t o_row = 0, o_head = 0;
  Acc* lse = nullptr;  // may be null
  std::int64_t lse_row = 0, lse_head = 0;
  int heads = 0, head_dim = 0;

  // Level-0 scratch bytes per thread.
  std::size_t scratch_per_thread() const { return running_o_in_scratch ? ScratchRow::shmem_size(head_dim) : 0; }

  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    const std::int64_t n = member.league_rank();
    Acc* scratch = nullptr;
    if (running_o_in_scratch) scratch = ScratchRow(member.thread_scratch(0), head_dim).data();
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, heads), [&](const int h) {
      const auto part = [&](int s) -> const PartSource<P, Acc>& { return s < a.count ? a : b; };
      const auto index = [&](int s) { return s < a.count ? s : s - a.count; };
      S* out = o + n * o_row + h * o_head;
      Acc* acc = nullptr;
      if constexpr (running_o_in_scratch)
        acc = scratch;
      else
        acc = out;
      merge_row(
          member, a.count + b.count, head_dim,
          [&](int s) {
            const PartSource<P, Acc>& src = part(s);
            return src.o + index(s) * src.o_part + n * src.o_row + h * src.o_head;
          },
          [&](int s) {
            const PartSource<P, Acc>& src = part(s);
            return src.lse[index(s) * src.lse_part + n * src.lse_row + h * src.lse_head];
          },
          acc, out, lse ? lse + n * lse_row + h * lse_head : nullptr);
    });
  }
};

}  // namespace detail
}  // namespace kattn
