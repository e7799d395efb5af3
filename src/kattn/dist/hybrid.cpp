#include "kattn/dist/hybrid.hpp"

#include "kattn/compat.hpp"
#include "kattn/detail/backends.hpp"
#include "kattn/dist/agreement.hpp"
#include "kattn/dist/clock.hpp"
#include "kattn/dist/head_sharded.hpp"
#include "kattn/dist/ring.hpp"

namespace kattn {
namespace dist {
namespace detail {
namespace {

// One head block's ring. The ring takes float or double storage, or float queries over 16-bit
// K/V: for 16-bit storage the block's q is widened (exactly) into a dense float copy, the ring
// computes o in float, and o is rounded once into the block.
template <class ExecSpace, class T>
DistStats block_ring(const HybridGrid& grid, const ExecSpace& space, const AttentionParams<T>& a, const Options& opt,
                     const DistOptions& d, FailureLatch& latch) {
  if constexpr (!is_16bit_v<T>) {
    return ring_forward_impl(grid.ring(), space, a, opt, d, &latch);
  } else {
    using Mem = typename ExecSpace::memory_space;
    using Floats = Kokkos::View<float*, Mem>;
    const int hq = a.heads_q, D = a.head_dim;
    const std::int64_t values = std::int64_t(a.batch) * a.q_len * hq * D;
    const Floats q = take_buffer<float, Mem>(opt.workspace, space, "kattn::dist::hybrid::q_float", values),
                 o = take_buffer<float, Mem>(opt.workspace, space, "kattn::dist::hybrid::o_float", values);
    const Strided<float> q_dense = dense(q.data(), a.q_len, hq, D), o_dense = dense(o.data(), a.q_len, hq, D);
    copy_rows(space, Strided<const T>{a.q, a.q_stride_batch, a.q_stride_seq, a.q_stride_head}, 0, q_dense, a.batch,
              a.q_len, hq, D);
    // The block's dense problem with float queries and outputs.
    AttentionParams<float, float, T> f;
    f.q = q.data(), f.q_stride_batch = q_dense.sb, f.q_stride_seq = q_dense.sj, f.q_stride_head = q_dense.sh;
    f.o = o.data(), f.o_stride_batch = o_dense.sb, f.o_stride_seq = o_dense.sj, f.o_stride_head = o_dense.sh;
    f.k = a.k, f.k_stride_batch = a.k_stride_batch, f.k_stride_seq = a.k_stride_seq, f.k_stride_head = a.k_stride_head;
    f.v = a.v, f.v_stride_batch = a.v_stride_batch, f.v_stride_seq = a.v_stride_seq, f.v_stride_head = a.v_stride_head;
    f.lse = a.lse, f.lse_stride_batch = a.lse_stride_batch, f.lse_stride_head = a.lse_stride_head;
    f.lse_stride_seq = a.lse_stride_seq;
    f.batch = a.batch, f.heads_q = hq, f.heads_kv = a.heads_kv, f.head_dim = D;
    f.q_len = a.q_len, f.kv_len = a.kv_len, f.q_total = a.q_total;
    const DistStats stats = ring_forward_impl(grid.ring(), space, f, opt, d, &latch);
    copy_rows(space, Strided<const float>{o.data(), o_dense.sb, o_dense.sj, o_dense.sh}, 0,
              Strided<T>{a.o, a.o_stride_batch, a.o_stride_seq, a.o_stride_head}, a.batch, a.q_len, hq, D);
    space.fence();
    return stats;
  }
}

}  // namespace

template <class ExecSpace, class T>
DistStats hybrid_forward_impl(MPI_Comm comm, const ExecSpace& space, const AttentionParams<T>& p, const Options& opt,
                              const DistOptions& d) {
  compat::ScopedRegion area("kattn::dist");
  compat::ScopedRegion region("kattn::dist::hybrid");
  const double t0 = now();
  std::vector<Agreed> fields = problem_fields(DistCall::hybrid_attention, p, opt, d);
  fields.push_back(Agreed::boolean("lse", "an LSE output", p.lse != nullptr));
  collective_agree(comm, fields);
  require_no_block_mask(opt);
  int P = 1;
  MPI_Comm_size(comm, &P);
  require_grid(P, p.heads_q, d);
  require_transfers(d);
  const GlobalSplit split = hybrid_split(comm, p.q_len, p.kv_len, d);
  const HybridGrid grid(comm, d);
  DistStats stats;
  stats.staged = needs_staging<typename ExecSpace::memory_space>(d.staging);
  // One latch for the whole grid: a failure in any ring group reaches every rank, and the rings
  // run through it (every group member enters every ring, skipping its compute after a failure).
  FailureLatch latch(comm);
  head_sharded_forward<ExecSpace, T>(grid.heads(), space, p, grid.group_layout(split.Nq), grid.group_layout(split.Nk),
                                     stats, latch, opt.workspace, [&](const AttentionParams<T>& a, DistStats& s) {
                                       latch.capture([&] { accumulate(s, block_ring(grid, space, a, opt, d, latch)); });
                                     });
  space.fence();
  latch.settle();
  stats.seconds = now() - t0;
  return stats;
}

#define KATTN_INSTANTIATE_HYBRID(Space, T)                                                                            \
  template DistStats hybrid_forward_impl<Space, T>(MPI_Comm, const Space&, const AttentionParams<T>&, const Options&, \
                                                   const DistOptions&);
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_HYBRID)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_HYBRID, bf16)
KATTN_INSTANTIATE_FOR_BACKENDS_T(KATTN_INSTANTIATE_HYBRID, fp16)

}  // namespace detail
}  // namespace dist
}  // namespace kattn
