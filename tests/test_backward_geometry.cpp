// The backward's padded tile sizes against the team GEMM's blocks (tile_gemm.hpp: M a multiple of
// the micro-tile rows, N of its columns, else the rows or columns past the last block are
// dropped). Every micro-tile shape a backend can have is checked, not only this build's: a scalar
// host has R = 4, J = 2; AVX2 4 x 16 with the key pass's 4 x 24 and 6 x 16 (float); AVX-512
// 8 x 32; GPUs 4 x 4.
#include <gtest/gtest.h>

#include <string>

#include "kattn/detail/backward_plan.hpp"

namespace kattn {
namespace test {
namespace {

TEST(BackwardGeometry, EveryProductDimensionIsAMultipleOfItsGemmBlock) {
  for (int R : {4, 8})
    for (int J : {1, 2, 4, 8, 16, 32})
      for (int tall_r : {R, 6})
        for (int wide_j : {J, 3 * J})
          for (int bq : {1, 5, 8, 13, 32})
            for (int bk : {1, 6, 8, 12, 40})
              for (int D : {1, 8, 16, 72, 128}) {
                SCOPED_TRACE("micro " + std::to_string(R) + " x " + std::to_string(J) + ", tall " +
                             std::to_string(tall_r) + ", wide " + std::to_string(wide_j) + ", tiles " +
                             std::to_string(bq) + " x " + std::to_string(bk) + ", D " + std::to_string(D));
                const detail::BackwardMicroTiles m{R, J, tall_r, wide_j};
                const detail::BackwardGeometry g = detail::BackwardGeometry::make(bq, bk, D, m);
                // Key pass: S, dP (rows x keys, R x wide J) are M = rows, N = keys; dQ (rows x dims)
                // and dV, dK (keys x dims) are M = rows / keys, N = dims (tall R x J).
                EXPECT_EQ(g.kp_rows % R, 0);
                EXPECT_EQ(g.kp_rows % tall_r, 0);
                EXPECT_EQ(g.kp_keys % wide_j, 0);
                EXPECT_EQ(g.kp_keys % tall_r, 0);
                EXPECT_EQ(g.kp_dims % J, 0);
                // Query pass: S^T, dP^T (keys x rows) and dQ^T (dims x rows), R x J.
                EXPECT_EQ(g.qp_keys % R, 0);
                EXPECT_EQ(g.qp_dims % R, 0);
                EXPECT_EQ(g.qp_rows % J, 0);
                EXPECT_GE(g.kp_rows, bq);
                EXPECT_GE(g.kp_keys, bk);
                EXPECT_GE(g.kp_dims, D);
                EXPECT_GE(g.qp_rows, bq);
                EXPECT_GE(g.qp_keys, bk);
                EXPECT_GE(g.qp_dims, D);
              }
}

}  // namespace
}  // namespace test
}  // namespace kattn
