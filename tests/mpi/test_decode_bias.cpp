// A bias tensor (Options::bias) under sharded_kv (distributed decode): each rank passes the bias of
// the scores it computes, every query row over its own keys, [B or 1, Hq or 1, Nq, nk_r], and no
// bias value moves. o and lse against the float64 reference of the whole cache with the whole bias
// (every rank's columns in rank order) at 1e-12, with causal masks, windows, softcap, GQA, sinks,
// ALiBi, split counts, every broadcast, a bf16 and a boolean bias, even, uneven and empty shards,
// MPI_Reduce to a root; the deterministic chain bitwise one rank's; bf16 storage within the 16-bit
// rule; and the refusals (a bias of every key, a scheme that would move bias values) the same on
// every rank.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "dist_support.hpp"
#include "kattn/distributed/attention.hpp"
#include "kattn/score_bias.hpp"
#include "ragged_support.hpp"
#include "storage16_support.hpp"

namespace kattn {
namespace test {
namespace {

// The columns (keys, dim 3) [start, start + n) of a bias-shaped array: what the rank holding those
// keys passes.
template <class B>
View4<B> bias_columns(const View4<B>& global, std::int64_t start, std::int64_t n) {
  View4<B> local("bias_columns", global.extent(0), global.extent(1), global.extent(2), static_cast<std::size_t>(n));
  auto g = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), global);
  auto l = Kokkos::create_mirror_view(local);
  for (std::size_t b = 0; b < g.extent(0); ++b)
    for (std::size_t h = 0; h < g.extent(1); ++h)
      for (std::size_t i = 0; i < g.extent(2); ++i)
        for (std::int64_t j = 0; j < n; ++j) l(b, h, i, j) = g(b, h, i, start + j);
  Kokkos::deep_copy(local, l);
  return local;
}

// This rank's first key and key count under shard lengths lens.
std::pair<std::int64_t, std::int64_t> my_keys(const std::vector<std::int64_t>& lens, MPI_Comm comm = MPI_COMM_WORLD) {
  const int rank = rank_of(comm);
  std::int64_t start = 0;
  for (int r = 0; r < rank; ++r) start += lens[r];
  return {start, lens[rank]};
}

template <class View>
auto key_rows(const View& global, std::int64_t start, std::int64_t n) {
  return Kokkos::subview(global, Kokkos::ALL, std::make_pair(start, start + n), Kokkos::ALL, Kokkos::ALL);
}

enum class BiasKind { f64, bf16, boolean };

struct BiasCase {
  int batch = 1, heads = 1;  // the bias's: 1 or the problem's
  BiasKind kind = BiasKind::f64;
};

std::string bias_name(const BiasCase& bc) {
  return " bias " + std::to_string(bc.batch) + "x" + std::to_string(bc.heads) +
         (bc.kind == BiasKind::bf16 ? " bf16" : bc.kind == BiasKind::boolean ? " bool" : "");
}

// A global bias [batch, heads, Nq, Nk] of the case's kind (a boolean one keeps most keys and every
// row's first, so that no row is empty by the bias alone), and its columns on this rank.
struct GlobalBias {
  View4<double> f64;
  View4<bf16> b16;
  View4<bool> mask;
  GlobalBias(const BiasCase& bc, const Shape& s, std::uint64_t seed)
      : f64("bias", bc.batch, bc.heads, s.Nq, s.Nk),
        b16("bias16", bc.batch, bc.heads, s.Nq, s.Nk),
        mask("mask", bc.batch, bc.heads, s.Nq, s.Nk) {
    fill_normal(f64, seed);
    auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), f64);
    auto h16 = Kokkos::create_mirror_view(b16);
    auto hm = Kokkos::create_mirror_view(mask);
    for (std::size_t i = 0; i < h.span(); ++i) {
      h16.data()[i] = narrow<bf16>(h.data()[i]);
      hm.data()[i] = i % static_cast<std::size_t>(s.Nk) == 0 || h.data()[i] > -0.8;
    }
    Kokkos::deep_copy(b16, h16);
    Kokkos::deep_copy(mask, hm);
  }
  ScoreBias whole(BiasKind kind) const {
    return kind == BiasKind::f64 ? score_bias(f64) : kind == BiasKind::bf16 ? score_bias(b16) : score_bias(mask);
  }
};

// This rank's columns of a GlobalBias, kept alive for the call.
struct MyColumns {
  View4<double> f64;
  View4<bf16> b16;
  View4<bool> mask;
  MyColumns(const GlobalBias& g, std::int64_t start, std::int64_t n)
      : f64(bias_columns(g.f64, start, n)), b16(bias_columns(g.b16, start, n)), mask(bias_columns(g.mask, start, n)) {}
  ScoreBias bias(BiasKind kind) const {
    return kind == BiasKind::f64 ? score_bias(f64) : kind == BiasKind::bf16 ? score_bias(b16) : score_bias(mask);
  }
};

