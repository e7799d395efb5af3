// Collective errors: a bad shape, dtype, option or split on any rank raises the same kattn::Error
// on every rank, and no rank hangs (ctest runs these under a timeout). Each rank compares its
// message with every other rank's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dist_support.hpp"
#include "kattn/distributed/attention.hpp"
#include "kattn/block_mask.hpp"
#include "kattn/ragged.hpp"

namespace kattn {
namespace test {
namespace {

// A valid local problem for ring attention: this rank's shard of N positions, contiguous split.
struct Local {
  View4<double> q, k, v, o;
  View3<double> lse;
  Local(int B, std::size_t n, int Hq, int Hkv, int D)
      : q("q", B, n, Hq, D), k("k", B, n, Hkv, D), v("v", B, n, Hkv, D), o("o", B, n, Hq, D), lse("lse", B, Hq, n) {
    fill_normal(q, 1);
    fill_normal(k, 2);
    fill_normal(v, 3);
  }
};

std::int64_t my_share(std::int64_t N) {
  return SequenceLayout(N, size_of(MPI_COMM_WORLD), dist::Sharding::contiguous).local_length(rank_of(MPI_COMM_WORLD));
}

TEST(DistErrors, EveryRankBadInItsOwnWayAllThrowTheLowestRanksError) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  const std::int64_t n = my_share(40);
  Local ok(1, n, 4, 2, 8);
  // Rank r breaks a different argument; everybody must report rank 0's (k's head dim).
  const std::size_t un = static_cast<std::size_t>(n);
  View4<double> bad_k("k", 1, un, 2, 6);
  View4<double> bad_v("v", 1, un + 1, 2, 8);
  View4<double> bad_o("o", 1, un, 3, 8);
  View3<double> bad_lse("lse", 1, 4, un + 2);
  const std::string msg = expect_same_error(
      [&] {
        switch (rank % 4) {
          case 0:
            dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), ok.q, kv::dense(bad_k, ok.v), ok.o, ok.lse);
            break;
          case 1:
            dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), ok.q, kv::dense(ok.k, bad_v), ok.o, ok.lse);
            break;
          case 2:
            dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), ok.q, kv::dense(ok.k, ok.v), bad_o, ok.lse);
            break;
          default:
            dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), ok.q, kv::dense(ok.k, ok.v), ok.o, bad_lse);
            break;
        }
      },
      "k: expected head dim 8 (from q), got 6");
  if (P > 1) {
    EXPECT_EQ(msg.rfind("kattn: rank 0: k:", 0), 0u) << msg;
  }
}

TEST(DistErrors, OnlyTheLastRankBad) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  const std::int64_t n = my_share(33);
  Local ok(2, n, 4, 2, 8);
  Options opt;
  Options bad = opt;
  bad.window_left = -7;
  const std::string msg = expect_same_error(
      [&] {
        dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), ok.q, kv::dense(ok.k, ok.v), ok.o, ok.lse,
                           rank == P - 1 ? bad : opt);
      },
      "window: expected a left bound >= 0 or -1");
  if (P > 1) {
    EXPECT_NE(msg.find("rank " + std::to_string(P - 1) + ": window"), std::string::npos) << msg;
  }
}

TEST(DistErrors, HeadDimDiffersAcrossRanks) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  if (P < 2) GTEST_SKIP() << "needs two ranks";
  const std::int64_t n = my_share(20);
  Local mine(1, n, 2, 1, rank == 1 ? 12 : 8);  // locally consistent, globally not
  expect_same_error(
      [&] {
        dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), mine.q, kv::dense(mine.k, mine.v), mine.o, mine.lse);
      },
      "q: expected head dim 8 (from rank 0), got 12 on rank 1");
}

