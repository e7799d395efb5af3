// Block-sparse attention (Options::block_mask, block_mask.hpp) against the float64 textbook oracle with the
// equivalent element mask (reference_masked.hpp): forward, split-KV, backward; random masks of
// density 0 to 1, tiles that do not divide N, per-head masks, GQA, causal/window/softcap, empty
// rows; the patterns and every refusal.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/errors.hpp"
#include "kattn/reference_masked.hpp"
#include "support.hpp"

namespace kattn {
namespace test {
namespace {

using Host4 = Kokkos::View<double****, Kokkos::LayoutRight, Kokkos::HostSpace>;
using Host3 = Kokkos::View<double***, Kokkos::LayoutRight, Kokkos::HostSpace>;

// A random [heads, ceil(Nq/B), ceil(Nk/B)] mask keeping each block with probability `density`.
BlockMask random_mask(std::int64_t B, int heads, std::int64_t Nq, std::int64_t Nk, double density, std::uint64_t seed) {
  const std::int64_t qb = (Nq + B - 1) / B, kb = (Nk + B - 1) / B;
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<std::uint8_t> dense(static_cast<std::size_t>(heads * qb * kb));
  for (auto& x : dense) x = u(gen) < density ? 1 : 0;
  return BlockMask::from_dense(B, heads, qb, kb, dense);
}

template <class View>
Host4 host_double4(const View& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  Host4 d("d", h.extent(0), h.extent(1), h.extent(2), h.extent(3));
  for (std::size_t i = 0; i < h.span(); ++i) d.data()[i] = static_cast<double>(h.data()[i]);
  return d;
}

struct Oracle {
  Host4 o;
  Host3 lse;
};

template <class T>
Oracle oracle(const Problem<T>& p, const BlockMask& m, const Options& opt) {
  const Shape& s = p.shape;
  Oracle r{Host4("o", s.B, s.Nq, s.Hq, s.D), Host3("lse", s.B, s.Hq, s.Nq)};
  reference_masked(host_double4(p.q), host_double4(p.k), host_double4(p.v), r.o, r.lse,
                   expand_block_mask(m, s.Nq, s.Nk), opt);
  return r;
}

template <class T>
void expect_matches(const Problem<T>& out, const Oracle& ref, const std::string& what) {
  expect_outputs_close(out.o, out.lse, std::vector<double>(ref.o.data(), ref.o.data() + ref.o.span()),
                       std::vector<double>(ref.lse.data(), ref.lse.data() + ref.lse.span()), what);
  // Rows that see no key: o = 0 exactly, lse = -inf (the oracle says which).
  const auto o = to_host(out.o);
  const auto lse = to_host(out.lse);
  const Shape& s = out.shape;
  for (int b = 0; b < s.B; ++b)
    for (int h = 0; h < s.Hq; ++h)
      for (int i = 0; i < s.Nq; ++i) {
        if (ref.lse(b, h, i) != -std::numeric_limits<double>::infinity()) continue;
        EXPECT_EQ(lse[static_cast<std::size_t>((b * s.Hq + h) * s.Nq + i)], -std::numeric_limits<double>::infinity())
            << what;
        for (int d = 0; d < s.D; ++d)
          EXPECT_EQ(o[static_cast<std::size_t>(((b * s.Nq + i) * s.Hq + h) * s.D + d)], 0.0) << what;
      }
}

template <class T>
void check_forward(const Shape& shape, std::int64_t B, int mask_heads, double density, const Options& opt) {
  const std::uint64_t seed = fresh_seed();
  const std::string what = describe(shape, opt) + " B=" + std::to_string(B) + " mask_heads=" +
                           std::to_string(mask_heads) + " density=" + std::to_string(density) +
                           " seed=" + std::to_string(seed);
  SCOPED_TRACE(what);
  Problem<T> p(shape, seed);
  const BlockMask m = random_mask(B, mask_heads, shape.Nq, shape.Nk, density, seed + 7);
  const Oracle ref = oracle(p, m, opt);
  attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, one_split(with_mask(opt, m)));
  Kokkos::fence();
  expect_matches(p, ref, "forward");
  // Split-KV: the planner's split (splits = 0), given split counts, fixed chunks (rounded up to
  // whole mask blocks).
  for (int splits : {0, 3, 1000, -37}) {
    Options so = opt;
    if (splits > 0)
      so.splits = splits;
    else
      so.split_chunk = -splits;
    poison(p.o);
    poison(p.lse);
    const SplitPlan plan = attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, with_mask(so, m));
    Kokkos::fence();
    expect_matches(p, ref, "splitkv splits=" + std::to_string(splits));
    if (plan.splits > 1) {
      EXPECT_EQ(plan.chunk % B, 0) << "split chunks hold whole mask blocks";
    }
  }
}

std::vector<Options> variants() {
  std::vector<Options> v(6);
  v[1].causal = true;
  v[2].window_left = 9, v[2].window_right = 4;
  v[3].causal = true, v[3].window_left = 20;
  v[4].softcap = 2.5, v[4].scale = 0.4;
  v[5].causal = true, v[5].softcap = 30.0;
  return v;
}

TEST(BlockSparse, DoubleMatchesMaskedTextbookForDensitiesShapesAndVariants) {
  // N not a multiple of the block nor of the tiles; GQA 1, 2, 8; Nq != Nk.
  const std::vector<Shape> shapes = {{1, 97, 97, 1, 1, 16}, {2, 70, 131, 4, 2, 8}, {1, 130, 45, 8, 1, 32},
                                     {1, 1, 200, 2, 2, 16}};
  for (const Shape& s : shapes)
    for (double density : {0.0, 0.1, 0.5, 1.0})
      for (std::int64_t B : {16, 40})
        for (const Options& o : variants()) check_forward<double>(s, B, 1, density, o);
}

TEST(BlockSparse, PerHeadMasksWithGqa) {
  for (const Shape& s : std::vector<Shape>{{1, 90, 77, 4, 1, 16}, {2, 33, 65, 6, 3, 8}, {1, 64, 64, 8, 2, 64}})
    for (double density : {0.2, 0.7})
      for (std::int64_t B : {8, 32}) {
        check_forward<double>(s, B, s.Hq, density, Options{});
        Options c;
        c.causal = true;
        check_forward<double>(s, B, s.Hq, density, c);
      }
}

TEST(BlockSparse, TilesStraddlingBlocksAndSmallBlocks) {
  // Tiles chosen in the options that do not align with the mask block: exact through masking.
  for (int bq : {8, 24, 64})
    for (int bk : {8, 40})
      for (std::int64_t B : {1, 3, 16, 50}) {
        Options o;
        o.block_q = bq;
        o.block_k = bk;
        check_forward<double>({1, 83, 101, 2, 1, 16}, B, 1, 0.4, o);
        o.causal = true;
        check_forward<double>({1, 83, 101, 2, 1, 16}, B, 2, 0.4, o);
      }
}

// Both tile layouts of the forward loop read the mask: row tiles (block_q <= 16 on the host:
// decode and short appends, several KV heads per team) and column tiles (prefill).
TEST(BlockSparse, RowAndColumnTilesBothReadTheMask) {
  const std::vector<Shape> shapes = {{2, 1, 300, 8, 4, 16}, {1, 2, 257, 16, 2, 32}, {3, 5, 90, 6, 3, 8}};
  for (const Shape& s : shapes)
    for (int bq : {0, 4, 16, 32})
      for (const Options& v : variants()) {
        Options o = v;
        o.block_q = bq;
        check_forward<double>(s, 16, s.Hq, 0.5, o);
        check_forward<double>(s, 7, 1, 0.3, o);
      }
}

// A NaN or an Inf in V of a key that a row's mask does not list never reaches that row (the
// textbook never reads it), in tiles that hold listed and unlisted keys alike (tiles straddling
// the mask blocks, per-head masks in one GQA group), in both layouts.
TEST(BlockSparse, NonFiniteValuesOfUnlistedKeysStayOut) {
  const Shape s{1, 37, 90, 4, 2, 16};
  for (int bq : {8, 24})
    for (int bk : {6, 16}) {
      const std::uint64_t seed = fresh_seed();
      SCOPED_TRACE("block_q=" + std::to_string(bq) + " block_k=" + std::to_string(bk) + " seed=" + std::to_string(seed));
      Problem<double> p(s, seed);
      auto v = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.v);
      for (int j : {3, 17, 42, 77})
        for (int hk = 0; hk < s.Hkv; ++hk) v(0, j, hk, j % s.D) = j % 2 ? std::numeric_limits<double>::quiet_NaN()
                                                                         : std::numeric_limits<double>::infinity();
      Kokkos::deep_copy(p.v, v);
      const BlockMask m = random_mask(4, s.Hq, s.Nq, s.Nk, 0.5, seed + 1);
      Options o;
      o.block_q = bq;
      o.block_k = bk;
      const Oracle ref = oracle(p, m, o);
      attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, one_split(with_mask(o, m)));
      Kokkos::fence();
      expect_matches(p, ref, "forward");
    }
}

