// The deterministic mode: outputs bitwise identical for every rank count (1 .. the ranks of this
// run, through sub-communicators), both shardings, every split count and query tiling, and close
// to the float64 reference. The one-rank result is computed on MPI_COMM_SELF by every rank.
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "dist_support.hpp"
#include "kattn/distributed/attention.hpp"

namespace kattn {
namespace test {
namespace {

// Ring attention of the global problem over `comm` (a communicator of some of the ranks).
template <class T>
void run_sharded(MPI_Comm comm, const Problem<T>& g, const Options& opt, const DistOptions& d, View4<T>& o,
                 View3<T>& lse, SequenceLayout& layout) {
  const int rank = rank_of(comm), P = size_of(comm);
  const std::int64_t C = dist::chunk_of(d);
  const SequenceLayout ql(g.shape.Nq, P, d.sharding, C), kl(g.shape.Nk, P, d.sharding, C);
  const View4<T> q = shard(g.q, ql, rank, "q"), k = shard(g.k, kl, rank, "k"), v = shard(g.v, kl, rank, "v");
  const std::size_t n = static_cast<std::size_t>(ql.local_length(rank));
  o = View4<T>("o", g.shape.B, n, g.shape.Hq, g.shape.D);
  lse = View3<T>("lse", g.shape.B, g.shape.Hq, n);
  poison(o);
  poison(lse);
  dist::attention(comm, Kokkos::DefaultExecutionSpace(), q, kv::dense(k, v), o, lse, opt, d);
  layout = ql;
}

template <class T>
void check_ring_invariance(const Shape& s, const Options& opt, std::int64_t chunk) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(describe(s, opt) + " chunk=" + std::to_string(chunk) + " seed=" + std::to_string(seed));
  Problem<T> g(s, seed);
  DistOptions d;
  d.deterministic = true;
  d.chunk = chunk;
  // One rank, the whole sequence: the bits every other run must reproduce.
  View4<T> o1;
  View3<T> l1;
  SequenceLayout lay1;
  run_sharded(MPI_COMM_SELF, g, opt, d, o1, l1, lay1);
  if (std::is_same<T, double>::value) {
    const Problem<double> ref = reference_of(g, opt);
    expect_shard_close(o1, l1, ref, lay1, 0, kDoubleTol, "deterministic, one rank");
  }
  Prefixes prefixes;
  for (MPI_Comm comm : prefixes.comms) {
    if (comm == MPI_COMM_NULL) continue;
    for (Sharding sh : {Sharding::contiguous, Sharding::zigzag})
      for (int splits : {0, 1, 3})
        for (int block_q : {0, 7}) {
          DistOptions dd = d;
          dd.sharding = sh;
          Options oo = opt;
          oo.splits = splits;
          oo.block_q = block_q;
          View4<T> o;
          View3<T> lse;
          SequenceLayout lay;
          run_sharded(comm, g, oo, dd, o, lse, lay);
          expect_shard_bitwise(o, lse, o1, l1, lay, rank_of(comm),
                               "P=" + std::to_string(size_of(comm)) + " " + dist::name(sh) +
                                   " splits=" + std::to_string(splits) + " block_q=" + std::to_string(block_q));
        }
  }
}

TEST(Deterministic, RingBitwiseEqualForEveryRankCount) {
  std::vector<Options> v(7);
  v[1].causal = true;
  v[2].causal = true, v[2].window_left = 11;
  v[3].softcap = 5.0, v[3].window_left = 4, v[3].window_right = 9;
  v[4].causal = true, v[4].block_k = 5;
  v[5].window_left = 0, v[5].window_right = 0;
  v[6].window_left = -1, v[6].window_right = 1;
  for (const Options& o : v) {
    check_ring_invariance<double>({1, 83, 83, 2, 1, 16}, o, 16);
    check_ring_invariance<double>({2, 50, 50, 4, 2, 8}, o, 7);
    check_ring_invariance<float>({1, 70, 70, 8, 2, 32}, o, 12);
  }
}

// Sinks merge once into each finished row: the same bits at every rank count, and the textbook's.
TEST(Deterministic, RingWithSinksBitwiseEqualForEveryRankCount) {
  Options o;
  o.causal = true;
  o.sinks = {0.8, 3.5};
  check_ring_invariance<double>({1, 83, 83, 2, 1, 16}, o, 16);
  o.sinks = {-1.0, std::numeric_limits<double>::infinity() * -1, 2.0, 0.0, 5.0, -3.0, 1.0, 0.5};
  check_ring_invariance<float>({1, 70, 70, 8, 2, 32}, o, 12);
}

TEST(Deterministic, RingWithAlibiBitwiseEqualForEveryRankCount) {
  Options o;
  o.causal = true;
  o.alibi_slopes = {0.5, 0.0625};
  check_ring_invariance<double>({1, 83, 83, 2, 1, 16}, o, 16);
  o.causal = false;
  o.sinks = {1.0, -2.0, 0.5, 3.0, 0.0, 1.5, -1.0, 2.0};
  o.alibi_slopes = {0.7, 0.0, 0.25, 0.125, 0.05, 1.5, 0.3, 0.01};
  check_ring_invariance<float>({1, 70, 70, 8, 2, 32}, o, 12);
}

// Distributed decode of the global problem with the KV cache cut at the given shard lengths.
template <class T>
void run_decode(MPI_Comm comm, const Problem<T>& g, const std::vector<std::int64_t>& lens, const Options& opt,
                const DistOptions& d, View4<T>& o, View3<T>& lse) {
  const int rank = rank_of(comm);
  std::int64_t start = 0;
  for (int r = 0; r < rank; ++r) start += lens[r];
  const auto range = std::make_pair(start, start + lens[rank]);
  const std::size_t n = static_cast<std::size_t>(lens[rank]);
  View4<T> k("k", g.shape.B, n, g.shape.Hkv, g.shape.D), v("v", g.shape.B, n, g.shape.Hkv, g.shape.D);
  Kokkos::deep_copy(k, Kokkos::subview(g.k, Kokkos::ALL, range, Kokkos::ALL, Kokkos::ALL));
  Kokkos::deep_copy(v, Kokkos::subview(g.v, Kokkos::ALL, range, Kokkos::ALL, Kokkos::ALL));
  o = View4<T>("o", g.shape.B, g.shape.Nq, g.shape.Hq, g.shape.D);
  lse = View3<T>("lse", g.shape.B, g.shape.Hq, g.shape.Nq);
  poison(o);
  poison(lse);
  dist::attention(comm, Kokkos::DefaultExecutionSpace(), g.q, kv::dense(k, v), o, lse, opt, with_scheme(dist::Scheme::sharded_kv, d));
}

// Shard lengths of Nk keys over P ranks in whole chunks: balanced, and skewed (some empty).
std::vector<std::vector<std::int64_t>> chunked_splits(std::int64_t Nk, int P, std::int64_t C) {
  std::vector<std::vector<std::int64_t>> out;
  const SequenceLayout even(Nk, P, Sharding::contiguous, C);
  std::vector<std::int64_t> a, b(P, 0);
  for (int r = 0; r < P; ++r) a.push_back(even.local_length(r));
  out.push_back(a);
  // Skewed: rank 0 the first chunk, the last rank the rest, the others nothing.
  b[0] = std::min(C, Nk);
  b[P - 1] += Nk - b[0];
  out.push_back(b);
  return out;
}

template <class T>
void check_decode_invariance(const Shape& s, const Options& opt, std::int64_t chunk) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(describe(s, opt) + " chunk=" + std::to_string(chunk) + " seed=" + std::to_string(seed));
  Problem<T> g(s, seed);
  DistOptions d;
  d.deterministic = true;
  d.chunk = chunk;
  View4<T> o1;
  View3<T> l1;
  run_decode(MPI_COMM_SELF, g, {s.Nk}, opt, d, o1, l1);
  const SequenceLayout whole(s.Nq, 1, Sharding::contiguous);
  if (std::is_same<T, double>::value)
    expect_shard_close(o1, l1, reference_of(g, opt), whole, 0, kDoubleTol, "deterministic decode, one rank");
  Prefixes prefixes;
  for (MPI_Comm comm : prefixes.comms) {
    if (comm == MPI_COMM_NULL) continue;
    const int P = size_of(comm);
    for (const auto& lens : chunked_splits(s.Nk, P, chunk))
      for (int splits : {0, 1, 5}) {
        Options oo = opt;
        oo.splits = splits;
        View4<T> o;
        View3<T> lse;
        run_decode(comm, g, lens, oo, d, o, lse);
        expect_shard_bitwise(o, lse, o1, l1, whole, 0,
                             "decode P=" + std::to_string(P) + " splits=" + std::to_string(splits));
      }
  }
}

TEST(Deterministic, DecodeBitwiseEqualForEveryRankCountAndSplit) {
  std::vector<Options> v(3);
  v[1].causal = true;
  v[2].window_left = 40, v[2].softcap = 4.0;
  for (const Options& o : v) {
    check_decode_invariance<double>({2, 1, 211, 4, 2, 16}, o, 32);
    check_decode_invariance<double>({1, 3, 100, 8, 1, 8}, o, 9);
    check_decode_invariance<float>({1, 2, 150, 2, 2, 64}, o, 20);
  }
  Options sinks;
  sinks.sinks = {0.25, -2.0, 4.0, 1.0};
  check_decode_invariance<double>({2, 1, 211, 4, 2, 16}, sinks, 32);
  Options alibi;
  alibi.alibi_slopes = {0.25, 0.0, 1.0, 0.0625};
  check_decode_invariance<double>({2, 1, 211, 4, 2, 16}, alibi, 32);
}

}  // namespace
}  // namespace test
}  // namespace kattn