TEST(DistErrors, DtypeDiffersAcrossRanks) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  if (P < 2) GTEST_SKIP() << "needs two ranks";
  const std::int64_t n = my_share(20);
  expect_same_error(
      [&] {
        if (rank == P - 1) {
          const std::size_t un = static_cast<std::size_t>(n);
          View4<float> q("q", 1, un, 2, 8), k("k", 1, un, 2, 8), v("v", 1, un, 2, 8), o("o", 1, un, 2, 8);
          dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), q, kv::dense(k, v), o);
        } else {
          Local d(1, n, 2, 2, 8);
          dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), d.q, kv::dense(d.k, d.v), d.o);
        }
      },
      "q: expected dtype f64 (from rank 0), got f32 on rank " + std::to_string(P - 1));
}

TEST(DistErrors, OptionsDifferAcrossRanks) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  if (P < 2) GTEST_SKIP() << "needs two ranks";
  Local d(1, my_share(30), 2, 1, 8);
  Options opt;
  opt.causal = rank == 1;
  expect_same_error(
      [&] { dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), d.q, kv::dense(d.k, d.v), d.o, d.lse, opt); },
      "options: expected causal false (from rank 0), got true on rank 1");
  DistOptions dd;
  dd.sharding = rank == P - 1 ? dist::Sharding::zigzag : dist::Sharding::contiguous;
  expect_same_error(
      [&] {
        dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), d.q, kv::dense(d.k, d.v), d.o, d.lse, Options{}, dd);
      },
      "options: expected sharding");
}

// A rank in another distributed call, or with DistOptions::communicate off, is refused on every
// rank (before, the ranks exchanged lists of different lengths, or one rank waited for transfers
// the others never sent).
TEST(DistErrors, RanksInDifferentCallsAllThrow) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  if (P < 2) GTEST_SKIP() << "needs two ranks";
  Local d(1, my_share(30), 2, 1, 8);
  expect_same_error(
      [&] {
        if (rank == 0)
          dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), d.q, kv::dense(d.k, d.v), d.o, d.lse);
        else
          dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), d.q, kv::dense(d.k, d.v), d.o, d.lse,
                          Options{}, with_scheme(dist::Scheme::sharded_kv));
      },
      "call: expected distributed call (0 ring forward, 1 ring backward, 2 sharded-kv forward, 3 ulysses forward, "
      "4 ulysses backward, 5 hybrid forward, 6 hybrid backward, 7 ring forward over a ragged batch, 8 ring "
      "backward over a ragged batch, 9 grid forward, 10 grid forward over a ragged batch, 11 grid backward, 12 grid backward over a ragged batch) 0 (from rank 0), got 2 on "
      "rank 1");
}

