// MPI for the commands that need it: initialised on first use (the other commands never start
// MPI), finalised when the command is done. Errors: every rank throws the same kattn::Error
// (collective checks), rank 0 reports it; anything else aborts the job so no rank hangs.
#pragma once

#include <mpi.h>

#include <cstdio>
#include <exception>

#include "kattn/errors.hpp"

namespace kattn {
namespace cli {

class MpiSession {
 public:
  MpiSession() {
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready) {
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
      owner_ = true;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiSession() {
    if (owner_) MPI_Finalize();
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Runs a command body with the error policy above; returns its exit status.
  template <class F>
  int run(F&& body) {
    try {
      return body();
    } catch (const Error& e) {
      // Rank 0 prints it, once, and every rank waits for that before leaving: a rank that exits
      // with status 2 first makes mpiexec kill the job, and rank 0's line would be lost.
      if (rank_ == 0) {
        std::fprintf(stderr, "%s\n", e.what());
        std::fflush(stderr);
      }
      MPI_Barrier(MPI_COMM_WORLD);
      return 2;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "kattn: rank %d: %s\n", rank_, e.what());
      if (size_ > 1) MPI_Abort(MPI_COMM_WORLD, 1);
      return 1;
    }
  }

 private:
  bool owner_ = false;
  int rank_ = 0, size_ = 1;
};

}  // namespace cli
}  // namespace kattn