// Decode with this rank's columns of the bias against the float64 reference with the whole bias.
void check_decode_bias(const Shape& s, const Options& opt, const BiasCase& bc, const DistOptions& d = {}) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(describe(s, opt) + bias_name(bc) + " root=" + std::to_string(d.root) + " seed=" + std::to_string(seed));
  Problem<double> g(s, seed);
  const GlobalBias bias(bc, s, seed + 11);
  Options whole = opt;
  whole.bias = bias.whole(bc.kind);
  const Problem<double> ref = reference_of(g, whole);
  const SequenceLayout rows(s.Nq, 1, Sharding::contiguous);
  for (const auto& lens : splits_of(s.Nk, size_of(MPI_COMM_WORLD))) {
    const auto [start, n] = my_keys(lens);
    const MyColumns mine(bias, start, n);
    Options local = opt;
    local.bias = mine.bias(bc.kind);
    View4<double> o("o", s.B, s.Nq, s.Hq, s.D);
    View3<double> lse("lse", s.B, s.Hq, s.Nq);
    poison(o), poison(lse);
    dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), g.q,
                    kv::dense(key_rows(g.k, start, n), key_rows(g.v, start, n)), o, lse, local,
                    with_scheme(dist::Scheme::sharded_kv, d));
    Kokkos::fence();
    if (d.root < 0 || rank_of(MPI_COMM_WORLD) == d.root)
      expect_shard_close(o, lse, ref, rows, 0, kDoubleTol, "decode with a bias, lens=" + describe(lens));
    else
      for (double x : to_host(o)) ASSERT_TRUE(std::isnan(x)) << "a non-root o was written";
  }
}

std::vector<Options> variants() {
  std::vector<Options> v(7);
  v[1].causal = true;
  v[2].window_left = 17;
  v[3].causal = true, v[3].window_left = 30, v[3].softcap = 3.0;
  v[4].splits = 7;
  v[5].causal = true, v[5].sinks = {0.5, -1.0, 2.0, 0.0};
  v[6].causal = true, v[6].alibi_slopes = {0.5, 0.25, 0.125, 0.0625};
  return v;
}

TEST(DecodeBias, MatchesTheReferenceWithTheWholeBias) {
  const std::vector<BiasCase> biases = {{2, 4}, {1, 4}, {2, 1}, {1, 1}, {2, 4, BiasKind::bf16},
                                        {1, 4, BiasKind::boolean}};
  for (const Options& o : variants())
    for (const BiasCase& bc : biases) check_decode_bias({2, 3, 97, 4, 2, 16}, o, bc);  // GQA 2:1
  check_decode_bias({1, 1, 1, 4, 4, 8}, variants()[1], {1, 4});     // one key: all ranks but one hold none
  check_decode_bias({2, 5, 130, 4, 1, 32}, variants()[3], {2, 4});  // GQA 4:1
}

TEST(DecodeBias, ReduceToOneRank) {
  DistOptions d;
  d.root = size_of(MPI_COMM_WORLD) - 1;
  for (const Options& o : {variants()[0], variants()[5]}) check_decode_bias({2, 2, 90, 4, 2, 16}, o, {2, 4}, d);
}

// Shards for deterministic mode: every shard starts at a multiple of the chunk; rank 0 holds none
// when there are two or more ranks.
std::vector<std::int64_t> chunk_aligned(int P, std::int64_t chunk) {
  std::vector<std::int64_t> lens(P);
  for (int r = 0; r < P; ++r) lens[r] = (P > 1 && r == 0) ? 0 : chunk * r + (r == P - 1 ? 5 : 0);
  if (P == 1) lens[0] = 3 * chunk + 5;
  return lens;
}

