// Distributed calls given a kattn::Workspace (Options::workspace): the same bits as without
// one, on the first call and on repeated ones; a repeated call allocates nothing; a call of a
// larger problem grows what it needs; release() frees it all; a call that fails gives its buffers
// back; and a workspace holding idle buffers does not make the memory check refuse a call whose
// buffers it holds.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dist_forward.hpp"
#include "dist_grads.hpp"
#include "dist_support.hpp"
#include "kattn/distributed/attention.hpp"
#include "storage16_support.hpp"
#include "workspace_support.hpp"

namespace kattn {
namespace test {
namespace {

enum class Kind { ring, ulysses, hybrid };

template <class T>
std::string forward_bytes(Kind kind, const Problem<T>& g, const Options& opt, const DistOptions& d) {
  const int P = size_of(MPI_COMM_WORLD);
  const auto layout = [&](std::int64_t n) {
    return kind == Kind::hybrid ? dist::hybrid_layout(n, P, d) : dist::sharded_layout(n, P, d);
  };
  const SequenceLayout ql = layout(g.shape.Nq), kl = layout(g.shape.Nk);
  const ShardedRun<T> r =
      sharded_forward(MPI_COMM_WORLD, g, ql, kl, [&](const auto& q, const auto& k, const auto& v, const auto& o,
                                                     const auto& lse) {
        const auto space = Kokkos::DefaultExecutionSpace();
        if (kind == Kind::ring) return dist::attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, lse, opt, d);
        if (kind == Kind::ulysses)
          return dist::attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, lse, opt, with_scheme(dist::Scheme::ulysses, d));
        return dist::attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, lse, opt, with_scheme(dist::Scheme::hybrid, d));
      });
  return bytes_of(r.o) + bytes_of(r.lse);
}

template <class T>
std::string backward_bytes(Kind kind, const Grads<T>& g, const Options& opt, const DistOptions& d) {
  const int P = size_of(MPI_COMM_WORLD);
  const auto run = [&](const ShardedGrads<T>& x, LocalGrads<T>& r) {
    const auto space = Kokkos::DefaultExecutionSpace();
    const BackwardOptions b;
    if (kind == Kind::ring)
      r.stats = dist::attention_backward(MPI_COMM_WORLD, space, x.q, kv::dense(x.k, x.v), x.o, x.lse, x.dout,
                                              r.dq, r.dk, r.dv, opt, b, d);
    else if (kind == Kind::ulysses)
      r.stats = dist::attention_backward(MPI_COMM_WORLD, space, x.q, kv::dense(x.k, x.v), x.o, x.lse, x.dout,
                                                 r.dq, r.dk, r.dv, opt, b, with_scheme(dist::Scheme::ulysses, d));
    else
      r.stats = dist::attention_backward(MPI_COMM_WORLD, space, x.q, kv::dense(x.k, x.v), x.o, x.lse, x.dout,
                                                r.dq, r.dk, r.dv, opt, b, with_scheme(dist::Scheme::hybrid, d));
  };
  const LocalGrads<T> r = kind == Kind::hybrid
                              ? sharded_backward(MPI_COMM_WORLD, g, dist::hybrid_layout(g.p.shape.Nq, P, d),
                                                 dist::hybrid_layout(g.p.shape.Nk, P, d), run)
                              : sharded_backward(MPI_COMM_WORLD, g, d, run);
  return bytes_of(r.dq) + bytes_of(r.dk) + bytes_of(r.dv);
}

template <class T>
std::string decode_bytes(const Problem<T>& g, const Options& opt, const DistOptions& d) {
  const SequenceLayout kl(g.shape.Nk, size_of(MPI_COMM_WORLD), Sharding::contiguous, dist::shard_align(d));
  const int rank = rank_of(MPI_COMM_WORLD);
  const View4<T> k = shard(g.k, kl, rank, "k"), v = shard(g.v, kl, rank, "v");
  View4<T> o("o", g.shape.B, g.shape.Nq, g.shape.Hq, g.shape.D);
  View3<T> lse("lse", g.shape.B, g.shape.Hq, g.shape.Nq);
  dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), g.q, kv::dense(k, v), o, lse, opt, with_scheme(dist::Scheme::sharded_kv, d));
  return bytes_of(o) + bytes_of(lse);
}

