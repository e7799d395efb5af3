#include "kattn/block_sparse.hpp"

#include <algorithm>
#include <numeric>
#include <string>

#include "kattn/compat.hpp"
#include "kattn/detail/backends.hpp"
#include "kattn/detail/backward_plan.hpp"
#include "kattn/detail/block_sparse.hpp"
#include "kattn/detail/launch.hpp"
#include "kattn/decode.hpp"
#include "kattn/tiles.hpp"

namespace kattn {
namespace detail {
namespace {

// A tile size of at most `cap` positions that never straddles a mask block of B positions: B
// itself when it fits, else the largest divisor of B up to cap (when it is not tiny, which would
// cost more in per-tile overhead than straddling tiles cost in masked work), else cap.
int aligned_tile(std::int64_t B, int cap) {
  cap = std::max(cap, 1);
  if (B <= cap) return static_cast<int>(B);
  for (int d = cap; d >= 1; --d)
    if (B % d == 0) return 4 * d >= cap ? d : cap;
  return cap;
}

// The options' tiles, or tiles aligned to the mask block when the options leave them at 0 (cap_q
// query rows and cap_k keys: what the planner would choose for the dense problem).
Options aligned_options(const Options& opt, std::int64_t B, int G, std::int64_t q_len, std::int64_t kv_len, int cap_q,
                        int cap_k) {
  Options o = opt;
  if (o.block_q == 0) {
    // Positions per tile: all of them when they fit one tile (a tile from position 0 is aligned).
    const std::int64_t cap_pos = std::max(1, cap_q / G);
    o.block_q = G * static_cast<int>(q_len <= cap_pos ? std::max<std::int64_t>(q_len, 1) : aligned_tile(B, static_cast<int>(cap_pos)));
  }
  if (o.block_k == 0) o.block_k = kv_len <= cap_k ? cap_k : aligned_tile(B, cap_k);
  return o;
}

// The mask's BSR arrays copied to the execution space's memory, and the kernels' view of them.
template <class ExecSpace>
struct DeviceMask {
  Kokkos::View<std::int64_t*, typename ExecSpace::memory_space> indptr, indices;
  BlockSparse bs;

  explicit DeviceMask(const BlockMask& mask) {
    using Host = Kokkos::View<const std::int64_t*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
    indptr = decltype(indptr)(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kattn::block_sparse::indptr"),
                              mask.indptr().size());
    indices = decltype(indices)(Kokkos::view_alloc(Kokkos::WithoutInitializing, "kattn::block_sparse::indices"),
                                std::max<std::size_t>(mask.indices().size(), 1));
    Kokkos::deep_copy(indptr, Host(mask.indptr().data(), mask.indptr().size()));
    if (!mask.indices().empty())
      Kokkos::deep_copy(Kokkos::subview(indices, std::make_pair(std::size_t(0), mask.indices().size())),
                        Host(mask.indices().data(), mask.indices().size()));
    bs.indptr = indptr.data();
    bs.indices = indices.data();
    bs.heads = mask.heads();
    bs.q_blocks = mask.q_blocks();
    bs.k_blocks = mask.k_blocks();
    bs.block = mask.block();
  }
};

}  // namespace

template <class ExecSpace, class T>
SplitPlan block_sparse_impl(const ExecSpace& space, const AttentionParams<T>& p, const Options& opt,
                            const BlockMask& mask, bool split) {
  const std::string name = split ? "kattn::block_sparse::splitkv" : "kattn::block_sparse::forward";
  compat::ScopedRegion region(name);
  if (p.batch == 0 || p.q_len == 0 || p.heads_q == 0) return SplitPlan{};
  const int G = p.group_size();
  // The transposed tiles only (the row tiles of decode shapes do not read the mask).
  const TilePlan dense = plan_tiles<ExecSpace, T>(space, p.head_dim, p.q_len * G, opt);
  const Options topt = aligned_options(opt, mask.block(), G, p.q_len, p.kv_len, dense.geometry.block_q,
                                       dense.geometry.block_k);
  const DeviceMask<ExecSpace> dm(mask);
  TiledAttention<ExecSpace, T> kern = make_tiled_kernel(space, p, topt);
  kern.bs = dm.bs;
  SplitPlan plan;
  plan.units_unsplit = std::int64_t(p.batch) * p.heads_kv * kern.row_tiles;
  plan.units = plan.units_unsplit;
  plan.reason = "no split";
  if (split) {
    plan = plan_splits(space, p, topt);
    if (plan.splits > 1 && p.kv_len > 0) {
      // Chunks of whole mask blocks and whole key tiles, so that a split never cuts a tile.
      const std::int64_t per = plan.chunk > 0 ? plan.chunk : (p.kv_len + plan.splits - 1) / plan.splits;
      const std::int64_t B = mask.block(), bk = kern.geo.block_k;
      const std::int64_t align = B / std::gcd(B, bk) * bk;
      plan.chunk = (per + align - 1) / align * align;
      plan.splits = static_cast<int>((p.kv_len + plan.chunk - 1) / plan.chunk);
      plan.reason += "; chunks rounded to " + std::to_string(plan.chunk) + " keys (whole mask blocks)";
    }
  }
  launch_tiles(space, p, kern, SplitSpec{plan.splits, plan.splits > 1 ? plan.chunk : 0}, name);
  compat::fence(space, "kattn::block_sparse: the mask copy is freed on return");
  return plan;
}

template <class ExecSpace, class T>
BackwardInfo block_sparse_backward_impl(const ExecSpace& space, const BackwardParams<T>& p, const Options& opt,
                                        const BackwardOptions& bopt, const BlockMask& mask) {
  const AttentionParams<T>& f = p.fwd;
  const BackwardPlan dense = plan_backward<ExecSpace, T>(space, f.batch, f.heads_kv, f.group_size(), f.head_dim,
                                                         f.q_len, f.kv_len, f.q_total, opt, bopt);
  const Options topt = aligned_options(opt, mask.block(), f.group_size(), f.q_len, f.kv_len, dense.geo.block_q,
                                       dense.geo.block_k);
  const DeviceMask<ExecSpace> dm(mask);
  return backward_impl(space, p, topt, bopt, dm.bs);
}

#define KATTN_INSTANTIATE_BLOCK_SPARSE(Space, T)                                                                \
  template SplitPlan block_sparse_impl<Space, T>(const Space&, const AttentionParams<T>&, const Options&,     \
                                                 const BlockMask&, bool);                                     \
  template BackwardInfo block_sparse_backward_impl<Space, T>(const Space&, const BackwardParams<T>&, const Options&, \
                                                             const BackwardOptions&, const BlockMask&);
KATTN_INSTANTIATE_FOR_BACKENDS(KATTN_INSTANTIATE_BLOCK_SPARSE)

}  // namespace detail
}  // namespace kattn
