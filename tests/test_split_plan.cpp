// The split planner: its decisions for the cases the design names, and properties that hold for
// every input (units fit the processors, chunks are whole granules of at least min_chunk, ...).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/core/split_planner.hpp"
#include "support.hpp"

namespace kattn {
namespace test {
namespace {

TEST(SplitPlan, OneSequenceEightKvHeads32KOn132Sms) {
  const SplitPlan p = plan_splits(SplitWork::dense(1, 8, 32768, 1), 132);
  EXPECT_EQ(p.splits, 16);
  EXPECT_EQ(p.chunk, 2048);
  EXPECT_EQ(p.units, 128);
  EXPECT_EQ(p.units_unsplit, 8);
}

TEST(SplitPlan, LargeBatchesShortContextsAndOneProcessorGetNoSplit) {
  EXPECT_EQ(plan_splits(SplitWork::dense(64, 8, 32768, 1), 132).splits, 1);   // 512 units fill 132 SMs
  EXPECT_EQ(plan_splits(SplitWork::dense(1, 8, 300, 1), 132).splits, 1);      // shorter than two chunks
  EXPECT_EQ(plan_splits(SplitWork::dense(1, 1, 1 << 20, 1), 1).splits, 1);    // one processor
  EXPECT_EQ(plan_splits(SplitWork::dense(1, 8, 65536, 1), 8).splits, 1);      // as many units as threads
  const SplitPlan two = plan_splits(SplitWork::dense(1, 1, 65536, 1), 2);     // one unit, two threads
  EXPECT_EQ(two.splits, 2);
  EXPECT_EQ(two.units, 2);
}

TEST(SplitPlan, PropertiesOverManyInputs) {
  for (std::int64_t batch : {1, 2, 3, 8, 17, 64})
    for (int heads : {1, 2, 8, 32})
      for (std::int64_t kv : {1, 100, 511, 512, 1000, 4096, 32768, 131072, 1 << 20})
        for (int procs : {1, 2, 16, 108, 132, 1024}) {
          SCOPED_TRACE("B=" + std::to_string(batch) + " H=" + std::to_string(heads) + " N=" + std::to_string(kv) +
                       " P=" + std::to_string(procs));
          const SplitWork w = SplitWork::dense(batch, heads, kv, 1);
          const SplitPlan p = plan_splits(w, procs);
          const SplitPlanKnobs knobs;
          EXPECT_EQ(p.units_unsplit, batch * heads);
          if (p.splits == 1) {
            EXPECT_EQ(p.chunk, 0);
            EXPECT_EQ(p.units, p.units_unsplit);
            continue;
          }
          EXPECT_LT(p.units_unsplit, procs);                  // split only when the machine is not full
          EXPECT_LE(p.units, procs);                          // ... and into at most one wave
          EXPECT_GT(p.units, p.units_unsplit);
          EXPECT_GE(p.chunk, knobs.min_chunk);                // chunks pay for their merge
          EXPECT_EQ(p.chunk % knobs.granule, 0);              // whole key tiles
          EXPECT_EQ(p.splits, (kv + p.chunk - 1) / p.chunk);  // the chunks cover the keys
          EXPECT_EQ(p.units, split_units(w, p.chunk));
          EXPECT_LE(p.splits, knobs.max_splits);              // the workspace stays bounded
          // The smallest such chunk: one granule less would not fit, or cut into too many splits.
          const std::int64_t smaller = p.chunk - knobs.granule;
          if (smaller >= knobs.min_chunk) {
            EXPECT_TRUE(split_units(w, smaller) > procs || (kv + smaller - 1) / smaller > knobs.max_splits);
          }
        }
}

TEST(SplitPlan, RaggedBatchesCutTheLongestSequencesMost) {
  SplitWork w;
  w.head_groups = 1;
  w.kv_len = {100000, 1000, 50, 0};
  w.row_tiles = {1, 1, 1, 1};
  const SplitPlan p = plan_splits(w, 64);
  ASSERT_GT(p.splits, 1);
  EXPECT_EQ(p.units, split_units(w, p.chunk));
  EXPECT_LE(p.units, 64);
  EXPECT_EQ(p.splits, (100000 + p.chunk - 1) / p.chunk);
}

TEST(SplitPlan, BadInputIsRefused) {
  EXPECT_THROW(plan_splits(SplitWork::dense(1, 1, 100, 1), 0), Error);
  SplitWork w = SplitWork::dense(2, 1, 100, 1);
  w.row_tiles.pop_back();
  EXPECT_THROW(plan_splits(w, 4), Error);
}

TEST(SplitPlan, ProcessorsOfTheExecutionSpace) {
  EXPECT_GE(processors(TestSpace()), 1);
}

TEST(SplitPlan, ForADenseShapeOnTheExecutionSpace) {
  const TestSpace space;
  const SplitPlan p = plan_splits(space, 1, 1, 32768, 64, 8, 128, Options{}, 132);
  EXPECT_EQ(p.processors, 132);
  EXPECT_GT(p.splits, 1);
  EXPECT_LE(p.units, 132);
  Options fixed;
  fixed.splits = 5;
  EXPECT_EQ(plan_splits(space, 2, 1, 1000, 8, 8, 64, fixed).splits, 5);
  fixed.split_chunk = 300;
  EXPECT_EQ(plan_splits(space, 2, 1, 1000, 8, 8, 64, fixed).splits, 4);
  EXPECT_THROW(plan_splits(space, 1, 1, 100, 6, 4, 64), Error);
}

// Decode's row tiles pack a sequence's KV heads into one team, and unpack them where a split the
// options fix would leave processors idle: the largest divisor of the packing whose teams fill
// the processors. When the planner splits, it fills them itself.
TEST(SplitPlan, RowTileTeamsUnpackHeadsForIdleProcessors) {
  using Space = TestSpace;
  const auto team_heads = [](int units, int procs) {
    return row_tile_team_heads<Space, float>(8, 1, 128, units, procs);
  };
  const int packed = row_tile_heads<Space, float>(8, 1, 128);
  ASSERT_EQ(8 % packed, 0);
  for (int units : {1, 2, 3})
    for (int procs = 1; procs <= 20; ++procs) {
      const int h = team_heads(units, procs);
      SCOPED_TRACE("units " + std::to_string(units) + ", procs " + std::to_string(procs));
      EXPECT_EQ(packed % h, 0);
      if (h > 1) {
        EXPECT_GE(units * (8 / h), procs);  // every processor has a team
      }
      for (int bigger = h + 1; bigger <= packed; ++bigger) {
        if (packed % bigger == 0) {
          EXPECT_LT(units * (8 / bigger), procs);  // no larger packing would do
        }
      }
    }
  if (packed == 8) {  // host tuning: one sequence of 8 KV heads on 2 threads runs as 2 teams
    EXPECT_EQ(team_heads(1, 2), 4);
    Options one;
    one.splits = 1;
    EXPECT_EQ(plan_splits(Space(), 1, 1, 65536, 8, 8, 128, one, 2).units, 2);
    EXPECT_EQ(plan_splits(Space(), 1, 1, 65536, 8, 8, 128, one, 1).units, 1);
    Options chunk;
    chunk.split_chunk = 1 << 20;  // one chunk
    EXPECT_EQ(plan_splits(Space(), 1, 1, 65536, 8, 8, 128, chunk, 2).units, 2);
    const SplitPlan planned = plan_splits(Space(), 1, 1, 65536, 8, 8, 128, Options{}, 2);
    EXPECT_EQ(planned.units_unsplit, 1);  // heads packed: the planner splits the keys instead
    EXPECT_EQ(planned.units, 2);
  }
  EXPECT_EQ(fixed_split_units(3, 1, 1000, Options{}), 0);
  Options fixed;
  fixed.splits = 2;
  EXPECT_EQ(fixed_split_units(3, 1, 1000, fixed), 6);
  fixed.split_chunk = 300;  // overrides splits: 4 chunks of the longest sequence
  EXPECT_EQ(fixed_split_units(3, 1, 1000, fixed), 12);
}

}  // namespace
}  // namespace test
}  // namespace kattn
