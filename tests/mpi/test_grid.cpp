// The grid scheme (DistOptions::grid): every grid shape rows x cols that divides the rank count,
// contiguous and zigzag shards, causal/window/softcap, GQA, Nq != Nk, lengths that do not divide,
// sinks and ALiBi, 16-bit K/V, against the float64 textbook at 1e-12; the bytes each rank sends
// against dist::traffic; the deterministic mode bitwise equal to one rank's ring at every rank count
// and shape; ragged batches, forward and backward; and the errors (a shape that is not the rank
// count, communicate = false, a failing progress callback) the same on every rank with no hang. The
// dense backward: test_grid_backward.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "dist_forward.hpp"
#include "dist_support.hpp"
#include "kattn/attention.hpp"
#include "kattn/distributed/attention.hpp"
#include "kattn/distributed/ragged_layout.hpp"
#include "kattn/distributed/traffic.hpp"
#include "kattn/ragged.hpp"
#include "ragged_support.hpp"
#include "storage16_support.hpp"

namespace kattn {
namespace test {
namespace {

std::vector<Options> variants() {
  std::vector<Options> v(7);
  v[1].causal = true;
  v[2].window_left = 5, v[2].window_right = 3;
  v[3].causal = true, v[3].window_left = 7;
  v[4].softcap = 2.5;
  v[5].window_left = 0, v[5].window_right = -1;  // each query sees one key: most blocks skipped
  v[6].causal = true, v[6].block_q = 5, v[6].block_k = 3;
  return v;
}

// Every shape and sharding of this rank count: the textbook at 1e-12 and the modelled bytes.
void check_grid(const Shape& s, const Options& opt, bool deterministic = false) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(describe(s, opt) + " seed=" + std::to_string(seed));
  Problem<double> g(s, seed);
  const Problem<double> ref = reference_of(g, opt);
  const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
  for (const DistOptions::GridShape& shape : grid_shapes(P))
    for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
      DistOptions d = with_scheme(dist::Scheme::grid);
      d.grid = shape, d.sharding = sh, d.deterministic = deterministic, d.chunk = 8;
      SCOPED_TRACE(grid_name(d));
      const ShardedRun<double> r = sharded_dense_forward(MPI_COMM_WORLD, g, opt, d);
      expect_shard_close(r.o, r.lse, ref, r.q_layout, rank, kDoubleTol, "grid");
      EXPECT_EQ(r.stats.bytes_sent, modelled_sent(s, sizeof(double), opt, d, dist::Pass::forward));
      // 1 x P moves what the ring moves.
      if (shape.rows == 1) {
        EXPECT_EQ(r.stats.bytes_sent,
                  modelled_sent(s, sizeof(double), opt, with_scheme(dist::Scheme::ring, d), dist::Pass::forward));
      }
    }
}

TEST(GridForward, DoubleMatchesReferenceForEveryShape) {
  const std::vector<Shape> shapes = {
      {1, 1, 1, 1, 1, 4}, {2, 37, 37, 2, 1, 16}, {1, 53, 53, 4, 2, 8}, {2, 13, 13, 8, 1, 5}, {1, 3, 3, 2, 2, 4}};
  for (const Shape& s : shapes)
    for (const Options& o : variants()) check_grid(s, o);
}

TEST(GridForward, DoubleMatchesReferenceForGqaAndCrossLengths) {
  for (int ratio : {1, 2, 8})
    for (const Options& o : variants()) check_grid({2, 29, 29, 2 * ratio, 2, 24}, o);
  for (const Options& o : variants()) {
    check_grid({1, 23, 61, 4, 2, 8}, o);
    check_grid({1, 61, 23, 4, 2, 8}, o);
  }
}

TEST(GridForward, SinksAndAlibiMatchReference) {
  Options sinks;
  sinks.causal = true;
  sinks.sinks = {1.5, -0.5, 3.0, -std::numeric_limits<double>::infinity()};
  check_grid({2, 45, 45, 4, 2, 16}, sinks);
  for (bool causal : {false, true}) {
    Options alibi;
    alibi.causal = causal;
    alibi.alibi_slopes = {0.5, 0.0, 0.125, 2.0};
    check_grid({2, 45, 45, 4, 2, 16}, alibi);
    check_grid({1, 23, 61, 4, 2, 8}, alibi);
  }
}

// Every message through host staging buffers (as for device memory without a GPU-aware MPI).
TEST(GridForward, StagedThroughHostBuffers) {
  const std::uint64_t seed = shared_seed();
  const Shape s{2, 37, 37, 4, 2, 8};
  Problem<double> g(s, seed);
  const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
  for (const Options& opt : {variants()[0], variants()[3]}) {
    const Problem<double> ref = reference_of(g, opt);
    for (const DistOptions::GridShape& shape : grid_shapes(P))
      for (bool det : {false, true}) {
        DistOptions d = with_scheme(dist::Scheme::grid);
        d.grid = shape, d.sharding = Sharding::zigzag, d.deterministic = det, d.chunk = 8;
        d.staging = dist::Staging::host;
        SCOPED_TRACE(grid_name(d) + " " + describe(s, opt));
        const ShardedRun<double> r = sharded_dense_forward(MPI_COMM_WORLD, g, opt, d);
        EXPECT_TRUE(r.stats.staged);
        expect_shard_close(r.o, r.lse, ref, r.q_layout, rank, kDoubleTol, "grid, staged");
      }
  }
}

// The deterministic mode's partials are exact too (chunk 8: several chunks per shard).
TEST(GridForward, DeterministicMatchesReference) {
  for (const Options& o : variants()) check_grid({2, 37, 37, 4, 2, 8}, o, true);
  check_grid({1, 23, 61, 4, 2, 8}, variants()[1], true);
}

// 16-bit K/V under float queries: K/V travel as stored (2 bytes a value in the modelled bytes), the
// rows against the float64 textbook of the rounded keys at float tolerance.
TEST(GridForward, Bf16KeysMatchReference) {
  const Shape s{2, 41, 41, 4, 2, 16};
  const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
  for (bool causal : {false, true}) {
    Options opt;
    opt.causal = causal;
    Problem<float> g(s, shared_seed());
    (void)rounded_copy<bf16>(g.k);  // g's keys and values hold bf16 values from here on
    (void)rounded_copy<bf16>(g.v);
    const Problem<double> ref = reference_of(g, opt);
    for (const DistOptions::GridShape& shape : grid_shapes(P)) {
      DistOptions d = with_scheme(dist::Scheme::grid);
      d.grid = shape, d.sharding = Sharding::zigzag;
      SCOPED_TRACE(grid_name(d) + (causal ? " causal" : ""));
      const SequenceLayout l = dist::layout_of(s.Nq, P, d);
      const View4<float> q = shard(g.q, l, rank, "q");
      const View4<bf16> k = rounded_copy<bf16>(shard(g.k, l, rank, "k")),
                        v = rounded_copy<bf16>(shard(g.v, l, rank, "v"));
      const std::size_t n = q.extent(1);
      View4<float> o("o", s.B, n, s.Hq, s.D);
      View3<float> lse("lse", s.B, s.Hq, n);
      poison(o);
      poison(lse);
      const dist::DistStats st =
          dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), q, kv::dense(k, v), o, lse, opt, d);
      expect_shard_close(o, lse, ref, l, rank, kFloatTol, "grid, bf16 keys");
      EXPECT_EQ(st.bytes_sent, modelled_sent(s, 2, opt, d, dist::Pass::forward));
    }
  }
}