// The door takes every scheme; what a scheme does not take is refused on every rank alike, and a
// rank given another scheme than the others is in another call.
TEST(DistErrors, SchemesRefuseWhatTheyDoNotTake) {
  const auto space = Kokkos::DefaultExecutionSpace();
  Local d(1, my_share(30), 2, 1, 8);
  View4<double> dq("dq", d.q.extent(0), d.q.extent(1), 2, 8), dk("dk", d.k.extent(0), d.k.extent(1), 1, 8),
      dv("dv", d.k.extent(0), d.k.extent(1), 1, 8);
  expect_same_error(
      [&] {
        dist::attention_backward(MPI_COMM_WORLD, space, d.q, kv::dense(d.k, d.v), d.o, d.lse, d.o, dq, dk, dv,
                                 Options{}, BackwardOptions{}, with_scheme(dist::Scheme::sharded_kv));
      },
      "scheme: sharded-kv has no backward");
  // A 16-bit cache under float queries: the ring and sharded_kv, not head sharding.
  View4<bf16> k16("k16", d.k.extent(0), d.k.extent(1), 1, 8), v16("v16", d.k.extent(0), d.k.extent(1), 1, 8);
  View4<float> qf("qf", d.q.extent(0), d.q.extent(1), 2, 8), of("of", d.q.extent(0), d.q.extent(1), 2, 8);
  expect_same_error(
      [&] {
        dist::attention(MPI_COMM_WORLD, space, qf, kv::dense(k16, v16), of, Options{},
                        with_scheme(dist::Scheme::ulysses));
      },
      "scheme: ulysses takes q, k and v of one storage type");
  // A ragged batch goes round the ring (or the grid, forward only).
  const std::int64_t n = static_cast<std::int64_t>(d.q.extent(1));
  const auto layout = make_ragged_layout<TestMemory>(indptr_view({0, n}), indptr_view({0, n}));
  View3<double> q3("q3", n, 2, 8), k3("k3", n, 1, 8), o3("o3", n, 2, 8);
  expect_same_error(
      [&] {
        dist::attention(MPI_COMM_WORLD, space, q3, kv::ragged(k3, k3, layout), o3, Options{},
                        with_scheme(dist::Scheme::hybrid));
      },
      "scheme: a ragged batch takes scheme ring or grid, got hybrid");
  // Switching the transfers off (DistOptions::communicate) is for the ring forward alone.
  DistOptions quiet;
  quiet.communicate = false;
  expect_same_error(
      [&] {
        dist::attention_backward(MPI_COMM_WORLD, space, d.q, kv::dense(d.k, d.v), d.o, d.lse, d.o, dq, dk, dv,
                                 Options{}, BackwardOptions{}, quiet);
      },
      "communicate: false is for the ring's forward alone; the backward always transfers");
  quiet.scheme = dist::Scheme::sharded_kv;
  expect_same_error(
      [&] { dist::attention(MPI_COMM_WORLD, space, d.q, kv::dense(d.k, d.v), d.o, d.lse, Options{}, quiet); },
      "communicate: false is for the ring's forward alone; sharded-kv always transfers");
  // Schemes by name, as the CLI and Python give them.
  EXPECT_EQ(dist::scheme_named("sharded-kv"), dist::Scheme::sharded_kv);
  EXPECT_EQ(dist::scheme_named("sharded_kv"), dist::Scheme::sharded_kv);
  EXPECT_EQ(dist::scheme_named(dist::name(dist::Scheme::hybrid)), dist::Scheme::hybrid);
  EXPECT_THROW(dist::scheme_named("decode", "--dist"), Error);
}

TEST(DistErrors, CommunicateDiffersAcrossRanks) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  if (P < 2) GTEST_SKIP() << "needs two ranks";
  Local d(1, my_share(30), 2, 1, 8);
  DistOptions dd;
  dd.communicate = rank != P - 1;
  expect_same_error(
      [&] {
        dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), d.q, kv::dense(d.k, d.v), d.o, d.lse,
                             Options{}, dd);
      },
      "options: expected communicate true (from rank 0), got false on rank " + std::to_string(P - 1));
}

TEST(DistErrors, ShardLengthsInconsistentWithTheSplit) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  if (P < 2) GTEST_SKIP() << "any length is a valid split of itself over one rank";
  // The last rank holds two positions too many: the total then splits otherwise.
  const std::int64_t n = my_share(8 * P) + (rank == P - 1 ? 2 : 0);
  Local d(1, n, 2, 1, 8);
  expect_same_error(
      [&] { dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), d.q, kv::dense(d.k, d.v), d.o, d.lse); },
      "(a contiguous split of " + std::to_string(8 * P + 2) + " positions over " + std::to_string(P) + " ranks)");
  // Zigzag expects another split of the same total than contiguous (11 P + 1 positions: the
  // contiguous split gives rank 0 the extra one, the zigzag split the last rank).
  {
    Local c(1, my_share(11 * P + 1), 2, 1, 8);
    DistOptions zz;
    zz.sharding = dist::Sharding::zigzag;
    expect_same_error(
        [&] {
          dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), c.q, kv::dense(c.k, c.v), c.o, c.lse, Options{}, zz);
        },
        "zigzag split of");
  }
}

