// Split-KV attention (dense) against the float64 textbook reference: every split count from 1 to
// more than the number of keys, fixed-size chunks, every mask variant, GQA, several queries per
// sequence, the planner's own choice; and determinism (the merge order is fixed).
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/config.hpp"
#include "support.hpp"

namespace kattn {
namespace test {
namespace {

template <class T>
void check_splitkv(const Shape& shape, Options opt, int splits) {
  opt.splits = splits;
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(describe(shape, opt) + " seed=" + std::to_string(seed));
  Problem<T> p(shape, seed);
  attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt);
  Kokkos::fence();
  expect_close(p, reference_of(p, opt), tolerance<T>(), "splitkv");
}

// Every count in host builds. The device-shaped host build runs teams of several threads, whose
// barriers each cost a scheduler slice on a loaded 2-core machine (the 3000 launches took over
// 9 minutes there): every count to 64, then every 37th and the edges (999 to 1001 splits around
// the 1000 keys, and 1500).
bool split_count_tested(int splits) {
  return !KATTN_DEVICE_SHAPED_HOST || splits <= 64 || splits % 37 == 0 || (splits >= 999 && splits <= 1001) ||
         splits == 1500;
}

TEST(SplitKV, EverySplitCountFromOneTo1500Over1000KeysInDouble) {
  // Decode (one query per sequence, GQA 2:1) and a short causal append (3 queries): the reference
  // once, then every split count; 1500 splits over 1000 keys leaves 500 empty chunks.
  for (const Shape shape : {Shape{2, 1, 1000, 4, 2, 16}, Shape{1, 3, 1000, 2, 1, 8}}) {
    Options opt;
    opt.causal = shape.Nq > 1;
    const std::uint64_t seed = fresh_seed();
    Problem<double> p(shape, seed);
    const Problem<double> ref = reference_of(p, opt);
    for (int splits = 1; splits <= 1500; ++splits) {
      if (!split_count_tested(splits)) continue;
      SCOPED_TRACE(describe(shape, opt) + " splits=" + std::to_string(splits) + " seed=" + std::to_string(seed));
      opt.splits = splits;
      poison(p.o);
      poison(p.lse);
      const SplitPlan plan = attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt);
      Kokkos::fence();
      ASSERT_EQ(plan.splits, splits);
      expect_close(p, ref, kDoubleTol, "splitkv");
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST(SplitKV, DoubleMatchesReferenceForEveryVariantShapeAndSplit) {
  const std::vector<Shape> shapes = {{1, 1, 1, 1, 1, 1},    {2, 1, 37, 2, 1, 16},  {3, 1, 129, 8, 1, 32},
                                     {2, 1, 257, 8, 8, 64}, {1, 4, 100, 16, 2, 24}, {2, 31, 97, 4, 2, 32},
                                     {1, 5, 300, 4, 4, 128}};
  for (const Shape& s : shapes)
    for (const Options& o : option_variants())
      for (int splits : {1, 2, 3, 7, 64}) check_splitkv<double>(s, o, splits);
}

TEST(SplitKV, DoubleMatchesReferenceForGqaRatiosAndHeadDims) {
  for (int ratio : {1, 2, 8})
    for (int d : {1, 5, 16, 17, 64, 100, 128, 256}) {
      Options causal;
      causal.causal = true;
      check_splitkv<double>({2, 1, 77, 2 * ratio, 2, d}, Options{}, 4);
      check_splitkv<double>({1, 2, 77, 2 * ratio, 2, d}, causal, 3);
    }
}

TEST(SplitKV, FixedChunksFromOneKeyToMoreThanTheSequence) {
  const Shape s{2, 2, 203, 4, 1, 16};
  for (std::int64_t chunk : {1, 7, 64, 100, 203, 1000}) {
    for (bool causal : {false, true}) {
      Options o;
      o.causal = causal;
      o.split_chunk = chunk;
      const std::uint64_t seed = fresh_seed();
      SCOPED_TRACE(describe(s, o) + " chunk=" + std::to_string(chunk) + " seed=" + std::to_string(seed));
      Problem<double> p(s, seed);
      const SplitPlan plan = attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, o);
      Kokkos::fence();
      EXPECT_EQ(plan.chunk, chunk);
      EXPECT_EQ(plan.splits, (203 + chunk - 1) / chunk);
      expect_close(p, reference_of(p, o), kDoubleTol, "splitkv chunk");
    }
  }
}

TEST(SplitKV, TileSizesAndSplitsTogether) {
  const Shape s{1, 3, 151, 8, 2, 12};
  for (int bk : {1, 3, 16, 40})
    for (int bq : {1, 5, 12, 24})
      for (int splits : {1, 4, 9}) {
        Options o;
        o.block_q = bq;
        o.block_k = bk;
        o.causal = (bk + bq) % 2 == 0;
        check_splitkv<double>(s, o, splits);
      }
}

TEST(SplitKV, PlannedSplitMatchesReference) {
  for (const Shape& s : {Shape{1, 1, 5000, 8, 1, 64}, Shape{1, 1, 4096, 2, 2, 32}, Shape{4, 1, 700, 4, 4, 16}}) {
    Options o;  // splits = 0: planned
    const std::uint64_t seed = fresh_seed();
    SCOPED_TRACE(describe(s, o) + " seed=" + std::to_string(seed));
    Problem<double> p(s, seed);
    const SplitPlan plan = attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, o);
    Kokkos::fence();
    EXPECT_GE(plan.splits, 1);
    expect_close(p, reference_of(p, o), kDoubleTol, "planned splitkv");
  }
}

TEST(SplitKV, FloatWithinRelativeBound) {
  for (const Shape& s : {Shape{2, 1, 1000, 8, 1, 128}, Shape{1, 1, 4097, 4, 4, 64}, Shape{3, 2, 333, 16, 2, 96}})
    for (const Options& o : option_variants())
      for (int splits : {1, 5, 32}) check_splitkv<float>(s, o, splits);
}

TEST(SplitKV, EmptyKeysAndRowsThatSeeNoKey) {
  Options causal;
  causal.causal = true;
  check_splitkv<double>({2, 3, 0, 4, 2, 8}, Options{}, 3);
  check_splitkv<double>({1, 10, 4, 2, 1, 8}, causal, 2);  // causal Nq > Nk: first rows see no key
  Options window;
  window.window_left = 0, window.window_right = 0;
  check_splitkv<double>({1, 8, 3, 1, 1, 4}, window, 5);
}

TEST(SplitKV, ResultDoesNotDependOnTheRunBitwise) {
  // The merge folds the splits in index order, so two runs agree to the last bit.
  Problem<float> p({2, 1, 3000, 8, 2, 64}, fresh_seed());
  Options o;
  o.splits = 11;
  attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, o);
  Kokkos::fence();
  const std::vector<double> o1 = to_host(p.o), l1 = to_host(p.lse);
  poison(p.o);
  attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, o);
  Kokkos::fence();
  const std::vector<double> o2 = to_host(p.o), l2 = to_host(p.lse);
  EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), o1.size() * sizeof(double)));
  EXPECT_EQ(0, std::memcmp(l1.data(), l2.data(), l1.size() * sizeof(double)));
}

TEST(SplitKV, OneSplitEqualsForward) {
  Problem<float> a({2, 1, 999, 8, 2, 128}, fresh_seed());
  Problem<float> b = a;
  b.o = View4<float>("o", 2, 1, 8, 128);
  b.lse = View3<float>("lse", 2, 8, 1);
  Options o;
  o.splits = 1;
  attention(TestSpace(), a.q, kv::dense(a.k, a.v), a.o, a.lse, o);
  attention(TestSpace(), b.q, kv::dense(b.k, b.v), b.o, b.lse, one_split(Options{}));
  Kokkos::fence();
  const std::vector<double> oa = to_host(a.o), ob = to_host(b.o);
  EXPECT_EQ(0, std::memcmp(oa.data(), ob.data(), oa.size() * sizeof(double)));
}

}  // namespace
}  // namespace test
}  // namespace kattn
