// Buffers kept from one call to the next. A call given a Workspace (Options::workspace) takes its
// scratch buffers from it instead of allocating them: the split-KV partials, the backward's row
// sums and dQ partials, 16-bit calls' float copies, and a distributed call's message buffers,
// accumulators and partial states. A second call of the same shapes takes them all again, so a
// training or time-stepping loop pays neither the page faults of fresh host memory nor a device
// allocation and free (which synchronises a GPU) per call for them (docs/workspace.md lists what
// still is allocated per call). Without one, each call allocates and frees its own.
//
// A buffer is the workspace's while no call holds it; a call holds it from when it takes it until
// it lets it go (the call's own lifetime at most), so buffers one call holds at once are distinct,
// and buffers it lets go are taken again by its later requests. A request larger than every free
// buffer of its kind grows one (its old memory freed first). The workspace keeps the largest size
// each buffer reached until release().
//
// One call at a time uses a workspace (like a stream, a workspace per thread that calls kattn);
// contents do not carry over (every call writes a buffer before reading it). Destroy it, or
// release() it, before Kokkos::finalize, as any View.
#pragma once

#include <Kokkos_Core.hpp>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "kattn/detail/memory_check.hpp"
#include "kattn/errors.hpp"

namespace kattn {

class Workspace {
 public:
  Workspace() = default;
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;

  // Bytes held, in every memory space.
  std::uint64_t bytes() const {
    std::uint64_t sum = 0;
    for (const auto& kind : slots_)
      for (const auto& s : kind.second) sum += s->bytes();
    return sum;
  }
  // Bytes held that no call holds now: in every memory space, or in MemorySpace.
  std::uint64_t idle_bytes() const { return idle_bytes_in(nullptr); }
  template <class MemorySpace>
  std::uint64_t idle_bytes() const {
    return idle_bytes_in(MemorySpace::name());
  }
  // Buffers allocated (or grown) since construction: a repeated call of the same shapes adds none.
  std::int64_t allocations() const { return allocations_; }
  // Frees every buffer no call holds.
  void release() {
    for (auto& kind : slots_) {
      auto& list = kind.second;
      std::vector<std::unique_ptr<Slot>> kept;
      for (auto& s : list)
        if (s->in_use()) kept.push_back(std::move(s));
      list = std::move(kept);
    }
  }

  // n values of T in MemorySpace, uninitialised, held by the caller while the returned View (or a
  // copy of it) lives. label names the buffer's kind (Kokkos' tools see it); buffers of a kind are
  // only ever taken by requests of that kind.
  template <class T, class MemorySpace>
  Kokkos::View<T*, MemorySpace> take(const std::string& label, std::size_t n) {
    if (n == 0) return Kokkos::View<T*, MemorySpace>(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), 0);
    auto& list = slots_[label + '@' + MemorySpace::name() + '@' + typeid(T).name()];
    SlotOf<T, MemorySpace>* fit = nullptr;
    SlotOf<T, MemorySpace>* grow = nullptr;
    for (auto& s : list) {
      if (s->in_use()) continue;
      auto* t = static_cast<SlotOf<T, MemorySpace>*>(s.get());
      if (t->view.extent(0) >= n && (!fit || t->view.extent(0) < fit->view.extent(0))) fit = t;
      if (!grow || t->view.extent(0) > grow->view.extent(0)) grow = t;
    }
    if (fit) {
      // Kernels of the call that gave it back may still read it (on a GPU, queued): they finish
      // before its new holder writes it, by a kernel or by MPI straight into device memory. After
      // the fence no buffer idle now has work queued on it: one fence serves a call's takes.
      if (fit->dirty) {
        Kokkos::fence();
        for (auto& kind : slots_)
          for (auto& s : kind.second)
            if (!s->in_use()) s->dirty = false;
      }
    } else {
      if (!grow) {
        list.push_back(std::make_unique<SlotOf<T, MemorySpace>>());
        grow = static_cast<SlotOf<T, MemorySpace>*>(list.back().get());
      }
      grow->view = Kokkos::View<T*, MemorySpace>();  // frees the old memory before the new is had
      grow->view = Kokkos::View<T*, MemorySpace>(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), n);
      ++allocations_;
      fit = grow;
    }
    fit->dirty = true;  // its holder may queue work on it
    return Kokkos::subview(fit->view, std::pair<std::size_t, std::size_t>(0, n));
  }

 private:
  std::uint64_t idle_bytes_in(const char* space) const {
    std::uint64_t sum = 0;
    for (const auto& kind : slots_)
      for (const auto& s : kind.second)
        if (!s->in_use() && (!space || s->space() == space)) sum += s->bytes();
    return sum;
  }

  struct Slot {
    bool dirty = false;  // taken since the last fence: work may still be queued on it
    virtual ~Slot() = default;
    virtual bool in_use() const = 0;  // a call holds a View of it
    virtual std::uint64_t bytes() const = 0;
    virtual std::string space() const = 0;
  };
  template <class T, class MemorySpace>
  struct SlotOf final : Slot {
    Kokkos::View<T*, MemorySpace> view;
    bool in_use() const override { return view.use_count() > 1; }
    std::uint64_t bytes() const override { return std::uint64_t(view.extent(0)) * sizeof(T); }
    std::string space() const override { return MemorySpace::name(); }
  };

  std::map<std::string, std::vector<std::unique_ptr<Slot>>> slots_;  // by kind: label, space, type
  std::int64_t allocations_ = 0;
};