// The deterministic grid: the bits of one rank's deterministic ring, for every rank count of this
// run (prefix communicators), every shape of it, both shardings.
TEST(GridDeterministic, BitwiseEqualToOneRank) {
  for (const auto& [s, opt] : grid_deterministic_cases()) {
    const std::uint64_t seed = shared_seed();
    SCOPED_TRACE(describe(s, opt) + " seed=" + std::to_string(seed));
    Problem<double> g(s, seed);
    DistOptions one;
    one.deterministic = true, one.chunk = 8;
    const ShardedRun<double> r1 = sharded_dense_forward(MPI_COMM_SELF, g, opt, one);
    Prefixes prefixes;
    for (MPI_Comm comm : prefixes.comms) {
      if (comm == MPI_COMM_NULL) continue;
      for (const DistOptions::GridShape& shape : grid_shapes(size_of(comm)))
        for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
          DistOptions d = with_scheme(dist::Scheme::grid, one);
          d.grid = shape, d.sharding = sh;
          const ShardedRun<double> r = sharded_dense_forward(comm, g, opt, d);
          expect_shard_bitwise(r.o, r.lse, r1.o, r1.lse, r.q_layout, rank_of(comm),
                               "P=" + std::to_string(size_of(comm)) + " " + grid_name(d));
        }
    }
  }
}