std::vector<DistOptions> modes() {
  std::vector<DistOptions> m(3);
  m[1].sharding = Sharding::zigzag;
  m[2].deterministic = true, m[2].chunk = 16;
  return m;
}

std::string name_of(const DistOptions& d) {
  return std::string(d.deterministic ? "deterministic" : dist::name(d.sharding)) +
         (d.staging == dist::Staging::host ? " staged" : "");
}

TEST(Workspace, RingUlyssesHybridForwardAndBackwardReuseItBitwise) {
  Options causal;
  causal.causal = true, causal.window_left = 40;
  const Shape s{2, 97, 97, 24, 12, 8};
  const std::uint64_t seed = shared_seed();
  const Problem<double> g[2] = {Problem<double>(s, seed), Problem<double>(s, seed + 10)};
  Grads<double> gr[2] = {Grads<double>(s, seed, causal), Grads<double>(s, seed + 10, causal)};
  for (DistOptions d : modes()) {
    for (const auto staging : {dist::Staging::automatic, dist::Staging::host}) {
      d.staging = staging;
      for (Kind kind : {Kind::ring, Kind::ulysses, Kind::hybrid}) {
        if (kind != Kind::ring && d.sharding == Sharding::zigzag) continue;
        DistOptions k = d;
        if (kind == Kind::hybrid) k.ulysses_size = size_of(MPI_COMM_WORLD) % 2 == 0 ? 2 : 1;
        const std::string what = std::string(kind == Kind::ring ? "ring" : kind == Kind::ulysses ? "ulysses" : "hybrid") +
                                 " " + name_of(k);
        expect_reused(what + " forward",
                      [&](Workspace* ws, int i) { return forward_bytes(kind, g[i], using_workspace(causal, ws), k); });
        expect_reused(
            what + " backward",
            [&](Workspace* ws, int i) { return backward_bytes(kind, gr[i], using_workspace(causal, ws), k); },
            k.deterministic && kind != Kind::ulysses);
      }
    }
  }
}

TEST(Workspace, DecodeAndSixteenBitHybridReuseItBitwise) {
  const Shape s{2, 3, 150, 8, 2, 16};
  const std::uint64_t seed = shared_seed();
  const Problem<float> g[2] = {Problem<float>(s, seed), Problem<float>(s, seed + 10)};
  for (const DistOptions& d : modes())
    expect_reused("decode " + name_of(d),
                  [&](Workspace* ws, int i) { return decode_bytes(g[i], using_workspace(Options{}, ws), d); });
  // A 16-bit hybrid widens its blocks' queries into float buffers of the workspace.
  const Shape h{1, 70, 70, 12, 6, 16};
  const Problem16<bf16> p16[2] = {Problem16<bf16>(h, seed + 20), Problem16<bf16>(h, seed + 30)};
  DistOptions grid;
  grid.ulysses_size = size_of(MPI_COMM_WORLD) % 2 == 0 ? 2 : 1;
  expect_reused("bf16 hybrid", [&](Workspace* ws, int i) {
    const DistOptions& x = grid;
    const Problem16<bf16>& p = p16[i];
    const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
    const SequenceLayout layout = dist::hybrid_layout(h.Nq, P, x);
    const View4<bf16> q = shard(p.q, layout, rank, "q"), k = shard(p.k, layout, rank, "k"),
                      v = shard(p.v, layout, rank, "v");
    const View4<bf16> o("o", q.extent(0), q.extent(1), q.extent(2), q.extent(3));
    const View3<float> lse("lse", q.extent(0), q.extent(2), q.extent(1));
    Options causal;
    causal.causal = true;
    causal.workspace = ws;
    dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), q, kv::dense(k, v), o, lse, causal, with_scheme(dist::Scheme::hybrid, x));
    return bytes_of(o) + bytes_of(lse);
  });
}