TEST(DistErrors, DeterministicDecodeNeedsChunkAlignedShards) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  if (P < 2) GTEST_SKIP() << "one shard always starts at 0";
  View4<double> q("q", 1, 1, 2, 8), o("o", 1, 1, 2, 8);
  View4<double> k("k", 1, 10, 2, 8), v("v", 1, 10, 2, 8);  // 10 keys per rank, chunk 16
  fill_normal(q, 1);
  fill_normal(k, 2);
  fill_normal(v, 3);
  DistOptions d;
  d.deterministic = true;
  d.chunk = 16;
  (void)rank;
  expect_same_error(
      [&] { dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), q, kv::dense(k, v), o, Options{},
                        with_scheme(dist::Scheme::sharded_kv, d)); },
      "k: deterministic decode needs every rank's KV shard to start at a multiple of the chunk (16 keys); "
      "rank 1 starts at key 10");
}

TEST(DistErrors, DecodeQueriesMustBeReplicated) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  if (P < 2) GTEST_SKIP() << "needs two ranks";
  const int nq = rank == 1 ? 3 : 2;
  View4<double> q("q", 1, nq, 2, 8), o("o", 1, nq, 2, 8), k("k", 1, 5, 2, 8), v("v", 1, 5, 2, 8);
  expect_same_error([&] { dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), q, kv::dense(k, v), o, Options{},
                                          with_scheme(dist::Scheme::sharded_kv)); },
                    "q: expected query positions 2 (from rank 0), got 3 on rank 1");
  DistOptions d;
  d.root = P;
  View4<double> q2("q", 1, 2, 2, 8), o2("o", 1, 2, 2, 8);
  expect_same_error([&] { dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), q2, kv::dense(k, v), o2, Options{},
                                          with_scheme(dist::Scheme::sharded_kv, d)); },
                    "root: expected a rank of the communicator");
}

TEST(DistErrors, BlockMaskRefusedOnEveryRankAlike) {
  // A mask is of the whole sequence, not of a shard: every distributed call refuses it, on every
  // rank with the same message, and a mask on one rank only is an options mismatch.
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  Local d(1, my_share(16), 2, 1, 8);
  const BlockMask mask = BlockMask::from_bsr(16, 1, 1, 1, {0, 1}, {0});
  Options masked;
  masked.block_mask = &mask;
  expect_same_error(
      [&] { dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), d.q, kv::dense(d.k, d.v), d.o, d.lse, masked); },
      "block_mask: the distributed calls take none");
  View4<double> dout("dout", 1, d.q.extent(1), 2, 8), dq("dq", 1, d.q.extent(1), 2, 8), dk("dk", 1, d.k.extent(1), 1, 8),
      dv("dv", 1, d.k.extent(1), 1, 8);
  fill_normal(dout, 4);
  expect_same_error(
      [&] {
        dist::attention_backward(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), d.q, kv::dense(d.k, d.v), d.o, d.lse, dout, dq, dk,
                            dv, masked);
      },
      "block_mask: the distributed calls take none");
  View4<double> q("q", 1, 2, 2, 8), o("o", 1, 2, 2, 8);
  fill_normal(q, 5);
  expect_same_error([&] { dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), q, kv::dense(d.k, d.v), o, masked,
                                          with_scheme(dist::Scheme::sharded_kv)); },
                    "block_mask: the distributed calls take none");
  if (P < 2) return;
  Options one_rank = rank == 1 ? masked : Options{};
  expect_same_error(
      [&] { dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), d.q, kv::dense(d.k, d.v), d.o, d.lse, one_rank); },
      "options: expected block_mask false (from rank 0), got true on rank 1");
}

TEST(DistErrors, AfterAnErrorTheNextCallWorks) {
  // Nothing is left in flight by a refused call.
  Local d(1, my_share(12), 2, 1, 8);
  Options bad;
  bad.softcap = -1;
  expect_same_error(
      [&] { dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), d.q, kv::dense(d.k, d.v), d.o, d.lse, bad); },
      "softcap");
  EXPECT_NO_THROW(dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), d.q, kv::dense(d.k, d.v), d.o, d.lse));
}

}  // namespace
}  // namespace test
}  // namespace kattn