TEST(GridForward, ChosenShapeIsTheMostSquare) {
  const DistOptions d = with_scheme(dist::Scheme::grid);
  const std::vector<std::vector<int>> cases = {{1, 1, 1}, {2, 1, 2}, {3, 1, 3}, {4, 2, 2},
                                               {6, 2, 3}, {8, 2, 4}, {9, 3, 3}, {12, 3, 4}};
  for (const auto& c : cases) {
    const DistOptions::GridShape s = dist::grid_shape(c[0], d);
    EXPECT_EQ(s.rows, c[1]) << c[0];
    EXPECT_EQ(s.cols, c[2]) << c[0];
  }
  // {0, 0} in a call: the same as naming that shape.
  const Shape s{1, 31, 31, 2, 1, 8};
  Problem<double> g(s, shared_seed());
  const Options opt;
  DistOptions named = d;
  named.grid = dist::grid_shape(size_of(MPI_COMM_WORLD), d);
  const ShardedRun<double> a = sharded_dense_forward(MPI_COMM_WORLD, g, opt, d),
                           b = sharded_dense_forward(MPI_COMM_WORLD, g, opt, named);
  const auto ao = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a.o),
             bo = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b.o);
  const auto al = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a.lse),
             bl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b.lse);
  EXPECT_EQ(std::memcmp(ao.data(), bo.data(), ao.span() * sizeof(double)), 0) << "chosen vs named: o";
  EXPECT_EQ(std::memcmp(al.data(), bl.data(), al.span() * sizeof(double)), 0) << "chosen vs named: lse";
}

// Rows `rows` of a packed [total, H, D] array.
View3<double> packed_rows(const View3<double>& global, const std::vector<std::int64_t>& rows, const char* label) {
  const int H = global.extent(1), D = global.extent(2);
  View3<double> local(std::string(label), rows.size(), H, D);
  auto g = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), global);
  auto l = Kokkos::create_mirror_view(local);
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (int h = 0; h < H; ++h)
      for (int x = 0; x < D; ++x) l(r, h, x) = g(rows[r], h, x);
  Kokkos::deep_copy(local, l);
  return local;
}

// This rank's packed rows next to the global rows they stand for (any rank of view).
template <class V>
Errors compare_packed(const V& local, const V& global, const std::vector<std::int64_t>& rows, bool bitwise = false) {
  auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), local);
  auto hg = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), global);
  const std::size_t per_row = local.extent(0) ? local.size() / local.extent(0) : 0;
  std::vector<double> a, b;
  Errors bits;
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (std::size_t x = 0; x < per_row; ++x) {
      a.push_back(hl.data()[r * per_row + x]);
      b.push_back(hg.data()[rows[r] * per_row + x]);
      if (std::memcmp(&a.back(), &b.back(), sizeof(double)) != 0) bits.max_abs = 1;
    }
  return bitwise ? bits : compare(a, b);
}

