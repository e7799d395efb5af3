// Distributed decode over a bf16 / fp16 KV cache, under 16-bit or float queries, against the
// float64 reference of the whole cache on the same rounded inputs: FlashAttention's accuracy rule
// for 16-bit queries (storage16_support.hpp), float's bound for float queries; even, uneven and
// empty shards, GQA, one key, more splits than keys, the deterministic chain (the same bits on
// every rank count), and MPI_Reduce to a root that leaves the other ranks' o alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "dist_support.hpp"
#include "kattn/distributed/attention.hpp"
#include "ragged_support.hpp"
#include "storage16_support.hpp"

namespace kattn {
namespace test {
namespace {

// This rank's keys [B, lens[rank], Hkv, D] of a global cache, as a strided view into it.
template <class View>
auto local_keys(const View& global, const std::vector<std::int64_t>& lens, MPI_Comm comm = MPI_COMM_WORLD) {
  const int rank = rank_of(comm);
  std::int64_t start = 0;
  for (int r = 0; r < rank; ++r) start += lens[r];
  return Kokkos::subview(global, Kokkos::ALL, std::make_pair(start, start + lens[rank]), Kokkos::ALL, Kokkos::ALL);
}

// Every rank holds rank 0's bits (root -1: MPI_Allreduce), or only the root's o was written (the
// others' still poisoned). Collective on every rank either way.
void expect_landed(const std::vector<double>& o, const DistOptions& d, const std::string& what) {
  if (d.root >= 0) {
    if (rank_of(MPI_COMM_WORLD) != d.root) {
      for (double x : o) ASSERT_TRUE(std::isnan(x)) << what << ": a rank other than the root had its o written";
    }
    return;
  }
  std::vector<double> first = o;
  MPI_Bcast(first.data(), static_cast<int>(first.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  EXPECT_EQ(std::memcmp(o.data(), first.data(), o.size() * sizeof(double)), 0) << what << ": o differs from rank 0's";
}

// 16-bit q, k, v, o (lse float): the rule on the ranks that got the result.
template <class S>
void check_decode16(const Shape& s, const Options& opt, const DistOptions& d = {},
                    std::vector<std::vector<std::int64_t>> shardings = {}) {
  if (shardings.empty()) shardings = splits_of(s.Nk, size_of(MPI_COMM_WORLD));
  const std::uint64_t seed = shared_seed();
  const std::string what = std::string(storage_name<S>()) + " " + describe(s, opt) +
                           (d.deterministic ? " deterministic" : "") + " root=" + std::to_string(d.root) +
                           " seed=" + std::to_string(seed);
  SCOPED_TRACE(what);
  Problem16<S> p(s, seed);
  const auto host = p.host();
  for (const auto& lens : shardings) {
    poison(p.o);
    poison(p.lse);
    dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), p.q,
                           kv::dense(local_keys(p.k, lens), local_keys(p.v, lens)), p.o, p.lse, opt, with_scheme(dist::Scheme::sharded_kv, d));
    Kokkos::fence();
    const std::vector<double> o = to_host(p.o);
    if (d.root < 0 || rank_of(MPI_COMM_WORLD) == d.root)
      expect_16bit_rule<S>(host.params(), opt, o, to_host(p.lse), what + " lens=" + describe(lens));
    expect_landed(o, d, what);
    // Without lse: the same o.
    poison(p.o);
    dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), p.q,
                           kv::dense(local_keys(p.k, lens), local_keys(p.v, lens)), p.o, opt,
                    with_scheme(dist::Scheme::sharded_kv, d));
    Kokkos::fence();
    const std::vector<double> o_alone = to_host(p.o);
    EXPECT_EQ(std::memcmp(o.data(), o_alone.data(), o.size() * sizeof(double)), 0) << what << ": o without lse differs";
  }
}

// Float q and o over a 16-bit cache: exact float computations on the cache's values, float's bound.
template <class KV>
void check_float_queries(const Shape& s, const Options& opt, const DistOptions& d = {},
                         std::vector<std::vector<std::int64_t>> shardings = {}) {
  if (shardings.empty()) shardings = splits_of(s.Nk, size_of(MPI_COMM_WORLD));
  const std::uint64_t seed = shared_seed();
  const std::string what = std::string("float q, ") + storage_name<KV>() + " kv " + describe(s, opt) +
                           (d.deterministic ? " deterministic" : "") + " seed=" + std::to_string(seed);
  SCOPED_TRACE(what);
  View4<float> q("q", s.B, s.Nq, s.Hq, s.D), o("o", s.B, s.Nq, s.Hq, s.D);
  View3<float> lse("lse", s.B, s.Hq, s.Nq);
  View4<KV> k("k", s.B, s.Nk, s.Hkv, s.D), v("v", s.B, s.Nk, s.Hkv, s.D);
  Problem<double> ref(s, 0);
  fill_rounded(q, ref.q, seed);
  fill_rounded(k, ref.k, seed + 1);
  fill_rounded(v, ref.v, seed + 2);
  reference(Kokkos::DefaultExecutionSpace(), ref.q, ref.k, ref.v, ref.o, ref.lse, opt);
  Kokkos::fence();
  for (const auto& lens : shardings) {
    poison(o);
    poison(lse);
    dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), q,
                           kv::dense(local_keys(k, lens), local_keys(v, lens)), o, lse, opt, with_scheme(dist::Scheme::sharded_kv, d));
    Kokkos::fence();
    if (d.root < 0 || rank_of(MPI_COMM_WORLD) == d.root)
      expect_outputs_close(o, lse, to_host(ref.o), to_host(ref.lse), what + " lens=" + describe(lens));
    expect_landed(to_host(o), d, what);
  }
}

