// Kokkos kernels that keep a running state per local query row and fold finished partials into
// it in a given order (ring steps, or global key chunks), then finish the rows, with the one merge
// of partial states (detail/merge_rows.hpp). Internal.
//
// Rows are (sequence b, local query position i, query head h). The accumulator's o lives where
// the caller says (the user's o for ring attention, a packed record for the decode chain); m
// and l beside it. Partials are in the workspace layout of the tiled kernel:
//   part_o[((s * rows) + (b * q_len + i) * heads + h) * D + d],  part_lse[s * rows + ...]
// for partial s of `count`, with q_len the partials' query positions (a segment of the rows).
#pragma once

#include <Kokkos_Core.hpp>
#include <cstdint>

#include "kattn/compat.hpp"
#include "kattn/detail/merge_rows.hpp"
#include "kattn/core/operand.hpp"
#include "kattn/core/state.hpp"

namespace kattn {
namespace dist {
namespace detail {

template <class T>
struct RowAccumulator {
  Operand<T> o;     // the rows (b, i, h, :)
  Operand<T> m, l;  // their states (b, i, h)
  int batch = 0, heads = 0, head_dim = 0;
  std::int64_t q_len = 0;  // local query positions
};

// The accumulator of rows o (batch x n rows of heads x dim) with their (m, l) dense in ml
// (2 x batch x n x heads values).
template <class T>
RowAccumulator<T> accumulator(const Operand<T>& o, T* ml, int batch, std::int64_t n, int heads, int dim) {
  RowAccumulator<T> a;
  a.o = o;
  a.m = dense_operand(ml, n, heads, 1);
  a.l = dense_operand(ml + std::int64_t(batch) * n * heads, n, heads, 1);
  a.batch = batch, a.heads = heads, a.head_dim = dim, a.q_len = n;
  return a;
}

template <class T>
struct PartialRows {
  const T* o = nullptr;
  const T* lse = nullptr;
  std::int64_t q_len = 0;    // query positions the partials cover
  std::int64_t q_first = 0;  // their first local position in the accumulator
  int count = 1;             // partials, folded in order 0 .. count - 1
  KOKKOS_INLINE_FUNCTION std::int64_t rows(int batch, int heads) const { return std::int64_t(batch) * q_len * heads; }
};

// Accumulators empty: m = -inf, l = 0, o = 0.
template <class ExecSpace, class T>
struct InitRows {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  RowAccumulator<T> acc;
  int league_size() const { return acc.batch * static_cast<int>(acc.q_len); }
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    const int b = member.league_rank() / static_cast<int>(acc.q_len);
    const std::int64_t i = member.league_rank() % acc.q_len;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, acc.heads), [&](const int h) {
      T* o = acc.o.at(b, i, h);
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, acc.head_dim), [&](const int d) { o[d] = T(0); });
      Kokkos::single(Kokkos::PerThread(member), [&]() {
        const RowState<T> e = RowState<T>::empty();
        *acc.m.at(b, i, h) = e.m;
        *acc.l.at(b, i, h) = e.l;
      });
    });
  }
};

// Folds partials 0 .. count - 1, in that order, into the accumulator rows they cover.
template <class ExecSpace, class T>
struct FoldPartials {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  RowAccumulator<T> acc;
  PartialRows<T> part;
  int league_size() const { return acc.batch * static_cast<int>(part.q_len); }
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    const int b = member.league_rank() / static_cast<int>(part.q_len);
    const std::int64_t ip = member.league_rank() % part.q_len;
    const std::int64_t i = part.q_first + ip;
    const std::int64_t rows = part.rows(acc.batch, acc.heads);
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, acc.heads), [&](const int h) {
      T* o = acc.o.at(b, i, h);
      T *m = acc.m.at(b, i, h), *l = acc.l.at(b, i, h);
      RowState<T> st{*m, *l};
      const std::int64_t row = (std::int64_t(b) * part.q_len + ip) * acc.heads + h;
      kattn::detail::fold_parts(
          member, st, o, part.count, acc.head_dim, [&](int s) { return part.o + (s * rows + row) * acc.head_dim; },
          [&](int s) { return part.lse[s * rows + row]; });
      Kokkos::single(Kokkos::PerThread(member), [&]() {
        *m = st.m;
        *l = st.l;
      });
    });
  }
};

// Finishes every row: o <- o / l in place (0 for a row that saw no key), lse (natural log) to
// `lse` when set.
template <class ExecSpace, class T>
struct FinishRows {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  RowAccumulator<T> acc;
  Operand<T> lse{};
  // Optional copy of the finished o elsewhere (the user's o when the accumulator is a record).
  Operand<T> out{};
  int league_size() const { return acc.batch * static_cast<int>(acc.q_len); }
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    const int b = member.league_rank() / static_cast<int>(acc.q_len);
    const std::int64_t i = member.league_rank() % acc.q_len;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, acc.heads), [&](const int h) {
      const T* o = acc.o.at(b, i, h);
      kattn::detail::finish_row(member, RowState<T>{*acc.m.at(b, i, h), *acc.l.at(b, i, h)}, o, acc.head_dim,
                                out ? out.at(b, i, h) : acc.o.at(b, i, h), lse ? lse.at(b, i, h) : nullptr);
    });
  }
};

template <class ExecSpace, class Functor>
void launch_rows(const ExecSpace& space, const char* name, const Functor& f) {
  if (f.league_size() == 0) return;
  Kokkos::parallel_for(name, Kokkos::TeamPolicy<ExecSpace>(space, f.league_size(), Kokkos::AUTO), f);
}

}  // namespace detail
}  // namespace dist
}  // namespace kattn
