// A failure on one rank in the middle of a distributed call (an inner local attention whose memory
// check throws, an allocation, DistOptions::progress), turned into the same exception on every
// rank instead of a hang. The failing rank records the exception and keeps following the call's
// communication schedule with its compute skipped, so no peer waits forever on its messages; it
// tells the others at once with a one-int notice to each (on a communicator of the latch's own),
// which they poll at their next step and then skip their compute too: the rest of the call is
// transfers only. settle() is one collective step that completes or cancels every notice and
// throws the lowest failing rank's error on every rank, as collective_check does.
//
// Notices rather than a flag combined per step by a collective: the ranks of one call run
// different numbers of steps (the deterministic modes' key segments and tour items), and a
// collective per step would tie together ranks that the deterministic modes let run ahead.
// Polling a notice is one MPI_Testany, nothing next to a step's kernels.
#pragma once

#include <mpi.h>

#include <exception>
#include <functional>
#include <vector>

namespace kattn {
namespace dist {
namespace detail {

class FailureLatch {
 public:
  // Collective over comm (posts one notice receive per other rank).
  explicit FailureLatch(MPI_Comm comm);
  // Without settle() (an exception every rank throws alike left the call): the same collective
  // clean-up, without the throw.
  ~FailureLatch();
  FailureLatch(const FailureLatch&) = delete;
  FailureLatch& operator=(const FailureLatch&) = delete;

  // Runs `work` (compute that no peer waits on, or the progress callback) unless a failure is
  // known here; an exception from it is recorded and notified.
  template <class Work>
  void guard(const Work& work) {
    if (failed()) return;
    capture(work);
  }

  // Runs `work` whatever is known (an inner distributed call, which follows its own schedule and
  // skips its compute through this latch); an exception from it is recorded and notified.
  template <class Work>
  void capture(const Work& work) {
    try {
      work();
    } catch (...) {
      record(std::current_exception());
    }
  }

  // collective_check over the latch's communicator (the whole call's, which every rank reaches at
  // the same point, also when the latch is shared by inner calls on sub-communicators).
  void check(const std::function<void()>& local);

  // Whether some rank failed, as far as this rank knows yet.
  bool failed();

  // Collective: every rank throws the lowest failing rank's error (kattn::Error, prefixed
  // "rank R: " when there are several ranks), or returns when none failed. No request is left.
  void settle();

 private:
  void record(std::exception_ptr error);
  void finish_notices();

  MPI_Comm comm_, notices_;
  int rank_ = 0, size_ = 1;
  std::vector<int> notice_in_;
  std::vector<MPI_Request> in_, out_;
  int notice_out_ = 1;
  std::exception_ptr error_;
  bool known_ = false, finished_ = false;
};

// run(latch) under `outer` when the caller has one (a ragged batch's sequences share it), else
// under a latch of its own, settled after the run: a failure anywhere is then the same error on
// every rank. Returns what run returns.
template <class Run>
auto under_latch(MPI_Comm comm, FailureLatch* outer, const Run& run) {
  if (outer) return run(*outer);
  FailureLatch own(comm);
  const auto result = run(own);
  own.settle();
  return result;
}

}  // namespace detail
}  // namespace dist
}  // namespace kattn
