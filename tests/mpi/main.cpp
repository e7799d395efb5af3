// GoogleTest main for the MPI tests: MPI, then Kokkos, around the tests. Rank 0 prints the usual
// report; the other ranks print only their failures, each line prefixed with the rank. After
// every test the ranks agree on the verdict, so a failure on rank 2 fails the test on rank 0's
// report too, and every rank exits with the same status.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <string>

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// Prints this rank's failures (for ranks other than 0, whose default printer is removed).
class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", world_rank(), r.file_name() ? r.file_name() : "?",
                 r.line_number(), r.summary());
  }
};

// After each test: which ranks failed it, reported by rank 0, and recorded as a failure there.
class RankVerdict : public ::testing::EmptyTestEventListener {
 public:
  void OnTestEnd(const ::testing::TestInfo& info) override {
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const int mine = info.result()->Failed() ? 1 : 0;
    std::string failed(static_cast<std::size_t>(size), '\0');
    char c = static_cast<char>(mine);
    MPI_Gather(&c, 1, MPI_CHAR, &failed[0], 1, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (world_rank() != 0) return;
    std::string ranks;
    for (int r = 1; r < size; ++r)
      if (failed[r]) ranks += " " + std::to_string(r);
    if (!ranks.empty()) {
      std::fprintf(stderr, "[%s.%s] FAILED on rank(s)%s (of %d)\n", info.test_suite_name(), info.name(), ranks.c_str(),
                   size);
      any_other_failed = true;
    }
  }
  bool any_other_failed = false;
};

}  // namespace

int main(int argc, char* argv[]) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  Kokkos::initialize(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (world_rank() != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter);
  }
  auto* verdict = new RankVerdict;
  listeners.Append(verdict);
  int status = RUN_ALL_TESTS();
  if (verdict->any_other_failed) status = 1;
  int worst = 0;
  MPI_Allreduce(&status, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  Kokkos::finalize();
  MPI_Finalize();
  return worst;
}