TEST(Workspace, GrowsForALargerProblemAndKeepsItsSize) {
  Workspace ws;
  const Options opt = using_workspace(Options{}, &ws);
  const DistOptions d;
  const Problem<float> small({1, 40, 40, 2, 2, 16}, shared_seed()), large({1, 90, 90, 2, 2, 16}, shared_seed());
  forward_bytes(Kind::ring, small, opt, d);
  const std::uint64_t small_bytes = ws.bytes();
  const std::int64_t small_allocations = ws.allocations();
  const std::string want = forward_bytes(Kind::ring, large, Options{}, DistOptions{});
  EXPECT_TRUE(forward_bytes(Kind::ring, large, opt, d) == want);
  EXPECT_GT(ws.bytes(), small_bytes);
  const std::int64_t grown = ws.allocations();
  EXPECT_GT(grown, small_allocations);
  // Smaller again: served from the larger buffers.
  forward_bytes(Kind::ring, small, opt, d);
  EXPECT_EQ(ws.allocations(), grown);
}

TEST(Workspace, ACallThatFailsGivesItsBuffersBack) {
  Workspace ws;
  const Options opt = using_workspace(Options{}, &ws);
  const DistOptions d;
  const Problem<double> g({1, 64, 64, 2, 2, 8}, shared_seed());
  const std::string want = forward_bytes(Kind::ring, g, Options{}, DistOptions{});
  DistOptions failing = d;
  failing.progress = [](int step, int) {
    if (step == 1) throw std::runtime_error("stop here");
  };
  EXPECT_THROW(forward_bytes(Kind::ring, g, opt, failing), std::exception);
  EXPECT_EQ(ws.idle_bytes(), ws.bytes());
  EXPECT_TRUE(forward_bytes(Kind::ring, g, opt, d) == want);
}

TEST(Workspace, ACallThatDoesNotFitFreesTheIdleBuffersFirst) {
  // A limit that the forward's buffers fit under and the backward's do not: with or without a
  // workspace the backward fails alike, and with one it has freed the forward's idle buffers (no
  // credit for buffers of other kinds, which it could not take).
  Workspace ws;
  const Options opt = using_workspace(Options{}, &ws);
  const DistOptions d;
  const Shape s{1, 1024, 1024, 2, 2, 64};
  Grads<double> gr(s, shared_seed(), Options{});
  forward_bytes(Kind::ring, gr.p, opt, d);
  EXPECT_GT(ws.bytes(), 0u);
  // The backward asks for more than the forward held in all: 4 of its K/V-sized buffers per ring
  // slot and the forward's 6 in all (K/V of 2 heads of 64 doubles per position).
  const std::string limit = std::to_string(ws.bytes());
  setenv("KATTN_MEMORY_LIMIT", limit.c_str(), 1);
  std::string without, with;
  try {
    backward_bytes(Kind::ring, gr, Options{}, DistOptions{});
  } catch (const Error& e) {
    without = e.what();
  }
  try {
    backward_bytes(Kind::ring, gr, opt, d);
  } catch (const Error& e) {
    with = e.what();
  }
  unsetenv("KATTN_MEMORY_LIMIT");
  if (size_of(MPI_COMM_WORLD) > 1) {  // one rank has no ring buffers to refuse
    EXPECT_FALSE(without.empty()) << "the backward fit under the limit";
    EXPECT_EQ(with, without);
    EXPECT_EQ(ws.bytes(), 0u) << "the idle buffers were kept";
  }
}

}  // namespace
}  // namespace test
}  // namespace kattn
