// One NaN rule at every scale of the state algebra: a part whose weight underflows to 0 but whose
// o holds a NaN still makes the merged o NaN, as the textbook's e^(lse_a - lse) * NaN is. Checked
// on the state algebra itself, the public merge (which cascade uses), and the split-KV merge of
// the forward (transposed tiles and row tiles); the MPI operator and fold in tests/mpi.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kattn/core/state.hpp"
#include "kattn/attention.hpp"
#include "kattn/merge.hpp"
#include "nan_merge_problem.hpp"
#include "support.hpp"

namespace kattn {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(MergeNaN, StateAlgebraKeepsANaNUnderAWeightThatUnderflowed) {
  // Part a: o = NaN, lse = -200; part b: o = 1, lse = 0. In float e^-200 is 0.
  const Merge<float> mg = merge(from_lse(-200.0f), from_lse(0.0f));
  EXPECT_EQ(mg.alpha_a, 0.0f);
  EXPECT_TRUE(std::isnan(merged_o(mg, kNaN, 1.0f)));
  // An empty part contributes nothing: its o is never read.
  const Merge<float> with_empty = merge(RowState<float>::empty(), from_lse(0.0f));
  EXPECT_EQ(merged_o(with_empty, kNaN, 1.0f), 1.0f);
  EXPECT_EQ(merged_o(merge(RowState<float>::empty(), RowState<float>::empty()), kNaN, kNaN), 0.0f);
}

TEST(MergeNaN, PublicMerge) {
  using test::View2;
  using test::View3;
  const int N = 3, H = 2, D = 4;
  View3<float> oa("oa", N, H, D), ob("ob", N, H, D), o("o", N, H, D);
  View2<float> la("la", N, H), lb("lb", N, H), lse("lse", N, H);
  Kokkos::deep_copy(oa, 1.0f);
  Kokkos::deep_copy(ob, 1.0f);
  Kokkos::deep_copy(la, -200.0f);
  Kokkos::deep_copy(lb, 0.0f);
  auto ha = Kokkos::create_mirror_view(oa);
  Kokkos::deep_copy(ha, oa);
  ha(1, 1, 2) = kNaN;
  Kokkos::deep_copy(oa, ha);
  test::poison(o);
  merge(test::TestSpace(), oa, la, ob, lb, o, lse);
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o);
  for (int n = 0; n < N; ++n)
    for (int hh = 0; hh < H; ++hh)
      for (int d = 0; d < D; ++d) {
        if (n == 1 && hh == 1 && d == 2)
          EXPECT_TRUE(std::isnan(h(n, hh, d)));
        else
          EXPECT_NEAR(h(n, hh, d), 1.0f, 1e-6f) << n << " " << hh << " " << d;
      }
}

void check_split_merge(int Nq, int splits) {
  test::Problem<float> p = test::underflowing_nan_problem(Nq, 128);
  Options opt = test::underflowing_nan_options();
  opt.splits = splits;
  opt.block_k = 64;
  attention(test::TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt);
  test::expect_underflowing_nan_result(p.o, p.lse, 128, "splitkv Nq=" + std::to_string(Nq) + " splits=" +
                                                            std::to_string(splits));
}

TEST(MergeNaN, SplitKVMergeRowTiles) {
  check_split_merge(1, 2);
  check_split_merge(1, 1);
}

TEST(MergeNaN, SplitKVMergeTransposedTiles) {
  check_split_merge(40, 2);
  check_split_merge(40, 1);
}

}  // namespace
}  // namespace kattn
