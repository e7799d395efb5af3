// Row copies between strided [B, n, H, D] arrays: the caller's tensors, the MPI layer's flat
// message buffers, head-major copies. Internal.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <type_traits>

#include "kattn/core/operand.hpp"
#include "kattn/core/storage.hpp"

namespace kattn {
namespace detail {

// f(b, j, h) for every head h of the row (b, j) that a team of a [batch x n] league stands for,
// the heads over the team's threads.
template <class Member, class F>
KOKKOS_INLINE_FUNCTION void for_each_head_of_row(const Member& member, std::int64_t n, int heads, const F& f) {
  const int b = member.league_rank() / static_cast<int>(n);
  const std::int64_t j = member.league_rank() % n;
  Kokkos::parallel_for(Kokkos::TeamThreadRange(member, heads), [&](const int h) { f(b, j, h); });
}

// dst(b, j, h, :) = src(b, j0 + j, h, :) for j in [0, n), widened or rounded once (to nearest even)
// when the types differ: 16-bit storage to float and back around a float computation.
template <class ExecSpace, class From, class To>
struct CopyRows {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Operand<const From> src;
  Operand<To> dst;
  std::int64_t j0 = 0, n = 0;
  int heads = 0, dim = 0;
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    for_each_head_of_row(member, n, heads, [&](const int b, const std::int64_t j, const int h) {
      const From* s = src.at(b, j0 + j, h);
      To* d = dst.at(b, j, h);
      if constexpr (std::is_same_v<From, To>)
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, dim), [&](const int x) { d[x] = s[x]; });
      else
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, dim),
                             [&](const int x) { d[x] = narrow<To>(widen(s[x])); });
    });
  }
};

// label: the kernel's, in its caller's area ("kattn::<area>::<step>").
template <class ExecSpace, class From, class To>
void copy_rows(const ExecSpace& space, Operand<const From> src, std::int64_t j0, Operand<To> dst, int batch,
               std::int64_t n, int heads, int dim, const char* label) {
  if (batch == 0 || n == 0 || heads == 0) return;
  CopyRows<ExecSpace, From, To> f{src, dst, j0, n, heads, dim};
  Kokkos::parallel_for(label, Kokkos::TeamPolicy<ExecSpace>(space, static_cast<int>(batch * n), Kokkos::AUTO), f);
}

}  // namespace detail
}  // namespace kattn