TEST(BlockSparse, FloatMatchesMaskedTextbook) {
  for (double density : {0.05, 0.3, 1.0}) {
    check_forward<float>({1, 300, 300, 2, 1, 64}, 64, 1, density, Options{});
    Options c;
    c.causal = true;
    check_forward<float>({2, 129, 257, 4, 2, 128}, 32, 4, density, c);
  }
}

TEST(BlockSparse, FullMaskIsBitwiseTheDenseForwardWithTheSameTiles) {
  const Shape s{1, 150, 170, 4, 2, 32};
  Options o;
  o.block_q = 64;
  o.block_k = 32;
  o.causal = true;
  Problem<double> p(s, fresh_seed());
  attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, one_split(o));
  Kokkos::fence();
  const auto dense_o = to_host(p.o);
  const auto dense_lse = to_host(p.lse);
  poison(p.o);
  poison(p.lse);
  const BlockMask full = random_mask(32, 1, s.Nq, s.Nk, 1.0, 1);
  attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, one_split(with_mask(o, full)));
  Kokkos::fence();
  EXPECT_EQ(to_host(p.o), dense_o);
  EXPECT_EQ(to_host(p.lse), dense_lse);
}

TEST(BlockSparse, EmptyMaskGivesZeroOutputAndMinusInfinityLse) {
  const Shape s{2, 50, 60, 2, 1, 8};
  Problem<double> p(s, fresh_seed());
  const BlockMask none = random_mask(16, 1, s.Nq, s.Nk, 0.0, 1);
  attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, one_split(with_mask(Options{}, none)));
  Kokkos::fence();
  for (double x : to_host(p.o)) EXPECT_EQ(x, 0.0);
  for (double x : to_host(p.lse)) EXPECT_EQ(x, -std::numeric_limits<double>::infinity());
}

