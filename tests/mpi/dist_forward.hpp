// Support for the MPI forward tests: each rank's shard of a global problem run through a
// distributed forward, with poisoned outputs.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

#include "dist_support.hpp"
#include "kattn/distributed/attention.hpp"
#include "kattn/distributed/layout.hpp"
#include "kattn/distributed/options.hpp"
#include "kattn/kv.hpp"

namespace kattn {
namespace test {

template <class T>
struct ShardedRun {
  View4<T> o;
  View3<T> lse;
  dist::DistStats stats;
  dist::SequenceLayout q_layout;
};

// Shards g's q as ql, k and v as kl, and calls call(q, k, v, o, lse), which returns DistStats.
template <class T, class Call>
ShardedRun<T> sharded_forward(MPI_Comm comm, const Problem<T>& g, const dist::SequenceLayout& ql,
                              const dist::SequenceLayout& kl, Call&& call) {
  const int rank = rank_of(comm);
  const View4<T> q = shard(g.q, ql, rank, "q"), k = shard(g.k, kl, rank, "k"), v = shard(g.v, kl, rank, "v");
  ShardedRun<T> r;
  r.q_layout = ql;
  const std::size_t n = static_cast<std::size_t>(ql.local_length(rank));
  r.o = View4<T>("o", g.shape.B, n, g.shape.Hq, g.shape.D);
  r.lse = View3<T>("lse", g.shape.B, g.shape.Hq, n);
  poison(r.o);
  poison(r.lse);
  r.stats = call(q, k, v, r.o, r.lse);
  return r;
}

// dist::attention of g's dense keys over comm as d says (its scheme, sharding, chunk), each rank
// on its shard of the scheme's layout (dist::layout_of).
template <class T>
ShardedRun<T> sharded_dense_forward(MPI_Comm comm, const Problem<T>& g, const Options& opt,
                                    const dist::DistOptions& d) {
  const int P = size_of(comm);
  return sharded_forward(comm, g, dist::layout_of(g.shape.Nq, P, d), dist::layout_of(g.shape.Nk, P, d),
                         [&](const auto& q, const auto& k, const auto& v, const auto& o, const auto& lse) {
                           return dist::attention(comm, Kokkos::DefaultExecutionSpace(), q, kv::dense(k, v), o, lse,
                                                  opt, d);
                         });
}

// Every rank's shard of sharded_dense_forward over MPI_COMM_WORLD against the float64 reference
// of the whole problem (seeded alike on every rank), to tolerance<T>().
template <class T>
void expect_sharded_forward_matches_reference(const Shape& s, const Options& opt, const dist::DistOptions& d,
                                              const std::string& what) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(describe(s, opt) + " sharding=" + dist::name(d.sharding) + " seed=" + std::to_string(seed));
  Problem<T> g(s, seed);
  const Problem<double> ref = reference_of(g, opt);
  const ShardedRun<T> r = sharded_dense_forward(MPI_COMM_WORLD, g, opt, d);
  expect_shard_close(r.o, r.lse, ref, r.q_layout, rank_of(MPI_COMM_WORLD), tolerance<T>(), what);
}

}  // namespace test
}  // namespace kattn
