// Support for the MPI backward tests: a global problem with its one-rank gradients, each rank's
// shard of it run through a distributed backward, and comparisons of the shard's gradients with
// the global ones (close, or bitwise).
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "dist_support.hpp"
#include "kattn/attention.hpp"
#include "kattn/backward.hpp"
#include "kattn/distributed/options.hpp"

namespace kattn {
namespace test {

// The options every distributed backward test runs first (each appends its own): none, causal,
// a two-sided window, a causal window with softcap, and softcap with a scale.
inline std::vector<Options> backward_variants() {
  std::vector<Options> v(5);
  v[1].causal = true;
  v[2].window_left = 5, v[2].window_right = 3;
  v[3].causal = true, v[3].window_left = 7, v[3].softcap = 4.0;
  v[4].softcap = 2.5, v[4].scale = 0.3;
  return v;
}

// A global problem with its forward outputs and an upstream gradient.
template <class T>
struct Grads {
  Problem<T> p;  // q, k, v; o, lse from the forward
  View4<T> dout, dq, dk, dv;
  Grads(const Shape& s, std::uint64_t seed, const Options& opt) : p(s, seed) {
    dout = View4<T>("do", s.B, s.Nq, s.Hq, s.D);
    dq = View4<T>("dq", s.B, s.Nq, s.Hq, s.D);
    dk = View4<T>("dk", s.B, s.Nk, s.Hkv, s.D);
    dv = View4<T>("dv", s.B, s.Nk, s.Hkv, s.D);
    fill_normal(dout, seed + 7);
    attention(Kokkos::DefaultExecutionSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, one_split(opt));
    Kokkos::fence();
  }
  // The one-rank backward of the whole sequence (into dq, dk, dv), and what it reports.
  BackwardInfo backward_one_rank(const Options& opt, const BackwardOptions& b = {}) {
    const BackwardInfo info = attention_backward(Kokkos::DefaultExecutionSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse,
                                                 dout, dq, dk, dv, opt, b);
    Kokkos::fence();
    return info;
  }
};

// This rank's shards of a problem's inputs, for a distributed backward.
template <class T>
struct ShardedGrads {
  View4<T> q, k, v, o, dout;
  View3<T> lse;
};

template <class T>
struct LocalGrads {
  View4<T> dq, dk, dv;
  dist::DistStats stats;
  SequenceLayout ql, kl;
};

inline double max_abs(const std::vector<double>& a, const std::vector<double>& b, bool* nan) {
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) *nan = true;
    m = std::max(m, std::abs(a[i] - b[i]));
  }
  return m;
}

// This rank's rows of dq, dk, dv (mine) and the same rows of the one-rank gradients (ref).
struct PairedGrads {
  static constexpr const char* names[3] = {"dq", "dk", "dv"};
  std::vector<double> mine[3], ref[3];
};

template <class T>
PairedGrads paired_with_one_rank(const LocalGrads<T>& r, const Grads<T>& g, int rank) {
  const View4<T>* mine[3] = {&r.dq, &r.dk, &r.dv};
  const View4<T>* ref[3] = {&g.dq, &g.dk, &g.dv};
  PairedGrads out;
  for (int x = 0; x < 3; ++x) pair_rows(*mine[x], *ref[x], x == 0 ? r.ql : r.kl, rank, out.mine[x], out.ref[x]);
  return out;
}

template <class T>
void expect_grads(const LocalGrads<T>& r, const Grads<T>& g, int rank, double tol, const std::string& what) {
  const PairedGrads pg = paired_with_one_rank(r, g, rank);
  const auto& names = PairedGrads::names;
  for (int x = 0; x < 3; ++x) {
    const std::vector<double>& a = pg.mine[x];
    const std::vector<double>& b = pg.ref[x];
    bool nan = false;
    const double err = max_abs(a, b, &nan);
    EXPECT_FALSE(nan) << what << ": " << names[x] << " has NaN (or unwritten elements)";
    if (std::is_same<T, double>::value) {
      EXPECT_LE(err, tol) << what << ": " << names[x] << " max abs difference from the one-rank backward";
    } else {
      double ref2 = 0, d2 = 0;
      for (std::size_t i = 0; i < a.size(); ++i) d2 += (a[i] - b[i]) * (a[i] - b[i]), ref2 += b[i] * b[i];
      EXPECT_LE(std::sqrt(d2 / std::max(ref2, 1e-300)), tol) << what << ": " << names[x] << " relative difference";
    }
  }
}