TEST(BlockSparse, PatternsMatchTheirDefinitionAndTheOracle) {
  const BlockPattern lg = parse_block_pattern("local:1,global:2");
  EXPECT_EQ(lg.local, 1);
  EXPECT_EQ(lg.global, 2);
  const BlockPattern sd = parse_block_pattern("strided:3,dilated:2:4");
  EXPECT_EQ(sd.stride, 3);
  EXPECT_EQ(sd.dilated_width, 2);
  EXPECT_EQ(sd.dilation, 4);
  // local:1 on 4 x 4 blocks: the tridiagonal band; global:1 adds the first row and column.
  const BlockMask band = make_block_mask(parse_block_pattern("local:1,global:1"), 10, 40, 40);
  const std::vector<std::uint8_t> want = {1, 1, 1, 1,  //
                                          1, 1, 1, 0,  //
                                          1, 1, 1, 1,  //
                                          1, 0, 1, 1};
  EXPECT_EQ(band.to_dense(), want);
  // dilated:1:2 on 5 x 5: distance 0 or 2.
  const BlockMask dil = make_block_mask(parse_block_pattern("dilated:1:2"), 4, 20, 20);
  EXPECT_TRUE(dil.listed(0, 2, 0) && dil.listed(0, 2, 2) && dil.listed(0, 2, 4));
  EXPECT_FALSE(dil.listed(0, 2, 1) || dil.listed(0, 2, 3));
  // Nk > Nq: the band follows the bottom-right diagonal.
  const BlockMask dec = make_block_mask(parse_block_pattern("local:0"), 8, 8, 64);
  EXPECT_EQ(dec.indices(), std::vector<std::int64_t>{7});
  // Strided pattern: every third block from the diagonal.
  const BlockMask st = make_block_mask(parse_block_pattern("strided:3"), 8, 64, 64);
  for (std::int64_t r = 0; r < 8; ++r)
    for (std::int64_t c = 0; c < 8; ++c) EXPECT_EQ(st.listed(0, r, c), (r > c ? r - c : c - r) % 3 == 0);

  for (const char* pattern : {"local:2,global:1", "strided:4,local:0", "dilated:2:3"}) {
    SCOPED_TRACE(pattern);
    const Shape s{1, 200, 200, 2, 1, 16};
    Problem<double> p(s, fresh_seed());
    const BlockMask m = make_block_mask(parse_block_pattern(pattern), 16, s.Nq, s.Nk);
    for (bool causal : {false, true}) {
      Options o;
      o.causal = causal;
      const Oracle ref = oracle(p, m, o);
      poison(p.o);
      attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, one_split(with_mask(o, m)));
      Kokkos::fence();
      expect_matches(p, ref, pattern);
    }
  }
}

