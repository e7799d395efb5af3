#include "kattn/distributed/detail/failure_latch.hpp"

#include "kattn/distributed/collective.hpp"

namespace kattn {
namespace dist {
namespace detail {
namespace {

// The notices' own duplicate of comm (made on first use, cached on it): they never meet the
// call's messages, whatever tags the call uses.
MPI_Comm notice_comm(MPI_Comm comm) {
  static int key = MPI_KEYVAL_INVALID;
  return cached_dup(comm, key);
}

}  // namespace

FailureLatch::FailureLatch(MPI_Comm comm) : comm_(comm), notices_(notice_comm(comm)) {
  MPI_Comm_rank(comm, &rank_);
  MPI_Comm_size(comm, &size_);
  notice_in_.assign(size_, 0);
  in_.assign(size_, MPI_REQUEST_NULL);
  for (int r = 0; r < size_; ++r)
    if (r != rank_) MPI_Irecv(&notice_in_[r], 1, MPI_INT, r, 0, notices_, &in_[r]);
}

FailureLatch::~FailureLatch() {
  if (!finished_) finish_notices();
}

bool FailureLatch::failed() {
  if (known_) return true;
  int index = MPI_UNDEFINED, done = 0;
  MPI_Testany(size_, in_.data(), &index, &done, MPI_STATUS_IGNORE);
  known_ = done && index != MPI_UNDEFINED;
  return known_;
}

void FailureLatch::record(std::exception_ptr error) {
  if (error_) return;  // the first failure is the one reported
  error_ = error;
  known_ = true;
  out_.assign(size_, MPI_REQUEST_NULL);
  for (int r = 0; r < size_; ++r)
    if (r != rank_) MPI_Isend(&notice_out_, 1, MPI_INT, r, 0, notices_, &out_[r]);
}

// Every rank learns who failed; the notices of those ranks are received, the other receives
// cancelled, this rank's own notices completed.
void FailureLatch::finish_notices() {
  finished_ = true;
  int mine = error_ ? 1 : 0;
  std::vector<int> failed(size_, 0);
  MPI_Allgather(&mine, 1, MPI_INT, failed.data(), 1, MPI_INT, comm_);
  for (int r = 0; r < size_; ++r) {
    if (in_[r] == MPI_REQUEST_NULL) continue;
    if (!failed[r]) MPI_Cancel(&in_[r]);
    MPI_Wait(&in_[r], MPI_STATUS_IGNORE);
  }
  if (!out_.empty()) MPI_Waitall(size_, out_.data(), MPI_STATUSES_IGNORE);
}

void FailureLatch::check(const std::function<void()>& local) { collective_check(comm_, local); }

void FailureLatch::settle() {
  finish_notices();
  collective_check(comm_, [&] {
    if (error_) std::rethrow_exception(error_);
  });
}

}  // namespace detail
}  // namespace dist
}  // namespace kattn