std::vector<Options> variants() {
  std::vector<Options> v(5);
  v[1].causal = true;
  v[2].causal = true, v[2].window_left = 30, v[2].softcap = 3.0;
  v[3].splits = 7;
  v[4].causal = true, v[4].splits = 1000;  // more splits than keys
  return v;
}

TEST(Decode16, Bf16AndFp16QueriesAndCachesMeetTheRule) {
  for (const Options& o : variants()) {
    check_decode16<bf16>({2, 1, 301, 8, 2, 32}, o);  // GQA 4:1
    check_decode16<fp16>({1, 3, 97, 4, 4, 64}, o);   // three queries
  }
  check_decode16<bf16>({1, 1, 1, 1, 1, 1}, Options{});  // one key: every rank but one holds none
  check_decode16<fp16>({1, 1, 2, 16, 2, 128}, Options{});
}

TEST(Decode16, FloatQueriesOver16BitCaches) {
  for (const Options& o : variants()) {
    check_float_queries<bf16>({2, 1, 301, 8, 2, 32}, o);
    check_float_queries<fp16>({1, 2, 150, 2, 1, 64}, o);
  }
}

// Shards for deterministic mode: every shard but the last starts at a multiple of the chunk; the
// first rank holds none (when there are two or more), the last a partial chunk more.
std::vector<std::int64_t> chunk_aligned(int P, std::int64_t chunk) {
  std::vector<std::int64_t> lens(P);
  for (int r = 0; r < P; ++r) lens[r] = (P > 1 && r == 0) ? 0 : chunk * r + (r == P - 1 ? 5 : 0);
  if (P == 1) lens[0] = 3 * chunk + 5;
  return lens;
}

TEST(Decode16, DeterministicChainAndReduceToRoot) {
  const int P = size_of(MPI_COMM_WORLD);
  const std::vector<std::int64_t> lens = chunk_aligned(P, 16);
  int Nk = 0;
  for (std::int64_t n : lens) Nk += static_cast<int>(n);
  Options causal;
  causal.causal = true;
  for (const Options& o : {Options{}, causal})
    for (int root : {-1, P - 1}) {
      DistOptions d;
      d.root = root;
      check_decode16<bf16>({2, 1, 257, 8, 2, 32}, o, d);  // MPI_Allreduce / MPI_Reduce
      check_float_queries<fp16>({1, 1, 100, 4, 2, 64}, o, d);
      d.deterministic = true;
      d.chunk = 16;
      check_decode16<fp16>({1, 2, Nk, 8, 2, 32}, o, d, {lens});  // the chain
      check_float_queries<bf16>({2, 1, Nk, 4, 4, 64}, o, d, {lens});
    }
}

// Deterministic mode over a 16-bit cache: o and lse from every rank have the bits of one rank alone
// (MPI_COMM_SELF), for 16-bit queries (Q = S) and float ones.
template <class Q, class S>
void check_deterministic_bits(const Shape& s, const Options& opt) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(std::string("q ") + storage_name<Q>() + " kv " + storage_name<S>() + " " + describe(s, opt) +
               " seed=" + std::to_string(seed));
  Problem16<S> p(s, seed);
  View4<Q> q("q", s.B, s.Nq, s.Hq, s.D), o("o", s.B, s.Nq, s.Hq, s.D);
  convert_into(p.q, q);
  DistOptions d;
  d.deterministic = true;
  d.chunk = 16;
  const auto run = [&](MPI_Comm comm, const std::vector<std::int64_t>& lens) {
    poison(o);
    poison(p.lse);
    dist::attention(comm, Kokkos::DefaultExecutionSpace(), q,
                           kv::dense(local_keys(p.k, lens, comm), local_keys(p.v, lens, comm)), o, p.lse, opt, with_scheme(dist::Scheme::sharded_kv, d));
    Kokkos::fence();
    std::vector<double> out = to_host(o), lse = to_host(p.lse);
    out.insert(out.end(), lse.begin(), lse.end());
    return out;
  };
  const std::vector<double> alone = run(MPI_COMM_SELF, {s.Nk});
  const std::vector<double> all = run(MPI_COMM_WORLD, chunk_aligned(size_of(MPI_COMM_WORLD), 16));
  EXPECT_EQ(std::memcmp(alone.data(), all.data(), all.size() * sizeof(double)), 0)
      << "deterministic o or lse differs between one rank and " << size_of(MPI_COMM_WORLD);
}

TEST(Decode16, DeterministicBitsAreTheSameOnEveryRankCount) {
  const int Nk = [] {
    int n = 0;
    for (std::int64_t x : chunk_aligned(size_of(MPI_COMM_WORLD), 16)) n += static_cast<int>(x);
    return n;
  }();
  Options causal;
  causal.causal = true;
  for (const Options& o : {Options{}, causal}) {
    check_deterministic_bits<bf16, bf16>({2, 1, Nk, 8, 2, 32}, o);
    check_deterministic_bits<fp16, fp16>({1, 3, Nk, 4, 4, 64}, o);
    check_deterministic_bits<float, bf16>({1, 1, Nk, 16, 2, 128}, o);
  }
}

}  // namespace
}  // namespace test
}  // namespace kattn