// ---- backward ----------------------------------------------------------------------------

template <class T>
void check_backward(const Shape& s, std::int64_t B, int mask_heads, double density, const Options& opt) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(describe(s, opt) + " B=" + std::to_string(B) + " density=" + std::to_string(density) +
               " seed=" + std::to_string(seed));
  Problem<T> p(s, seed);
  View4<T> dout("do", s.B, s.Nq, s.Hq, s.D), dq("dq", s.B, s.Nq, s.Hq, s.D);
  View4<T> dk("dk", s.B, s.Nk, s.Hkv, s.D), dv("dv", s.B, s.Nk, s.Hkv, s.D);
  fill_normal(dout, seed + 3);
  const BlockMask m = random_mask(B, mask_heads, s.Nq, s.Nk, density, seed + 9);
  attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, one_split(with_mask(opt, m)));
  Kokkos::fence();
  Host4 rq("rq", s.B, s.Nq, s.Hq, s.D), rk("rk", s.B, s.Nk, s.Hkv, s.D), rv("rv", s.B, s.Nk, s.Hkv, s.D);
  reference_backward_masked(host_double4(p.q), host_double4(p.k), host_double4(p.v), host_double4(dout), rq, rk, rv,
                            expand_block_mask(m, s.Nq, s.Nk), opt);
  const auto flat = [](const Host4& h) { return std::vector<double>(h.data(), h.data() + h.span()); };
  std::vector<BackwardOptions> strategies(3);
  strategies[0].dq = DqStrategy::key_chunks, strategies[0].dq_chunks = 2;
  strategies[1].dq = DqStrategy::query_pass;
  strategies[2].dq = DqStrategy::atomic;
  for (const BackwardOptions& b : strategies) {
    SCOPED_TRACE(name(b.dq));
    poison(dq);
    poison(dk);
    poison(dv);
    attention_backward(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, dout, dq, dk, dv, with_mask(opt, m), b);
    Kokkos::fence();
    const double tol = std::is_same<T, double>::value ? 1e-11 : 1e-4;
    for (const auto& pair : {std::make_pair(&dq, &rq), std::make_pair(&dk, &rk), std::make_pair(&dv, &rv)}) {
      const Errors e = compare(to_host(*pair.first), flat(*pair.second));
      EXPECT_FALSE(e.nan_mismatch);
      if (std::is_same<T, double>::value)
        EXPECT_LE(e.max_abs, tol);
      else
        EXPECT_LE(e.rel, tol);
    }
  }
}

TEST(BlockSparse, BackwardMatchesMaskedTextbookGradients) {
  for (const Shape& s : std::vector<Shape>{{1, 97, 97, 2, 1, 16}, {2, 45, 130, 4, 2, 8}, {1, 130, 50, 1, 1, 32}})
    for (double density : {0.0, 0.15, 0.6, 1.0})
      for (const Options& o : variants()) {
        check_backward<double>(s, 16, 1, density, o);
        check_backward<double>(s, 24, s.Hq, density, o);
      }
  check_backward<float>({1, 256, 256, 2, 1, 64}, 64, 1, 0.3, Options{});
}

