// Attention sinks (Options::sinks) at the front doors: the sink of head h is the state
// (m = sink, l = 1, o = 0) merged once into each finished row (core/state.hpp, finish_with_sink),
// after every tile, split, cascade part and rank has been merged, so every path takes it from this
// one pass: lse' = log(exp(lse) + exp(sink)), o' = o exp(lse - lse'). Its cost is one read and
// write of o and lse. The backward needs nothing more for dq, dk and dv (P = exp(S - lse') leaves
// the sink's mass out, and D = dO . O is unchanged); the sinks' own gradient is sink_gradients.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdint>
#include <vector>

#include "kattn/compat.hpp"
#include "kattn/core/attention_params.hpp"
#include "kattn/core/state.hpp"
#include "kattn/core/storage.hpp"
#include "kattn/detail/exact_sum.hpp"
#include "kattn/detail/per_head.hpp"
#include "kattn/errors.hpp"
#include "kattn/options.hpp"
#include "kattn/workspace.hpp"

namespace kattn {
namespace detail {

// The sinks fit the call: none, or one per query head.
inline void require_sinks(const Options& opt, std::int64_t heads_q) {
  require_per_head(opt.sinks, heads_q, "sinks", "logit");
}

// The sinks in memory of ExecSpace as T, multiplied by `factor` (kLog2e: the kernels' log2 units).
template <class T, class ExecSpace>
Kokkos::View<T*, typename ExecSpace::memory_space> device_sinks(const ExecSpace& space,
                                                                const std::vector<double>& sinks, double factor) {
  return per_head_values<T>(space, sinks, factor, "kattn::sinks");
}

// Merges head h's sink into finished row (b, i, h): o and lse of p in place.
template <class ExecSpace, class P>
struct SinkPass {
  using Acc = typename P::acc_type;
  using Q = typename P::q_type;
  P p;
  Kokkos::View<const Acc*, typename ExecSpace::memory_space> sinks_log2;

  KOKKOS_INLINE_FUNCTION void operator()(const int b, const std::int64_t i, const int h) const {
    if (i >= p.seq_q_len(b)) return;
    const Acc sink = sinks_log2(h);
    if (sink == -core::infinity<Acc>()) return;  // no sink on this head: the row as it is, bit for bit
    Acc* lse = p.lse_ptr(b, i, h);
    const Finish<Acc> fin = finish_with_sink(from_lse(*lse), sink);
    Q* o = p.o_ptr(b, i, h);
    for (int d = 0; d < p.head_dim; ++d) o[d] = narrow<Q>(Acc(widen(o[d]) * fin.inv_l));
    *lse = fin.lse;
  }
};

// The sinks of opt merged into the finished rows of p (p.lse set).
template <class ExecSpace, class P>
void apply_sinks(const ExecSpace& space, const P& p, const Options& opt) {
  using Acc = typename P::acc_type;
  if (opt.sinks.empty() || p.batch == 0 || p.q_len == 0 || p.heads_q == 0) return;
  using Rows = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>, Kokkos::IndexType<std::int64_t>>;
  Kokkos::parallel_for("kattn::sinks", Rows(space, {0, 0, 0}, {p.batch, p.q_len, p.heads_q}),
                       SinkPass<ExecSpace, P>{p, device_sinks<Acc>(space, opt.sinks, kLog2e)});
}

// run(p) (a forward that writes the finished rows of p), then the sinks of opt merged into them
// where `finished_here` (an MPI rank that does not receive the result leaves them). Without a
// caller's lse the rows' lse goes to a buffer of the call (from opt.workspace when set).
template <class ExecSpace, class P, class Run>
auto with_sinks(const ExecSpace& space, P p, const Options& opt, const Run& run, bool finished_here = true) {
  require_sinks(opt, p.heads_q);
  if (opt.sinks.empty()) return run(p);
  using Acc = typename P::acc_type;
  Kokkos::View<Acc*, typename ExecSpace::memory_space> own_lse;
  if (!p.lse) {
    own_lse = take_buffer<Acc, typename ExecSpace::memory_space>(opt.workspace, space, "kattn::sinks::lse",
                                                                 std::size_t(p.q_total * p.heads_q));
    // rows (b, i) then heads: lse_ptr's dense and ragged rules
    p.lse = Operand<Acc>(own_lse.data(), p.q_len * p.heads_q, p.heads_q, 1);
  }
  auto result = run(p);
  if (finished_here) apply_sinks(space, p, opt);
  if (own_lse.data()) compat::fence(space, "kattn::sinks: the lse buffer is freed on return");
  return result;
}

// Each head's sum of its rows' terms of the sinks' gradient, for the backward of p (o, lse, dout of
// the forward with these sinks): d(sink_h) = sum over the rows of head h of -exp(sink_h - lse)
// (dO . O) (core/state.hpp, sink_gradient). The terms are formed per row on the device and summed
// exactly on the host (exact_sum.hpp), so the gradient is the same bits whatever the backend, the
// thread count, or the ranks that hold the rows (the MPI layer adds their sums). Empty without
// sinks.
template <class ExecSpace, class BP>
std::vector<ExactSum> sink_gradient_sums(const ExecSpace& space, const BP& p, const Options& opt) {
  using Acc = typename decltype(p.fwd)::acc_type;
  const auto& f = p.fwd;
  std::vector<ExactSum> sums(opt.sinks.size());
  if (opt.sinks.empty() || f.batch == 0 || f.q_len == 0 || f.heads_q == 0) return sums;
  using Mem = typename ExecSpace::memory_space;
  const std::int64_t rows = std::int64_t(f.batch) * f.q_len;
  Kokkos::View<Acc**, Kokkos::LayoutRight, Mem> terms(Kokkos::view_alloc(space, "kattn::sinks::gradient_terms"), rows,
                                                      f.heads_q);
  const auto sinks = device_sinks<Acc>(space, opt.sinks, 1.0);
  using Rows = Kokkos::MDRangePolicy<ExecSpace, Kokkos::Rank<3>, Kokkos::IndexType<std::int64_t>>;
  Kokkos::parallel_for(
      "kattn::sinks::gradient", Rows(space, {0, 0, 0}, {f.batch, f.q_len, f.heads_q}),
      KOKKOS_LAMBDA(const int b, const std::int64_t i, const int h) {
        if (i >= f.seq_q_len(b)) return;
        const auto* o = f.o_ptr(b, i, h);
        const auto* dout = p.do_ptr(b, i, h);
        Acc delta = 0;
        for (int d = 0; d < f.head_dim; ++d) delta += Acc(widen(o[d])) * Acc(widen(dout[d]));
        terms(b * f.q_len + i, h) = sink_gradient(sinks(h), *f.lse_ptr(b, i, h), delta);
      });
  const auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), terms);
  for (std::int64_t r = 0; r < rows; ++r)
    for (int h = 0; h < f.heads_q; ++h) sums[h].add(double(host(r, h)));
  return sums;
}

// The sums' values: the sinks' gradient.
inline std::vector<double> values_of(const std::vector<ExactSum>& sums) {
  std::vector<double> v(sums.size());
  for (std::size_t h = 0; h < sums.size(); ++h) v[h] = sums[h].value();
  return v;
}

// The sinks' gradient for the backward of p (empty without sinks).
template <class ExecSpace, class BP>
std::vector<double> sink_gradients(const ExecSpace& space, const BP& p, const Options& opt) {
  return values_of(sink_gradient_sums(space, p, opt));
}

}  // namespace detail
}  // namespace kattn
