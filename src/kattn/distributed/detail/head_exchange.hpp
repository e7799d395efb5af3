// The all-to-all of head sharding: from sequence shards (every head, this rank's positions) to the
// whole sequence of this rank's heads, and back. Positions follow a SequenceLayout over the
// communicator's ranks; each rank sends every other rank that rank's heads of its own positions,
// straight into place (a segment of one sequence is contiguous in the whole-sequence buffer). A
// rank's own heads of its own positions never go through MPI (nor through host staging): they are
// copied in place on the device. Values travel in the type they are given (16-bit storage in its
// 16 bits, lse in float), and bytes sent count what travels. Internal.
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <vector>

#include "kattn/core/storage.hpp"
#include "kattn/distributed/detail/clock.hpp"
#include "kattn/distributed/options.hpp"
#include "kattn/distributed/detail/failure_latch.hpp"
#include "kattn/distributed/detail/head_split.hpp"
#include "kattn/distributed/layout.hpp"
#include "kattn/distributed/detail/pack.hpp"
#include "kattn/distributed/detail/transport.hpp"
#include "kattn/errors.hpp"

namespace kattn {
namespace dist {
namespace detail {

template <class ExecSpace>
class HeadExchange {
 public:
  using Mem = typename ExecSpace::memory_space;
  template <class T>
  using Buffer = MessageBuffer<T, Mem>;

  // latch: the call's; each exchange's buffers are allocated in a collective step of it, so one
  // that cannot be had on one rank (past the call's memory check, which sees free memory only) is
  // the same error on every rank before any of that exchange's messages is posted.
  // ws: where the buffers come from (Options::workspace; null: allocated per exchange).
  HeadExchange(MPI_Comm comm, const ExecSpace& space, int batch, DistStats& stats, FailureLatch& latch, Workspace* ws)
      : comm_(comm), space_(space), batch_(batch), stats_(stats), latch_(latch), ws_(ws) {
    MPI_Comm_rank(comm, &rank_);
    MPI_Comm_size(comm, &P_);
  }

  // A gather in flight: its messages posted, its buffers held until wait(). Left by an exception
  // (a later exchange failing on every rank), it first completes its messages, which every rank
  // posted.
  template <class T>
  struct Pending {
    Buffer<T> whole, out;
    std::vector<MPI_Request> reqs;
    std::int64_t whole_elems = 0;
    Operand<const T> src;  // for this rank's own part, copied in place by wait()
    SequenceLayout layout;
    HeadRange own;
    int dim = 0;
    Pending() = default;
    Pending(Pending&&) = default;
    Pending& operator=(Pending&&) = default;
    Pending(const Pending&) = delete;
    Pending& operator=(const Pending&) = delete;
    ~Pending() { wait_all(reqs); }
  };

  // Posts the gather of the whole sequence of this rank's heads, dense [B][N][heads[rank].count][dim],
  // from every rank's positions of src (strided (b, local position, head, :), all heads). Several
  // gathers may be in flight: every rank posts them in the same order, so their messages match in
  // that order.
  template <class T>
  Pending<T> post_gather(const Operand<const T>& src, const SequenceLayout& layout, const std::vector<HeadRange>& heads,
                         int dim, const char* label) {
    const double t0 = now();
    const std::int64_t N = layout.length(), n_own = layout.local_length(rank_);
    const int h_own = heads[rank_].count;
    Pending<T> g;
    g.whole_elems = std::int64_t(batch_) * N * h_own * dim;
    g.src = src, g.layout = layout, g.own = heads[rank_], g.dim = dim;
    // Outgoing: per other rank r, this rank's positions of r's heads, dense [B][n_own][h_r][dim].
    const std::vector<std::int64_t> at = part_offsets(n_own, heads, dim);
    latch_.check([&] {
      g.whole = Buffer<T>(ws_, label, g.whole_elems, stats_.staged);
      g.out = Buffer<T>(ws_, "kattn::dist::heads::out", at.back(), stats_.staged);
    });
    for (int r = 0; r < P_; ++r)
      if (r != rank_)
        copy_rows(space_, src.from_head(heads[r].first), 0,
                  dense_operand(g.out.device() + at[r], n_own, heads[r].count, dim), batch_, n_own, heads[r].count, dim);
    space_.fence();
    g.out.stage_out(space_, at.back());
    for (int r = 0; r < P_; ++r) {
      if (r == rank_) continue;
      for (const Segment& s : layout.segments_of(r))
        for (int b = 0; b < batch_; ++b)
          irecv(g.whole.mpi() + (b * N + s.global) * h_own * dim, s.length * h_own * dim, r, 0, comm_, g.reqs);
      const std::int64_t row = std::int64_t(heads[r].count) * dim;
      for (const Segment& s : layout.segments_of(rank_))
        for (int b = 0; b < batch_; ++b)
          isend(g.out.mpi() + at[r] + (b * n_own + s.local) * row, s.length * row, r, 0, comm_, g.reqs, counted(r));
    }
    stats_.comm_seconds += now() - t0;
    return g;
  }