template <class T>
void expect_grads_bitwise(const LocalGrads<T>& r, const Grads<T>& g, int rank, const std::string& what) {
  const PairedGrads pg = paired_with_one_rank(r, g, rank);
  const auto& names = PairedGrads::names;
  for (int x = 0; x < 3; ++x) {
    const std::vector<double>& a = pg.mine[x];
    const std::vector<double>& b = pg.ref[x];
    std::size_t diff = 0;
    for (std::size_t i = 0; i < a.size(); ++i) diff += std::memcmp(&a[i], &b[i], sizeof(double)) != 0;
    EXPECT_EQ(diff, 0u) << what << ": " << names[x] << " elements that differ in their bits (of " << a.size() << ")";
  }
}

// A copy in double (values exactly those of T), for comparisons with float64 references.
template <class T>
View4<double> widened(const View4<T>& v) {
  View4<double> out("widened", v.extent(0), v.extent(1), v.extent(2), v.extent(3));
  auto from = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  auto to = Kokkos::create_mirror_view(out);
  for (std::size_t i = 0; i < from.span(); ++i) to.data()[i] = static_cast<double>(from.data()[i]);
  Kokkos::deep_copy(out, to);
  return out;
}

// Shards g's inputs as the layouts say, poisons dq, dk, dv and calls run(inputs, result) to fill them.
template <class T, class Run>
LocalGrads<T> sharded_backward(MPI_Comm comm, const Grads<T>& g, const SequenceLayout& ql, const SequenceLayout& kl,
                               Run&& run) {
  const int rank = rank_of(comm);
  const Shape& s = g.p.shape;
  LocalGrads<T> r;
  r.ql = ql;
  r.kl = kl;
  ShardedGrads<T> x;
  x.q = shard(g.p.q, r.ql, rank, "q"), x.o = shard(g.p.o, r.ql, rank, "o"), x.dout = shard(g.dout, r.ql, rank, "do");
  x.lse = shard_lse(g.p.lse, r.ql, rank);
  x.k = shard(g.p.k, r.kl, rank, "k"), x.v = shard(g.p.v, r.kl, rank, "v");
  const std::size_t nq = r.ql.local_length(rank), nk = r.kl.local_length(rank);
  r.dq = View4<T>("dq", s.B, nq, s.Hq, s.D);
  r.dk = View4<T>("dk", s.B, nk, s.Hkv, s.D);
  r.dv = View4<T>("dv", s.B, nk, s.Hkv, s.D);
  poison(r.dq);
  poison(r.dk);
  poison(r.dv);
  run(x, r);
  return r;
}

// The same with the layouts of ring attention and head sharding: d's sharding, chunk-aligned when
// deterministic.
template <class T, class Run>
LocalGrads<T> sharded_backward(MPI_Comm comm, const Grads<T>& g, const DistOptions& d, Run&& run) {
  const int P = size_of(comm);
  return sharded_backward(comm, g, dist::sharded_layout(g.p.shape.Nq, P, d), dist::sharded_layout(g.p.shape.Nk, P, d),
                          std::forward<Run>(run));
}

// Communicators of the first s ranks, s = 1 .. P.
inline std::vector<MPI_Comm> prefixes() {
  std::vector<MPI_Comm> out;
  const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
  for (int s = 1; s <= P; ++s) {
    MPI_Comm c;
    MPI_Comm_split(MPI_COMM_WORLD, rank < s ? 0 : MPI_UNDEFINED, rank, &c);
    out.push_back(c);
  }
  return out;
}

}  // namespace test
}  // namespace kattn
