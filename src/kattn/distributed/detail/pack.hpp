// Copies between the caller's strided arrays and the flat message buffers that travel over MPI.
// Internal.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>

#include "kattn/detail/strided_rows.hpp"

namespace kattn {
namespace dist {
namespace detail {

using ::kattn::detail::for_each_head_of_row;

template <class ExecSpace, class From, class To>
void copy_rows(const ExecSpace& space, Operand<const From> src, std::int64_t j0, Operand<To> dst, int batch,
               std::int64_t n, int heads, int dim) {
  kattn::detail::copy_rows(space, src, j0, dst, batch, n, heads, dim, "kattn::dist::copy_rows");
}

// The keys of a piece as a rank holds them: dense K/V buffers of `held` positions per sequence
// ([B][held][Hkv][D]), the piece from position `at` on.
template <class KV>
struct HeldKeys {
  const KV* k;
  const KV* v;
  std::int64_t held, at;
  // K and V from the piece's key j on, as the kernels read them.
  Operand<const KV> k_from(std::int64_t j, int heads_kv, int dim) const {
    return dense_operand(k, held, heads_kv, dim).from_row(at + j);
  }
  Operand<const KV> v_from(std::int64_t j, int heads_kv, int dim) const {
    return dense_operand(v, held, heads_kv, dim).from_row(at + j);
  }
};

// dst(b, j0 + j, h, :) += src(b, j, h, :) for j in [0, n); with `zero`, dst(b, j0 + j, h, :) = 0
// instead (src unused).
template <class ExecSpace, class T>
struct AddRows {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Operand<const T> src;
  Operand<T> dst;
  std::int64_t j0 = 0, n = 0;
  int heads = 0, dim = 0;
  bool zero = false;
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    for_each_head_of_row(member, n, heads, [&](const int b, const std::int64_t j, const int h) {
      T* d = dst.at(b, j0 + j, h);
      if (zero) {
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, dim), [&](const int x) { d[x] = T(0); });
      } else {
        const T* s = src.at(b, j, h);
        Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, dim), [&](const int x) { d[x] += s[x]; });
      }
    });
  }
};

template <class ExecSpace, class T>
void add_rows(const ExecSpace& space, Operand<const T> src, Operand<T> dst, std::int64_t j0, int batch, std::int64_t n,
              int heads, int dim) {
  if (batch == 0 || n == 0 || heads == 0) return;
  AddRows<ExecSpace, T> f{src, dst, j0, n, heads, dim, false};
  Kokkos::parallel_for("kattn::dist::add_rows",
                       Kokkos::TeamPolicy<ExecSpace>(space, static_cast<int>(batch * n), Kokkos::AUTO), f);
}

template <class ExecSpace, class T>
void zero_rows(const ExecSpace& space, Operand<T> dst, int batch, std::int64_t n, int heads, int dim) {
  if (batch == 0 || n == 0 || heads == 0) return;
  AddRows<ExecSpace, T> f{Operand<const T>{}, dst, 0, n, heads, dim, true};
  Kokkos::parallel_for("kattn::dist::zero_rows",
                       Kokkos::TeamPolicy<ExecSpace>(space, static_cast<int>(batch * n), Kokkos::AUTO), f);
}

}  // namespace detail
}  // namespace dist
}  // namespace kattn
