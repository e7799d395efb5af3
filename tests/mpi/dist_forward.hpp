// Support for the MPI forward tests: each rank's shard of a global problem run through a
// distributed forward, with poisoned outputs.
#pragma once

#include <mpi.h>

#include <string>

#include "dist_support.hpp"
#include "kattn/distributed/options.hpp"

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

}  // namespace test
}  // namespace kattn