// A ragged batch over the grid: the dense grid on each sequence (lengths in whole pieces, an empty
// sequence among them), forward and backward against the one-process ragged calls at 1e-12, every
// shape and sharding; in deterministic mode (any lengths) the bits of the one-rank deterministic
// ragged ring.
void check_grid_ragged(const std::vector<std::int64_t>& q_lens, const std::vector<std::int64_t>& kv_lens,
                       const Options& opt, int Hq, int Hkv, bool deterministic) {
  const std::uint64_t seed = shared_seed();
  const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD), D = 8;
  std::string lens;
  for (std::size_t b = 0; b < q_lens.size(); ++b)
    lens += std::to_string(q_lens[b]) + "/" + std::to_string(kv_lens[b]) + " ";
  SCOPED_TRACE("lengths " + lens + describe(Shape{1, 1, 1, Hq, Hkv, D}, opt) + (deterministic ? " deterministic" : "") +
               " seed=" + std::to_string(seed));
  const std::vector<std::int64_t> gq = indptr_of(q_lens), gk = indptr_of(kv_lens);
  View3<double> q("q", gq.back(), Hq, D), k("k", gk.back(), Hkv, D), v("v", gk.back(), Hkv, D),
      dout("dout", gq.back(), Hq, D);
  fill_normal(q, seed), fill_normal(k, seed + 1), fill_normal(v, seed + 2), fill_normal(dout, seed + 3);
  View3<double> ro("o", gq.back(), Hq, D), rdq("dq", gq.back(), Hq, D), rdk("dk", gk.back(), Hkv, D),
      rdv("dv", gk.back(), Hkv, D);
  View2<double> rlse("lse", gq.back(), Hq);
  DistOptions one;
  one.deterministic = deterministic, one.chunk = 8;
  const auto whole = kv::ragged(k, v, make_ragged_layout<TestMemory>(indptr_view(gq), indptr_view(gk)));
  if (deterministic) {  // one rank's deterministic ragged ring
    dist::attention(MPI_COMM_SELF, TestSpace(), q, whole, ro, rlse, opt, one);
    dist::attention_backward(MPI_COMM_SELF, TestSpace(), q, whole, ro, rlse, dout, rdq, rdk, rdv, opt, {}, one);
  } else {
    attention(TestSpace(), q, whole, ro, rlse, opt);
    attention_backward(TestSpace(), q, whole, ro, rlse, dout, rdq, rdk, rdv, opt);
  }
  for (const DistOptions::GridShape& shape : grid_shapes(P))
    for (Sharding sh : {Sharding::contiguous, Sharding::zigzag}) {
      DistOptions d = with_scheme(dist::Scheme::grid, one);
      d.grid = shape, d.sharding = sh;
      SCOPED_TRACE(grid_name(d));
      const std::vector<std::int64_t> qr = dist::ragged_positions(gq, rank, P, d),
                                      kr = dist::ragged_positions(gk, rank, P, d);
      const auto layout = make_ragged_layout<TestMemory>(indptr_view(dist::ragged_local_indptr(gq, rank, P, d)),
                                                         indptr_view(dist::ragged_local_indptr(gk, rank, P, d)));
      const auto mine = kv::ragged(packed_rows(k, kr, "k"), packed_rows(v, kr, "v"), layout);
      const View3<double> lq = packed_rows(q, qr, "q");
      View3<double> o("o", qr.size(), Hq, D), dq("dq", qr.size(), Hq, D), dk("dk", kr.size(), Hkv, D),
          dv("dv", kr.size(), Hkv, D);
      View2<double> lse("lse", qr.size(), Hq);
      poison(o), poison(lse), poison(dq), poison(dk), poison(dv);
      dist::attention(MPI_COMM_WORLD, TestSpace(), lq, mine, o, lse, opt, d);
      dist::attention_backward(MPI_COMM_WORLD, TestSpace(), lq, mine, o, lse, packed_rows(dout, qr, "dout"), dq, dk, dv,
                               opt, {}, d);
      const std::pair<Errors, const char*> errors[] = {
          {compare_packed(o, ro, qr, deterministic), "o"},     {compare_packed(lse, rlse, qr, deterministic), "lse"},
          {compare_packed(dq, rdq, qr, deterministic), "dq"}, {compare_packed(dk, rdk, kr, deterministic), "dk"},
          {compare_packed(dv, rdv, kr, deterministic), "dv"}};
      for (const auto& [e, name] : errors) {
        EXPECT_FALSE(e.nan_mismatch) << name;
        EXPECT_LE(e.max_abs, deterministic ? 0.0 : kDoubleTol) << name;
      }
    }
}

TEST(GridRagged, MatchesOneProcessRagged) {
  const int P = size_of(MPI_COMM_WORLD), unit = 2 * P;  // whole pieces under both shardings
  std::vector<Options> v(4);
  v[1].causal = true;
  v[2].causal = true, v[2].window_left = 5;
  v[3].window_left = 3, v[3].window_right = 2, v[3].softcap = 4.0;
  for (const Options& opt : v)
    for (int Hkv : {2, 1}) {
      check_grid_ragged({3 * unit, 0, unit, 5 * unit}, {3 * unit, 0, unit, 5 * unit}, opt, 2, Hkv, false);
      check_grid_ragged({2 * unit, unit}, {4 * unit, 3 * unit}, opt, 4, Hkv, false);  // keys of other lengths
    }
}

