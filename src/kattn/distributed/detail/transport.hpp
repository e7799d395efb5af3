// Moving Kokkos buffers through MPI: device pointers go to MPI directly when the MPI is GPU-aware
// (and host memory always does), otherwise through host staging mirrors. Messages larger than an
// int count are cut into pieces. Every send is counted, so callers can report bytes sent.
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <climits>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kattn/compat.hpp"
#include "kattn/core/storage.hpp"
#include "kattn/distributed/options.hpp"
#include "kattn/distributed/layout.hpp"
#include "kattn/workspace.hpp"

namespace kattn {
namespace dist {

// True when this MPI library accepts device pointers (Open MPI's MPIX_Query_cuda_support, or
// MPIX_Query_rocm_support); false for host-only builds and other MPIs.
bool mpi_is_gpu_aware();

namespace detail {

template <class T>
MPI_Datatype mpi_type();
template <>
inline MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
inline MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}
// 16-bit storage travels as its bits.
template <>
inline MPI_Datatype mpi_type<bf16>() {
  return MPI_UINT16_T;
}
template <>
inline MPI_Datatype mpi_type<fp16>() {
  return MPI_UINT16_T;
}

// Largest element count of one MPI message piece.
constexpr std::int64_t kMaxPiece = std::int64_t(1) << 30;

// Non-blocking point-to-point of `count` elements, in pieces of at most kMaxPiece elements, all
// with `tag` (MPI keeps messages of one source, tag and communicator in order). Requests are
// appended to `reqs`.
template <class T>
void isend(const T* data, std::int64_t count, int dest, int tag, MPI_Comm comm, std::vector<MPI_Request>& reqs,
           DistStats& stats) {
  for (std::int64_t off = 0; off < count; off += kMaxPiece) {
    const int n = static_cast<int>(count - off < kMaxPiece ? count - off : kMaxPiece);
    reqs.emplace_back();
    MPI_Isend(data + off, n, mpi_type<T>(), dest, tag, comm, &reqs.back());
    stats.bytes_sent += std::int64_t(n) * std::int64_t(sizeof(T));
    ++stats.messages_sent;
  }
}

// What a rank without the buffers sends instead of `count` values: as many empty messages as
// isend sends pieces, so that each of the receiver's receives matches one (a receive takes a
// shorter message). The failure latch has told the receiver, or will, that the contents are void.
template <class T>
void isend_empty(std::int64_t count, int dest, int tag, MPI_Comm comm, std::vector<MPI_Request>& reqs) {
  for (std::int64_t off = 0; off < count; off += kMaxPiece) {
    reqs.emplace_back();
    MPI_Isend(nullptr, 0, mpi_type<T>(), dest, tag, comm, &reqs.back());
  }
}

template <class T>
void irecv(T* data, std::int64_t count, int source, int tag, MPI_Comm comm, std::vector<MPI_Request>& reqs) {
  for (std::int64_t off = 0; off < count; off += kMaxPiece) {
    const int n = static_cast<int>(count - off < kMaxPiece ? count - off : kMaxPiece);
    reqs.emplace_back();
    MPI_Irecv(data + off, n, mpi_type<T>(), source, tag, comm, &reqs.back());
  }
}

// Pieces (Segment::local, length) of a dense K/V shard [batch][n][row] to `dest`: per piece and
// sequence one K and one V message, in the order recv_pieces posts them.
template <class T>
void send_pieces(const T* k, const T* v, std::int64_t n, std::int64_t row, int batch,
                 const std::vector<Segment>& pieces, int dest, int tag_k, int tag_v, MPI_Comm comm,
                 std::vector<MPI_Request>& reqs, DistStats& stats) {
  for (const Segment& pc : pieces)
    for (int b = 0; b < batch; ++b) {
      const std::int64_t off = (b * n + pc.local) * row;
      isend(k + off, pc.length * row, dest, tag_k, comm, reqs, stats);
      isend(v + off, pc.length * row, dest, tag_v, comm, reqs, stats);
    }
}

// The pieces from `source` into dense [batch][held][row] buffers, piece i at position at[i].
template <class T>
void recv_pieces_at(T* k, T* v, std::int64_t row, int batch, const std::vector<Segment>& pieces,
                    const std::vector<std::int64_t>& at, std::int64_t held, int source, int tag_k, int tag_v,
                    MPI_Comm comm, std::vector<MPI_Request>& reqs) {
  for (std::size_t i = 0; i < pieces.size(); ++i)
    for (int b = 0; b < batch; ++b) {
      const std::int64_t off = (b * held + at[i]) * row;
      irecv(k + off, pieces[i].length * row, source, tag_k, comm, reqs);
      irecv(v + off, pieces[i].length * row, source, tag_v, comm, reqs);
    }
}

// The pieces from `source`, packed one after the other: dense [batch][sum of lengths][row].
template <class T>
void recv_pieces(T* k, T* v, std::int64_t row, int batch, const std::vector<Segment>& pieces, int source, int tag_k,
                 int tag_v, MPI_Comm comm, std::vector<MPI_Request>& reqs) {
  std::vector<std::int64_t> at;
  std::int64_t held = 0;
  for (const Segment& pc : pieces) at.push_back(held), held += pc.length;
  recv_pieces_at(k, v, row, batch, pieces, at, held, source, tag_k, tag_v, comm, reqs);
}

// Broadcast of `count` elements from root, non-blocking, in pieces. The root counts what it
// hands to MPI (the library's broadcast algorithm decides what really travels).
template <class T>
void ibcast(T* data, std::int64_t count, int root, MPI_Comm comm, std::vector<MPI_Request>& reqs, DistStats& stats) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  for (std::int64_t off = 0; off < count; off += kMaxPiece) {
    const int n = static_cast<int>(count - off < kMaxPiece ? count - off : kMaxPiece);
    reqs.emplace_back();
    MPI_Ibcast(data + off, n, mpi_type<T>(), root, comm, &reqs.back());
    if (rank == root) {
      stats.bytes_sent += std::int64_t(n) * std::int64_t(sizeof(T));
      ++stats.messages_sent;
    }
  }
}

// Lets MPI progress pending transfers between kernel launches (rendezvous protocols move data
// only inside MPI calls).
inline void poke(std::vector<MPI_Request>& reqs) {
  if (reqs.empty()) return;
  int done = 0;
  MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE);
  if (done) reqs.clear();
}