namespace detail {

// n values of T in MemorySpace, uninitialised: from the workspace when there is one, else
// allocated for this call alone (on `space`'s queue).
template <class T, class MemorySpace, class ExecSpace>
Kokkos::View<T*, MemorySpace> take_buffer(Workspace* ws, const ExecSpace& space, const std::string& label,
                                          std::size_t n) {
  if (ws) return ws->take<T, MemorySpace>(label, n);
  return Kokkos::View<T*, MemorySpace>(Kokkos::view_alloc(space, Kokkos::WithoutInitializing, label), n);
}
template <class T, class MemorySpace>
Kokkos::View<T*, MemorySpace> take_buffer(Workspace* ws, const std::string& label, std::size_t n) {
  if (ws) return ws->take<T, MemorySpace>(label, n);
  return Kokkos::View<T*, MemorySpace>(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), n);
}

// Buffers a call takes (from ws when set, else allocated) to view through raw pointers (views of
// other ranks and layouts): they stay the call's while this object lives, which the views must
// not outlive.
template <class T, class MemorySpace>
class HeldBuffers {
 public:
  template <class ExecSpace>
  T* take(Workspace* ws, const ExecSpace& space, const std::string& label, std::size_t n) {
    held_.push_back(take_buffer<T, MemorySpace>(ws, space, label, n));
    return held_.back().data();
  }

 private:
  std::vector<Kokkos::View<T*, MemorySpace>> held_;
};

// n values of T in MemorySpace, zero: as take_buffer, then filled with zeros on `space`.
template <class T, class MemorySpace, class ExecSpace>
Kokkos::View<T*, MemorySpace> take_zeroed(Workspace* ws, const ExecSpace& space, const std::string& label,
                                          std::size_t n) {
  auto v = take_buffer<T, MemorySpace>(ws, space, label, n);
  if (n > 0) Kokkos::deep_copy(space, v, T(0));
  return v;
}

// require_memory (memory_check.hpp) for buffers a call takes from ws: when the check refuses
// while ws holds idle buffers in MemorySpace, it frees them and checks again.
template <class MemorySpace>
void require_memory(Workspace* ws, std::uint64_t bytes, const std::string& what, const std::string& shape,
                    const std::string& how) {
  try {
    require_memory<MemorySpace>(bytes, what, shape, how);
  } catch (const Error&) {
    if (!ws || ws->idle_bytes<MemorySpace>() == 0) throw;
    ws->release();
    require_memory<MemorySpace>(bytes, what, shape, how);
  }
}

}  // namespace detail
}  // namespace kattn
