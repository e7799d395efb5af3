// The grid scheme's backward (DistOptions::grid): every grid shape rows x cols that divides the
// rank count, contiguous and zigzag shards, causal/window/softcap, GQA, Nq != Nk, lengths that do
// not divide, sinks and ALiBi, float and host staging, against the one-rank backward (itself
// tested against the float64 textbook) at 1e-12 in double; the bytes each rank sends against
// dist::traffic; the deterministic mode bitwise equal to one rank's deterministic ring at every rank
// count and shape; and a failure on one rank in the middle of the call reported on every rank with
// no hang. 16-bit storage: test_ring16.cpp; ragged batches: test_grid.cpp.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "dist_grads.hpp"
#include "dist_support.hpp"
#include "kattn/attention.hpp"
#include "kattn/backward.hpp"
#include "kattn/distributed/attention.hpp"
#include "kattn/distributed/traffic.hpp"

namespace kattn {
namespace test {
namespace {

DistOptions grid_options(const DistOptions::GridShape& shape, Sharding sh, bool deterministic = false) {
  DistOptions d = with_scheme(dist::Scheme::grid);
  d.grid = shape, d.sharding = sh, d.deterministic = deterministic, d.chunk = 8;
  return d;
}

template <class T>
LocalGrads<T> run_grid_backward(MPI_Comm comm, const Grads<T>& g, const Options& opt, const DistOptions& d) {
  return sharded_backward(comm, g, d, [&](const ShardedGrads<T>& x, LocalGrads<T>& r) {
    r.stats = dist::attention_backward(comm, Kokkos::DefaultExecutionSpace(), x.q, kv::dense(x.k, x.v), x.o, x.lse,
                                       x.dout, r.dq, r.dk, r.dv, opt, BackwardOptions{}, d);
  });
}

std::vector<Options> variants() {
  std::vector<Options> v = backward_variants();
  v.resize(7);
  v[5].window_left = 0, v[5].window_right = -1;  // each query sees one key: most blocks skipped
  v[6].causal = true, v[6].block_q = 5, v[6].block_k = 3;
  return v;
}

// Every shape and sharding of this rank count, both modes: the one-rank gradients at 1e-12 (double)
// and the modelled bytes.
void check_grid_backward(const Shape& s, const Options& opt) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(describe(s, opt) + " seed=" + std::to_string(seed));
  Grads<double> g(s, seed, opt);
  g.backward_one_rank(opt);
  const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
  for (const DistOptions::GridShape& shape : grid_shapes(P))
    for (Sharding sh : {Sharding::contiguous, Sharding::zigzag})
      for (bool det : {false, true}) {
        const DistOptions d = grid_options(shape, sh, det);
        SCOPED_TRACE(grid_name(d));
        const LocalGrads<double> r = run_grid_backward(MPI_COMM_WORLD, g, opt, d);
        expect_grads(r, g, rank, kDoubleTol, "grid backward");
        EXPECT_EQ(r.stats.bytes_sent, modelled_sent(s, sizeof(double), opt, d, dist::Pass::backward));
      }
}

TEST(GridBackward, DoubleMatchesOneRankForEveryShape) {
  const std::vector<Shape> shapes = {
      {1, 1, 1, 1, 1, 4}, {2, 37, 37, 2, 1, 16}, {1, 53, 53, 4, 2, 8}, {1, 3, 3, 2, 2, 4}};
  for (const Shape& s : shapes)
    for (const Options& o : variants()) check_grid_backward(s, o);
}

TEST(GridBackward, DoubleMatchesOneRankForGqaAndCrossLengths) {
  for (int ratio : {1, 2, 8}) check_grid_backward({2, 29, 29, 2 * ratio, 2, 24}, variants()[1]);
  for (const Options& o : {variants()[0], variants()[1], variants()[3]}) {
    check_grid_backward({1, 23, 61, 4, 2, 8}, o);
    check_grid_backward({1, 61, 23, 4, 2, 8}, o);
  }
}

// Sinks: the gradients of one rank and the sinks' gradient with the same bits; ALiBi: the gradients.
TEST(GridBackward, SinksAndAlibiMatchOneRank) {
  Options sinks;
  sinks.causal = true;
  sinks.sinks = {1.0, -2.0, 0.5, -std::numeric_limits<double>::infinity()};
  const Shape s{2, 37, 37, 4, 2, 16};
  Grads<double> g(s, shared_seed(), sinks);
  const BackwardInfo one = g.backward_one_rank(sinks);
  for (const DistOptions::GridShape& shape : grid_shapes(size_of(MPI_COMM_WORLD))) {
    const DistOptions d = grid_options(shape, Sharding::zigzag);
    SCOPED_TRACE(grid_name(d));
    const LocalGrads<double> r = run_grid_backward(MPI_COMM_WORLD, g, sinks, d);
    expect_grads(r, g, rank_of(MPI_COMM_WORLD), kDoubleTol, "grid backward with sinks");
    EXPECT_EQ(r.stats.dsinks, one.dsinks);
  }
  for (bool causal : {false, true}) {
    Options alibi;
    alibi.causal = causal;
    alibi.alibi_slopes = {0.5, 0.0, 0.25, 1.5};
    check_grid_backward(s, alibi);
  }
}

// Float (at the one-rank float gradients' tolerance) and every message through host staging buffers.
TEST(GridBackward, FloatAndStaging) {
  const Shape s{1, 67, 67, 4, 2, 32};
  Grads<float> g(s, shared_seed(), variants()[3]);
  g.backward_one_rank(variants()[3]);
  for (const DistOptions::GridShape& shape : grid_shapes(size_of(MPI_COMM_WORLD)))
    for (bool staged : {false, true}) {
      DistOptions d = grid_options(shape, Sharding::zigzag);
      if (staged) d.staging = dist::Staging::host;
      SCOPED_TRACE(grid_name(d) + (staged ? " staged" : ""));
      const LocalGrads<float> r = run_grid_backward(MPI_COMM_WORLD, g, variants()[3], d);
      EXPECT_EQ(r.stats.staged, staged);
      expect_grads(r, g, rank_of(MPI_COMM_WORLD), 1e-5, "grid backward (float)");
    }
}

// The deterministic grid: the bits of one rank's deterministic ring, for every rank count of this
// run (prefix communicators), every shape of it, both shardings.
TEST(GridBackward, DeterministicBitwiseEqualToOneRank) {
  for (const auto& [s, opt] : grid_deterministic_cases()) {
    const std::uint64_t seed = shared_seed();
    SCOPED_TRACE(describe(s, opt) + " seed=" + std::to_string(seed));
    Grads<double> g(s, seed, opt);
    DistOptions one;
    one.deterministic = true, one.chunk = 8;
    const LocalGrads<double> r1 = run_grid_backward(MPI_COMM_SELF, g, opt, one);
    g.dq = r1.dq, g.dk = r1.dk, g.dv = r1.dv;  // one rank's shards are the whole arrays
    Prefixes prefixes;
    for (MPI_Comm comm : prefixes.comms) {
      if (comm == MPI_COMM_NULL) continue;
      for (const DistOptions::GridShape& shape : grid_shapes(size_of(comm)))
        for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
          const DistOptions d = grid_options(shape, sh, true);
          const LocalGrads<double> r = run_grid_backward(comm, g, opt, d);
          expect_grads_bitwise(r, g, rank_of(comm), "P=" + std::to_string(size_of(comm)) + " " + grid_name(d));
        }
    }
  }
}

// A progress callback that throws on one rank in the middle of the grid's backward: the same error
// on every rank (the failure latch), no hang, and the next call works.
TEST(DistMidCallErrors, GridBackwardProgressThrowsOnOneRank) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  const Shape s{1, 30, 30, 2, 1, 8};
  Grads<double> g(s, shared_seed(), Options{});
  for (const DistOptions::GridShape& shape : grid_shapes(P))
    for (bool det : {false, true})
      for (int failing = 0; failing < P; ++failing) {
        DistOptions d = grid_options(shape, Sharding::contiguous, det);
        d.chunk = 4;
        SCOPED_TRACE(grid_name(d) + " failing rank " + std::to_string(failing));
        const std::string text = "test: progress stopped on rank " + std::to_string(failing);
        d.progress = [&](int step, int) {
          if (rank == failing && step == 1) throw Error(text);
        };
        expect_same_error([&] { run_grid_backward(MPI_COMM_WORLD, g, Options{}, d); },
                          P > 1 ? "rank " + std::to_string(failing) + ": " + text : text);
        d.progress = nullptr;
        EXPECT_NO_THROW(run_grid_backward(MPI_COMM_WORLD, g, Options{}, d));
      }
}

}  // namespace
}  // namespace test
}  // namespace kattn