// This process's rank in comm, and comm's size.
inline int rank_in(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  return rank;
}
inline int size_in(MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  return size;
}

inline void wait_all(std::vector<MPI_Request>& reqs) {
  if (!reqs.empty()) MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
  reqs.clear();
}

// Whether buffers in MemSpace go through host staging.
template <class MemSpace>
bool needs_staging(Staging staging) {
  if (staging == Staging::host) return true;
  if (staging == Staging::direct) return false;
  return !Kokkos::SpaceAccessibility<Kokkos::HostSpace, MemSpace>::accessible && !mpi_is_gpu_aware();
}

// The host copy MPI sees of a device buffer when staging. Taken from a workspace, it is pinned
// (page-locked) host memory, allocated once and reused by later calls: the device copies to and
// from it by DMA, where from pageable memory the driver copies through a pinned buffer of its own.
// Without a workspace it is pageable: pinning memory costs more than one call's copies save.
template <class T>
class HostTwin {
 public:
  using View = Kokkos::View<T*, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;

  HostTwin() = default;
  HostTwin(Workspace* ws, const std::string& label, std::size_t n) {
    if (ws) {
      pinned_ = ws->take<T, compat::PinnedHostSpace>(label, n);
      view_ = View(pinned_.data(), n);
    } else {
      pageable_ = kattn::detail::take_buffer<T, Kokkos::HostSpace>(nullptr, label, n);
      view_ = View(pageable_.data(), n);
    }
  }
  const View& view() const { return view_; }
  T* data() const { return view_.data(); }

 private:
  Kokkos::View<T*, compat::PinnedHostSpace> pinned_;
  Kokkos::View<T*, Kokkos::HostSpace> pageable_;
  View view_;
};

// A flat message buffer in MemSpace with, when staging, a host twin that MPI sees instead.
template <class T, class MemSpace>
class MessageBuffer {
 public:
  using DeviceView = Kokkos::View<T*, MemSpace>;

  MessageBuffer() = default;
  // From the workspace when ws is not null (workspace.hpp).
  MessageBuffer(Workspace* ws, const std::string& label, std::int64_t capacity, bool staged)
      : device_(kattn::detail::take_buffer<T, MemSpace>(ws, label, static_cast<std::size_t>(capacity))),
        staged_(staged) {
    if (staged_) host_ = HostTwin<T>(ws, label + "_host", static_cast<std::size_t>(capacity));
  }

  T* device() const { return device_.data(); }
  const DeviceView& view() const { return device_; }
  // The pointer MPI reads from or writes to.
  T* mpi() const { return staged_ ? host_.data() : device_.data(); }
  bool staged() const { return staged_; }

  // Before a send: the first `count` elements to the host twin.
  template <class ExecSpace>
  void stage_out(const ExecSpace& space, std::int64_t count) const {
    if (!staged_ || count == 0) return;
    Kokkos::deep_copy(space, Kokkos::subview(host_.view(), std::pair<std::size_t, std::size_t>(0, count)),
                      Kokkos::subview(device_, std::pair<std::size_t, std::size_t>(0, count)));
    space.fence();
  }
  // Before a receive that leaves gaps: the first `count` elements zero where MPI writes (T{}: +0
  // in every storage type), so that the gaps read as defined values after stage_in.
  template <class ExecSpace>
  void clear(const ExecSpace& space, std::int64_t count) const {
    if (count == 0) return;
    const std::pair<std::size_t, std::size_t> first(0, count);
    if (staged_)
      Kokkos::deep_copy(Kokkos::subview(host_.view(), first), T{});
    else
      Kokkos::deep_copy(space, Kokkos::subview(device_, first), T{});
    space.fence();
  }
  // After a receive: the first `count` elements back to the device.
  template <class ExecSpace>
  void stage_in(const ExecSpace& space, std::int64_t count) const {
    if (!staged_ || count == 0) return;
    Kokkos::deep_copy(space, Kokkos::subview(device_, std::pair<std::size_t, std::size_t>(0, count)),
                      Kokkos::subview(host_.view(), std::pair<std::size_t, std::size_t>(0, count)));
    space.fence();
  }

 private:
  DeviceView device_;
  HostTwin<T> host_;
  bool staged_ = false;
};

}  // namespace detail
}  // namespace dist
}  // namespace kattn
