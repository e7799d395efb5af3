// Head sharding and hybrid in 16-bit storage move 16 bits: bytes sent by a bf16 / fp16 call are
// half those of the same call on float arrays, the lse (float either way) apart; GQA (KV heads
// sharded and replicated), causal, contiguous and zigzag, deterministic, 1-4 ranks. The accuracy
// rule and the deterministic bits are checked in test_ring16.cpp.
#include <gtest/gtest.h>

#include <string>

#include "dist_support.hpp"
#include "kattn/dist/hybrid.hpp"
#include "kattn/dist/ulysses.hpp"
#include "storage16_support.hpp"

namespace kattn {
namespace test {
namespace {

using dist::DistOptions;
using dist::SequenceLayout;

enum class Call { ulysses, hybrid };

// Bytes this rank sent in one call of `call` on its shards of q, k, v (storage T), with or without
// an lse.
template <class T>
std::int64_t bytes_sent(Call call, const View4<T>& q, const View4<T>& k, const View4<T>& v, bool with_lse,
                        const Options& opt, const DistOptions& d) {
  const auto space = Kokkos::DefaultExecutionSpace();
  const View4<T> o("o", q.extent(0), q.extent(1), q.extent(2), q.extent(3));
  const View3<float> lse = with_lse ? View3<float>("lse", q.extent(0), q.extent(2), q.extent(1)) : View3<float>();
  if (call == Call::hybrid) return dist::hybrid_attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, lse, opt, d).bytes_sent;
  return dist::ulysses_attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, lse, opt, d).bytes_sent;
}

template <class S>
void expect_half_of_float(Call call, const Shape& s, const Options& opt, const DistOptions& d) {
  const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
  const std::string what = std::string(storage_name<S>()) + (call == Call::hybrid ? " hybrid " : " ulysses ") +
                           describe(s, opt) + " " + dist::name(d.sharding) + (d.deterministic ? " deterministic" : "");
  SCOPED_TRACE(what);
  const Problem16<S> p(s, shared_seed());
  const SequenceLayout layout = call == Call::hybrid ? dist::hybrid_layout(s.Nq, P, d)
                                                     : SequenceLayout(s.Nq, P, d.sharding, d.deterministic ? dist::chunk_of(d) : 1);
  const View4<S> q = shard(p.q, layout, rank, "q"), k = shard(p.k, layout, rank, "k"), v = shard(p.v, layout, rank, "v");
  const View4<float> qf("qf", q.extent(0), q.extent(1), q.extent(2), q.extent(3)),
      kf("kf", k.extent(0), k.extent(1), k.extent(2), k.extent(3)),
      vf("vf", v.extent(0), v.extent(1), v.extent(2), v.extent(3));
  convert_into(q, qf), convert_into(k, kf), convert_into(v, vf);
  const std::int64_t half = bytes_sent(call, q, k, v, false, opt, d), full = bytes_sent(call, qf, kf, vf, false, opt, d);
  EXPECT_EQ(2 * half, full);
  if (P > 1 && call == Call::ulysses) {  // (a causal ring's last rank may send nothing)
    EXPECT_GT(half, 0);
  }
  // The lse travels in float whatever the storage.
  EXPECT_EQ(bytes_sent(call, q, k, v, true, opt, d) - half, bytes_sent(call, qf, kf, vf, true, opt, d) - full);
}

TEST(Ulysses16, AllToAllsMoveHalfTheBytesOfFloat) {
  const int P = size_of(MPI_COMM_WORLD);
  Options causal;
  causal.causal = true;
  DistOptions zig, det;
  zig.sharding = dist::Sharding::zigzag;
  det.deterministic = true, det.chunk = 16;
  for (const Options& o : {Options{}, causal})
    for (const DistOptions& d : {DistOptions{}, zig, det}) {
      expect_half_of_float<bf16>(Call::ulysses, {2, 61, 61, 12, 4, 16}, o, d);  // KV heads sharded at 1, 2, 4 ranks
      expect_half_of_float<fp16>(Call::ulysses, {1, 50, 50, 12, 3, 8}, o, d);   // replicated at 2 and 4
      DistOptions grid = d;
      grid.ulysses_size = P % 2 == 0 ? 2 : 1;
      expect_half_of_float<bf16>(Call::hybrid, {1, 70, 70, 12, 6, 16}, o, grid);
    }
}

}  // namespace
}  // namespace test
}  // namespace kattn