// ---- refusals ----------------------------------------------------------------------------

template <class F>
void expect_error(const F& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "expected kattn::Error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(BlockSparse, FrontDoorTakesTheMaskAsAnOption) {
  // Decode-shaped (one query) and prefill-shaped problems, with and without splits.
  for (int Nq : {1, 40})
    for (int splits : {0, 1, 3}) {
      const std::uint64_t seed = fresh_seed();
      Problem<double> p({1, Nq, 200, 4, 2, 16}, seed);
      const BlockMask m = random_mask(16, 4, Nq, 200, 0.4, seed + 7);
      Options opt;
      opt.splits = splits;
      opt.block_mask = &m;
      attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt);
      expect_matches(p, oracle(p, m, opt), "attention with opt.block_mask, Nq=" + std::to_string(Nq) +
                                               " splits=" + std::to_string(splits) + " seed=" + std::to_string(seed));
    }
}

TEST(BlockSparse, RefusesBadMasksNamingTheArgument) {
  expect_error([] { BlockMask::from_bsr(0, 1, 1, 1, {0, 0}, {}); }, "block_mask: expected a block size >= 1");
  expect_error([] { BlockMask::from_bsr(4, 1, 2, 2, {0, 1}, {0}); }, "expected 3 block row pointers");
  expect_error([] { BlockMask::from_bsr(4, 1, 2, 2, {1, 1, 1}, {0}); }, "must start at 0");
  expect_error([] { BlockMask::from_bsr(4, 1, 2, 2, {0, 2, 1}, {0, 1}); }, "must not decrease");
  expect_error([] { BlockMask::from_bsr(4, 1, 2, 2, {0, 1, 3}, {0, 1}); }, "last block row pointer");
  expect_error([] { BlockMask::from_bsr(4, 1, 2, 2, {0, 1, 2}, {0, 2}); }, "column index 2");
  expect_error([] { BlockMask::from_bsr(4, 1, 2, 2, {0, 2, 2}, {1, 0}); }, "strictly increasing");
  expect_error([] { BlockMask::from_bsr(4, 1, 2, 2, {0, 2, 2}, {1, 1}); }, "strictly increasing");
  expect_error([] { BlockMask::from_dense(4, 1, 2, 2, std::vector<int>{1, 0, 1}); }, "has 4 entries, got 3");

  const Shape s{1, 20, 30, 4, 2, 8};
  Problem<double> p(s, fresh_seed());
  const auto run = [&](const BlockMask& m) {
    return [&p, m] { attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, one_split(with_mask(Options{}, m))); };
  };
  expect_error(run(BlockMask{}), "block_mask: the mask is empty");
  expect_error(run(random_mask(8, 2, 20, 30, 0.5, 1)), "block_mask: expected 1 head (shared) or 4");
  expect_error(run(random_mask(8, 1, 30, 30, 0.5, 1)), "block_mask: expected 3 query blocks");
  expect_error(run(random_mask(8, 1, 20, 20, 0.5, 1)), "block_mask: expected 4 key blocks");
}

TEST(BlockSparse, RefusesBadPatterns) {
  expect_error([] { parse_block_pattern(""); }, "pattern: expected components");
  expect_error([] { parse_block_pattern("band:3"); }, "pattern: unknown component 'band:3'");
  expect_error([] { parse_block_pattern("local:x"); }, "pattern: expected an integer >= 0 in 'local:x'");
  expect_error([] { parse_block_pattern("local:-1"); }, "pattern: expected an integer >= 0");
  expect_error([] { parse_block_pattern("global:0"); }, "pattern: expected an integer >= 1");
  expect_error([] { parse_block_pattern("dilated:2"); }, "pattern: unknown component 'dilated:2'");
  expect_error([] { parse_block_pattern("local:1,local:2"); }, "given twice");
  expect_error([] { parse_block_pattern("local:1,"); }, "pattern: unknown component ''");
}

}  // namespace
}  // namespace test
}  // namespace kattn