  // Completes a gather: the whole sequence of this rank's heads, on the device.
  template <class T>
  Buffer<T> wait(Pending<T>& g) {
    const double t0 = now();
    wait_all(g.reqs);
    if (P_ > 1) g.whole.stage_in(space_, g.whole_elems);
    g.out = Buffer<T>();
    const Operand<T> whole = dense_operand(g.whole.device(), g.layout.length(), g.own.count, g.dim);
    for (const Segment& s : g.layout.segments_of(rank_))
      copy_rows(space_, g.src.from_head(g.own.first), s.local, whole.from_row(s.global), batch_, s.length, g.own.count,
                g.dim);
    space_.fence();
    stats_.comm_seconds += now() - t0;
    return g.whole;
  }

  // Back to sequence shards: every rank's heads (the whole sequence of heads[rank] in `whole` on
  // this rank, dense [B][N][h][dim]) of this rank's positions into dst (strided (b, local
  // position, head, :)). add == false: copied; add == true: added rank by rank in rank order (dst
  // zeroed by the caller), for KV heads that several ranks computed parts of.
  template <class T>
  void scatter(const Buffer<T>& whole, const SequenceLayout& layout, const std::vector<HeadRange>& heads, int dim,
               const Operand<T>& dst, bool add) {
    const double t0 = now();
    const std::int64_t N = layout.length(), n_own = layout.local_length(rank_);
    const int h_own = heads[rank_].count;
    if (P_ > 1) whole.stage_out(space_, std::int64_t(batch_) * N * h_own * dim);
    // Incoming: per other rank r, r's heads of this rank's positions, dense [B][n_own][h_r][dim].
    const std::vector<std::int64_t> at = part_offsets(n_own, heads, dim);
    Buffer<T> in;
    latch_.check([&] { in = Buffer<T>(ws_, "kattn::dist::heads::in", at.back(), stats_.staged); });
    std::vector<MPI_Request> reqs;
    for (int r = 0; r < P_; ++r) {
      if (r == rank_) continue;
      const std::int64_t row = std::int64_t(heads[r].count) * dim;
      for (const Segment& s : layout.segments_of(rank_))
        for (int b = 0; b < batch_; ++b)
          irecv(in.mpi() + at[r] + (b * n_own + s.local) * row, s.length * row, r, 0, comm_, reqs);
      for (const Segment& s : layout.segments_of(r))
        for (int b = 0; b < batch_; ++b)
          isend(whole.mpi() + (b * N + s.global) * h_own * dim, s.length * h_own * dim, r, 0, comm_, reqs, counted(r));
    }
    wait_all(reqs);
    in.stage_in(space_, at.back());
    for (int r = 0; r < P_; ++r) {
      const Operand<T> into = dst.from_head(heads[r].first);
      if (r != rank_) {
        place(dense_operand<const T>(in.device() + at[r], n_own, heads[r].count, dim), into, n_own, heads[r].count, dim,
              add);
        continue;
      }
      // This rank's own part, from `whole` in place: segment by segment (each at its global position).
      for (const Segment& s : layout.segments_of(rank_)) {
        const Operand<const T> own = dense_operand(whole.device(), N, h_own, dim).from_row(s.global);
        place(own, into.from_row(s.local), s.length, h_own, dim, add);
      }
    }
    space_.fence();
    stats_.comm_seconds += now() - t0;
  }

 private:
  // Offsets of the per-rank parts of an outgoing (gather) or incoming (scatter) buffer, dense
  // [B][n_own][heads[r].count][dim] each, this rank's own part empty; the last entry is the total.
  std::vector<std::int64_t> part_offsets(std::int64_t n_own, const std::vector<HeadRange>& heads, int dim) const {
    std::vector<std::int64_t> at(P_ + 1, 0);
    for (int r = 0; r < P_; ++r)
      at[r + 1] = at[r] + (r == rank_ ? 0 : std::int64_t(batch_) * n_own * heads[r].count * dim);
    return at;
  }

  // n rows of a part into dst: copied, or added (scatter's add: parts summed in rank order).
  template <class T>
  void place(const Operand<const T>& part, const Operand<T>& into, std::int64_t n, int h, int dim, bool add) const {
    if (add) {
      // Sums are made in a computing type: 16-bit parts would be rounded twice.
      if constexpr (is_16bit_v<T>)
        KATTN_ASSERT(!"head exchange: 16-bit parts are not summed");
      else
        add_rows(space_, part, into, 0, batch_, n, h, dim);
    } else {
      copy_rows(space_, part, 0, into, batch_, n, h, dim);
    }
  }

  // Where a send to r is counted: this rank's messages to itself are not traffic.
  DistStats& counted(int r) { return r == rank_ ? self_ : stats_; }

  MPI_Comm comm_;
  ExecSpace space_;
  int batch_ = 0, rank_ = 0, P_ = 1;
  DistStats& stats_;
  FailureLatch& latch_;
  Workspace* ws_;
  DistStats self_;
};

}  // namespace detail
}  // namespace dist
}  // namespace kattn