// The deterministic chain with each rank's columns: the bits of one rank with the whole bias, and
// the reference's values.
TEST(DecodeBias, DeterministicBitsAreOneRanks) {
  const int P = size_of(MPI_COMM_WORLD);
  const std::vector<std::int64_t> lens = chunk_aligned(P, 8);
  int Nk = 0;
  for (std::int64_t n : lens) Nk += static_cast<int>(n);
  DistOptions d = with_scheme(dist::Scheme::sharded_kv);
  d.deterministic = true, d.chunk = 8;
  for (const Options& opt : {variants()[0], variants()[3], variants()[5]})
    for (const BiasCase& bc : {BiasCase{2, 4}, BiasCase{1, 1, BiasKind::bf16}}) {
      const Shape s{2, 3, Nk, 4, 2, 8};
      const std::uint64_t seed = shared_seed();
      SCOPED_TRACE(describe(s, opt) + bias_name(bc) + " seed=" + std::to_string(seed));
      Problem<double> g(s, seed);
      const GlobalBias bias(bc, s, seed + 11);
      Options whole = opt;
      whole.bias = bias.whole(bc.kind);
      const auto run = [&](MPI_Comm comm, const std::vector<std::int64_t>& l, const Options& o) {
        const auto [start, n] = my_keys(l, comm);
        View4<double> out("o", s.B, s.Nq, s.Hq, s.D);
        View3<double> lse("lse", s.B, s.Hq, s.Nq);
        dist::attention(comm, Kokkos::DefaultExecutionSpace(), g.q,
                        kv::dense(key_rows(g.k, start, n), key_rows(g.v, start, n)), out, lse, o, d);
        Kokkos::fence();
        return std::make_pair(out, lse);
      };
      const auto alone = run(MPI_COMM_SELF, {s.Nk}, whole);
      const auto [start, n] = my_keys(lens);
      const MyColumns mine(bias, start, n);
      Options local = opt;
      local.bias = mine.bias(bc.kind);
      const auto all = run(MPI_COMM_WORLD, lens, local);
      const std::vector<double> a = to_host(alone.first), b = to_host(all.first);
      const std::vector<double> la = to_host(alone.second), lb = to_host(all.second);
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(double)), 0) << "o differs from one rank's";
      EXPECT_EQ(std::memcmp(la.data(), lb.data(), la.size() * sizeof(double)), 0) << "lse differs from one rank's";
      expect_shard_close(all.first, all.second, reference_of(g, whole), SequenceLayout(s.Nq, 1, Sharding::contiguous),
                         0, kDoubleTol, "deterministic decode with a bias");
    }
}

// bf16 q, k, v, o (lse float) with a float bias: the 16-bit rule against the reference with the
// whole bias.
TEST(DecodeBias, Bf16StorageMeetsTheRule) {
  for (const Options& opt : {variants()[0], variants()[3], variants()[5]}) {
    const Shape s{2, 2, 301, 4, 2, 32};
    const std::uint64_t seed = shared_seed();
    const std::string what = describe(s, opt) + " bf16 seed=" + std::to_string(seed);
    SCOPED_TRACE(what);
    Problem16<bf16> p(s, seed);
    View4<float> bias("bias", 1, s.Hq, s.Nq, s.Nk);
    fill_normal(bias, seed + 5);
    Options whole = opt;
    whole.bias = score_bias(bias);
    for (const auto& lens : splits_of(s.Nk, size_of(MPI_COMM_WORLD))) {
      const auto [start, n] = my_keys(lens);
      const View4<float> mine = bias_columns(bias, start, n);
      Options local = opt;
      local.bias = score_bias(mine);
      poison(p.o), poison(p.lse);
      dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), p.q,
                      kv::dense(key_rows(p.k, start, n), key_rows(p.v, start, n)), p.o, p.lse, local,
                      with_scheme(dist::Scheme::sharded_kv));
      Kokkos::fence();
      const auto host = p.host();
      auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), bias);
      Options on_host = whole;
      on_host.bias = score_bias(hb);
      expect_16bit_rule<bf16>(host.params(), on_host, to_host(p.o), to_host(p.lse), what + " lens=" + describe(lens));
    }
  }
}

TEST(DistErrors, DecodeBiasOfTheWrongShapeOrScheme) {
  const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
  const std::vector<std::int64_t> lens = splits_of(30, P)[0];
  const std::int64_t n = lens[rank];
  View4<double> q("q", 1, 3, 2, 8), o("o", 1, 3, 2, 8), k("k", 1, n, 1, 8), v("v", 1, n, 1, 8);
  fill_normal(q, 1), fill_normal(k, 2), fill_normal(v, 3);
  const auto space = Kokkos::DefaultExecutionSpace();
  const DistOptions d = with_scheme(dist::Scheme::sharded_kv);
  // Every key of the cache instead of this rank's (every rank wrong when P > 1: the lowest rank's
  // error everywhere).
  View4<double> all_keys("bias", 1, 2, 3, 30), mine("bias", 1, 2, 3, n), rows("bias", 1, 2, 1, n);
  Options opt;
  opt.bias = score_bias(all_keys);
  const std::string n0 = std::to_string(lens[0]);
  if (P > 1)
    expect_same_error([&] { dist::attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, opt, d); },
                      "bias: expected [1 or 1, 2 or 1, 3, " + n0 + "], got [1, 2, 3, 30]");
  // One query row, not the three every rank holds.
  opt.bias = score_bias(rows);
  expect_same_error([&] { dist::attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, opt, d); },
                    "bias: expected [1 or 1, 2 or 1, 3, " + n0 + "], got [1, 2, 1, " + n0 + "]");
  // The grid would move bias values.
  opt.bias = score_bias(mine);
  expect_same_error(
      [&] { dist::attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, opt, with_scheme(dist::Scheme::grid)); },
      "bias: the distributed calls take one with scheme ring, ulysses, hybrid or sharded-kv, got grid");
}

}  // namespace
}  // namespace test
}  // namespace kattn
