// The slices of a whole bias (or of its gradient) [Bb, Hb, Nq, Nk] that a rank passes under the
// distributed schemes: its query rows (the ring's), its query heads (ulysses'), or both (hybrid's).
// Host-side copies for the MPI bias tests.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstddef>
#include <cstdint>

#include "dist_support.hpp"
#include "support.hpp"

namespace kattn {
namespace test {

// Rows (dim 2) of a bias-shaped array that `rank` holds under `layout`.
template <class B>
View4<B> bias_rows(const View4<B>& global, const SequenceLayout& layout, int rank) {
  const std::size_t Bb = global.extent(0), Hb = global.extent(1), Nk = global.extent(3);
  View4<B> local("bias_rows", Bb, Hb, layout.local_length(rank), Nk);
  auto g = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), global);
  auto l = Kokkos::create_mirror_view(local);
  for (const dist::Segment& s : layout.segments_of(rank))
    for (std::size_t b = 0; b < Bb; ++b)
      for (std::size_t h = 0; h < Hb; ++h)
        for (std::int64_t i = 0; i < s.length; ++i)
          for (std::size_t j = 0; j < Nk; ++j) l(b, h, s.local + i, j) = g(b, h, s.global + i, j);
  Kokkos::deep_copy(local, l);
  return local;
}

// Heads [first, first + count) (dim 1) of a bias-shaped array, summed into one head when `sum`
// (the gradient of a bias broadcast over the rank's heads).
inline View4<double> heads_of(const View4<double>& global, int first, int count, bool sum = false) {
  const std::size_t Bb = global.extent(0), Nq = global.extent(2), Nk = global.extent(3);
  View4<double> local("bias_heads", Bb, sum ? 1 : count, Nq, Nk);
  auto g = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), global);
  auto l = Kokkos::create_mirror_view(local);
  for (std::size_t b = 0; b < Bb; ++b)
    for (std::size_t i = 0; i < Nq; ++i)
      for (std::size_t j = 0; j < Nk; ++j) {
        double acc = 0;
        for (int h = 0; h < count; ++h) {
          if (sum)
            acc += g(b, first + h, i, j);
          else
            l(b, h, i, j) = g(b, first + h, i, j);
        }
        if (sum) l(b, 0, i, j) = acc;
      }
  Kokkos::deep_copy(local, l);
  return local;
}

// The whole bias [Bb, heads, Nq, Nk] of a bias [Bb, 1, Nq, Nk] broadcast over heads (same values).
inline View4<double> every_head(const View4<double>& one, int heads) {
  View4<double> all("bias_all_heads", one.extent(0), heads, one.extent(2), one.extent(3));
  auto h1 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), one);
  auto ha = Kokkos::create_mirror_view(all);
  for (std::size_t b = 0; b < all.extent(0); ++b)
    for (int h = 0; h < heads; ++h)
      for (std::size_t i = 0; i < all.extent(2); ++i)
        for (std::size_t j = 0; j < all.extent(3); ++j) ha(b, h, i, j) = h1(b, 0, i, j);
  Kokkos::deep_copy(all, ha);
  return all;
}

// A bf16 copy (values rounded once).
inline View4<bf16> narrowed_bf16(const View4<double>& v) {
  View4<bf16> out("bias16", v.extent(0), v.extent(1), v.extent(2), v.extent(3));
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  auto h16 = Kokkos::create_mirror_view(out);
  for (std::size_t i = 0; i < h.span(); ++i) h16.data()[i] = narrow<bf16>(h.data()[i]);
  Kokkos::deep_copy(out, h16);
  return out;
}

}  // namespace test
}  // namespace kattn