TEST(GridRagged, DeterministicBitsAreOneRanksRing) {
  Options causal;
  causal.causal = true;
  for (const Options& opt : {Options{}, causal}) {
    check_grid_ragged({23, 0, 7, 41}, {23, 0, 7, 41}, opt, 2, 1, true);  // any lengths
    check_grid_ragged({9, 30}, {17, 30}, opt, 4, 2, true);
  }
}

// A valid dense problem: this rank's shard of 30 positions.
struct GridLocal {
  View4<double> q, k, v, o;
  View3<double> lse;
  explicit GridLocal(const DistOptions& d = {}) {
    const std::size_t n = dist::layout_of(30, size_of(MPI_COMM_WORLD), d).local_length(rank_of(MPI_COMM_WORLD));
    q = View4<double>("q", 1, n, 2, 8), k = View4<double>("k", 1, n, 1, 8), v = View4<double>("v", 1, n, 1, 8);
    o = View4<double>("o", 1, n, 2, 8), lse = View3<double>("lse", 1, 2, n);
    fill_normal(q, 1);
    fill_normal(k, 2);
    fill_normal(v, 3);
  }
};

TEST(DistErrors, GridShapeMustBeTheRankCount) {
  const int P = size_of(MPI_COMM_WORLD);
  const auto space = Kokkos::DefaultExecutionSpace();
  GridLocal l;
  DistOptions d = with_scheme(dist::Scheme::grid);
  d.grid = {P + 1, 1};
  expect_same_error(
      [&] { dist::attention(MPI_COMM_WORLD, space, l.q, kv::dense(l.k, l.v), l.o, l.lse, Options{}, d); },
      "grid: expected rows x cols = the " + std::to_string(P) + " ranks, got " + std::to_string(P + 1) + " x 1");
  d.grid = {2, 0};
  expect_same_error([&] { dist::attention(MPI_COMM_WORLD, space, l.q, kv::dense(l.k, l.v), l.o, l.lse, Options{}, d); },
                    "grid: expected rows and cols >= 1, or both 0 (chosen), got 2 x 0");
  EXPECT_EQ(dist::scheme_named("grid"), dist::Scheme::grid);
  EXPECT_STREQ(dist::name(dist::Scheme::grid), "grid");
}

TEST(DistErrors, GridAlwaysTransfers) {
  const auto space = Kokkos::DefaultExecutionSpace();
  GridLocal l;
  DistOptions quiet = with_scheme(dist::Scheme::grid);
  quiet.communicate = false;
  expect_same_error(
      [&] { dist::attention(MPI_COMM_WORLD, space, l.q, kv::dense(l.k, l.v), l.o, l.lse, Options{}, quiet); },
      "communicate: false is for the ring's forward alone; grid always transfers");
}

// A progress callback that throws on one rank in the middle of the grid: the same error on every
// rank (the failure latch), no hang, and the next call works.
TEST(DistMidCallErrors, GridProgressThrowsOnOneRank) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  const auto space = Kokkos::DefaultExecutionSpace();
  for (const DistOptions::GridShape& shape : grid_shapes(P))
    for (bool det : {false, true})
      for (int failing = 0; failing < P; ++failing) {
        DistOptions d = with_scheme(dist::Scheme::grid);
        d.grid = shape, d.deterministic = det, d.chunk = 4;
        GridLocal l(d);
        SCOPED_TRACE(grid_name(d) + " failing rank " + std::to_string(failing));
        const std::string text = "test: progress stopped on rank " + std::to_string(failing);
        d.progress = [&](int step, int) {
          if (rank == failing && step == 1) throw Error(text);
        };
        expect_same_error(
            [&] { dist::attention(MPI_COMM_WORLD, space, l.q, kv::dense(l.k, l.v), l.o, l.lse, Options{}, d); },
            P > 1 ? "rank " + std::to_string(failing) + ": " + text : text);
        d.progress = nullptr;
        EXPECT_NO_THROW(dist::attention(MPI_COMM_WORLD, space, l.q, kv::dense(l.k, l.v), l.o, l.lse, Options{}, d));
      }
}

}  // namespace
}  // namespace test
}  // namespace kattn
