// The keys a grid rank (g, c) works with, forward and backward (grid_plan.hpp): its own shard,
// packed dense, and the pieces of its row's other shards that its column's queries see, received
// from their owners; what it sends its row in return. Internal.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "kattn/distributed/detail/buffer_memory.hpp"
#include "kattn/distributed/detail/clock.hpp"
#include "kattn/distributed/detail/grid_plan.hpp"
#include "kattn/distributed/detail/pack.hpp"
#include "kattn/distributed/detail/transport.hpp"

namespace kattn {
namespace dist {
namespace detail {

template <class ExecSpace, class KV>
class GridKeys {
 public:
  using Mem = typename ExecSpace::memory_space;
  using Buffer = MessageBuffer<KV, Mem>;

  // Where a piece of keys lies here: dense K and V buffers of `held` positions per sequence, the
  // piece at position `at`.
  using Held = HeldKeys<KV>;

  GridKeys(const GridPlan& plan, int rank, int batch, int heads_kv, int dim, std::int64_t own)
      : plan_(plan),
        rank_(rank),
        g_(plan.row_of(rank)),
        c_(plan.col_of(rank)),
        batch_(batch),
        row_(std::int64_t(heads_kv) * dim),
        own_(own),
        in_(plan.cols()),
        reqs_(plan.cols()),
        arrived_(plan.cols(), false),
        k_in_(plan.cols()),
        v_in_(plan.cols()) {
    for (int c = 0; c < plan.cols(); ++c)
      if (c != c_) in_[c] = plan.pieces(plan.at(g_, c), c_);
  }

  // The pieces received from rank (g, c) of this row, in the order they lie in its buffer.
  const std::vector<Segment>& in(int c) const { return in_[c]; }
  // Values per K (or V) position.
  std::int64_t row() const { return row_; }
  // The values of every buffer, for the caller's memory check.
  std::uint64_t values() const {
    std::uint64_t n = 2 * std::uint64_t(batch_) * own_ * row_;
    for (int c = 0; c < plan_.cols(); ++c) n += 2 * std::uint64_t(batch_) * total_length(in_[c]) * row_;
    return n;
  }

  // Inside the caller's collective memory check.
  void allocate(Workspace* ws, bool staged) {
    own_k_ = Buffer(ws, "kattn::dist::grid::own_k", batch_ * own_ * row_, staged);
    own_v_ = Buffer(ws, "kattn::dist::grid::own_v", batch_ * own_ * row_, staged);
    for (int c = 0; c < plan_.cols(); ++c)
      if (c != c_) {
        const std::int64_t n = batch_ * total_length(in_[c]) * row_;
        k_in_[c] = Buffer(ws, "kattn::dist::grid::k", n, staged);
        v_in_[c] = Buffer(ws, "kattn::dist::grid::v", n, staged);
      }
  }

  // This rank's shard, packed dense: what it sends and what its own blocks read.
  void pack(const ExecSpace& space, const Operand<const KV>& k, const Operand<const KV>& v, int heads_kv, int dim) {
    copy_rows(space, k, 0, dense_operand(own_k_.device(), own_, heads_kv, dim), batch_, own_, heads_kv, dim);
    copy_rows(space, v, 0, dense_operand(own_v_.device(), own_, heads_kv, dim), batch_, own_, heads_kv, dim);
    space.fence();
    own_k_.stage_out(space, batch_ * own_ * row_);
    own_v_.stage_out(space, batch_ * own_ * row_);
  }

  // Every receive of this row's keys, and the sends of this rank's to the row ranks whose columns
  // see them (into `sends`).
  void post(MPI_Comm comm, int tag_k, int tag_v, std::vector<MPI_Request>& sends, DistStats& stats) {
    for (int c = 0; c < plan_.cols(); ++c)
      if (c != c_ && !in_[c].empty())
        recv_pieces(k_in_[c].mpi(), v_in_[c].mpi(), row_, batch_, in_[c], plan_.at(g_, c), tag_k, tag_v, comm,
                    reqs_[c]);
    for (int c = 0; c < plan_.cols(); ++c)
      if (c != c_) {
        const std::vector<Segment> out = plan_.pieces(rank_, c);
        if (!out.empty())
          send_pieces(own_k_.mpi(), own_v_.mpi(), own_, row_, batch_, out, plan_.at(g_, c), tag_k, tag_v, comm, sends,
                      stats);
      }
  }

  // Where `piece` (of a key shard of this row) lies, once it is here.
  Held held_of(const ExecSpace& space, const Segment& piece, DistStats& stats) {
    if (piece.owner == rank_) return Held{own_k_.device(), own_v_.device(), own_, piece.local};
    const int c = plan_.col_of(piece.owner);
    if (!arrived_[c]) {
      const double t = now();
      wait_all(reqs_[c]);
      const std::int64_t n = batch_ * total_length(in_[c]) * row_;
      k_in_[c].stage_in(space, n);
      v_in_[c].stage_in(space, n);
      arrived_[c] = true;
      stats.comm_seconds += now() - t;
    }
    std::int64_t at = 0;
    for (const Segment& s : in_[c]) {
      if (s.global == piece.global) break;
      at += s.length;
    }
    return Held{k_in_[c].device(), v_in_[c].device(), total_length(in_[c]), at};
  }

  // Progress on the receives; all of them in (keys no block read: a window).
  void poke_all() {
    for (auto& r : reqs_) poke(r);
  }
  void wait() {
    for (auto& r : reqs_) wait_all(r);
  }

 private:
  const GridPlan& plan_;
  int rank_, g_, c_, batch_;
  std::int64_t row_, own_;
  std::vector<std::vector<Segment>> in_;
  std::vector<std::vector<MPI_Request>> reqs_;
  std::vector<bool> arrived_;
  Buffer own_k_, own_v_;
  std::vector<Buffer> k_in_, v_in_;
};

}  // namespace detail
}  // namespace dist
}  // namespace kattn
