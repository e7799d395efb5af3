// GoogleTest main that brackets the tests with Kokkos (Kokkos arguments such as
// --kokkos-num-threads=2 are accepted).
#include <Kokkos_Core.hpp>
#include <gtest/gtest.h>

int main(int argc, char* argv[]) {
  Kokkos::initialize(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  const int status = RUN_ALL_TESTS();
  Kokkos::finalize();
  return status;
}
