// Head sharding and hybrid in 16-bit storage move 16 bits: bytes sent by a bf16 / fp16 call are
// half those of the same call on float arrays, the lse (float either way) apart, forward and
// backward (where a KV head is computed in parts on several ranks, its dK, dV parts travel in
// float to be summed before the one rounding), and equal to dist::traffic's count; GQA
// (KV heads sharded and shared), causal, contiguous and zigzag, deterministic, 1-4 ranks. The
// backward's gradients against the float64 reference under FlashAttention's rule, and
// deterministic bits equal to one rank's. (The forwards' accuracy and bits: test_ring16.cpp.)
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "dist_support.hpp"
#include "gather_rows.hpp"
#include "kattn/distributed/attention.hpp"
#include "kattn/distributed/traffic.hpp"
#include "kattn/reference_backward.hpp"
#include "storage16_support.hpp"

namespace kattn {
namespace test {
namespace {

enum class Call { ulysses, hybrid };

SequenceLayout layout_of(Call call, std::int64_t n, int P, const DistOptions& d) {
  if (call == Call::hybrid) return dist::hybrid_layout(n, P, d);
  return dist::sharded_layout(n, P, d);
}

// Bytes this rank sent in one call of `call` on its shards of q, k, v (storage T), with or without
// an lse.
template <class T>
std::int64_t bytes_sent(Call call, const View4<T>& q, const View4<T>& k, const View4<T>& v, bool with_lse,
                        const Options& opt, const DistOptions& d) {
  const auto space = Kokkos::DefaultExecutionSpace();
  const View4<T> o("o", q.extent(0), q.extent(1), q.extent(2), q.extent(3));
  const View3<float> lse = with_lse ? View3<float>("lse", q.extent(0), q.extent(2), q.extent(1)) : View3<float>();
  if (call == Call::hybrid)
    return dist::attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, lse, opt, with_scheme(dist::Scheme::hybrid, d)).bytes_sent;
  return dist::attention(MPI_COMM_WORLD, space, q, kv::dense(k, v), o, lse, opt, with_scheme(dist::Scheme::ulysses, d)).bytes_sent;
}

// What dist::traffic (the traffic model) says this rank sends in one call.
std::int64_t modelled_bytes(Call call, const Shape& s, const Options& opt, int value_bytes, const DistOptions& d,
                            dist::Pass pass, bool with_lse = true) {
  return modelled_sent(s, value_bytes, opt,
                       with_scheme(call == Call::hybrid ? dist::Scheme::hybrid : dist::Scheme::ulysses, d), pass,
                       with_lse);
}

// Both calls send what the traffic model says.
template <class S>
void expect_half_of_float(Call call, const Shape& s, const Options& opt, const DistOptions& d) {
  const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
  const std::string what = std::string(storage_name<S>()) + (call == Call::hybrid ? " hybrid " : " ulysses ") +
                           describe(s, opt) + " " + dist::name(d.sharding) + (d.deterministic ? " deterministic" : "");
  SCOPED_TRACE(what);
  const Problem16<S> p(s, shared_seed());
  const SequenceLayout layout = layout_of(call, s.Nq, P, d);
  const View4<S> q = shard(p.q, layout, rank, "q"), k = shard(p.k, layout, rank, "k"),
                 v = shard(p.v, layout, rank, "v");
  const View4<float> qf("qf", q.extent(0), q.extent(1), q.extent(2), q.extent(3)),
      kf("kf", k.extent(0), k.extent(1), k.extent(2), k.extent(3)),
      vf("vf", v.extent(0), v.extent(1), v.extent(2), v.extent(3));
  convert_into(q, qf), convert_into(k, kf), convert_into(v, vf);
  const std::int64_t half = bytes_sent(call, q, k, v, false, opt, d),
                     full = bytes_sent(call, qf, kf, vf, false, opt, d);
  EXPECT_EQ(2 * half, full);
  EXPECT_EQ(half, modelled_bytes(call, s, opt, 2, d, dist::Pass::forward, false));
  EXPECT_EQ(bytes_sent(call, q, k, v, true, opt, d), modelled_bytes(call, s, opt, 2, d, dist::Pass::forward));
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

// One forward and backward of `call` over comm on this rank's shards of q, k, v and dout (the
// whole arrays, storage T): the whole dq, dk, dv and the bytes the backward sent.
struct Grads {
  std::vector<double> dq, dk, dv;
  std::int64_t bytes_sent = 0;
};

template <class T>
Grads run_backward(Call call, MPI_Comm comm, const View4<T>& q_all, const View4<T>& k_all, const View4<T>& v_all,
                   const View4<T>& dout_all, const Options& opt, const DistOptions& d) {
  const int P = size_of(comm), rank = rank_of(comm);
  const std::size_t B = q_all.extent(0), Nq = q_all.extent(1), Nk = k_all.extent(1), Hq = q_all.extent(2),
                    Hkv = k_all.extent(2), D = q_all.extent(3);
  const SequenceLayout ql = layout_of(call, Nq, P, d), kl = layout_of(call, Nk, P, d);
  const std::size_t nq = ql.local_length(rank), nk = kl.local_length(rank);
  const View4<T> q = shard(q_all, ql, rank, "q"), k = shard(k_all, kl, rank, "k"), v = shard(v_all, kl, rank, "v"),
                 dout = shard(dout_all, ql, rank, "dout"), o("o", B, nq, Hq, D), dq("dq", B, nq, Hq, D),
                 dk("dk", B, nk, Hkv, D), dv("dv", B, nk, Hkv, D);
  const View3<float> lse("lse", B, Hq, nq);
  poison(dq), poison(dk), poison(dv);
  const auto space = Kokkos::DefaultExecutionSpace();
  Grads g;
  if (call == Call::hybrid) {
    dist::attention(comm, space, q, kv::dense(k, v), o, lse, opt, with_scheme(dist::Scheme::hybrid, d));
    g.bytes_sent =
        dist::attention_backward(comm, space, q, kv::dense(k, v), o, lse, dout, dq, dk, dv, opt, {}, with_scheme(dist::Scheme::hybrid, d))
            .bytes_sent;
  } else {
    dist::attention(comm, space, q, kv::dense(k, v), o, lse, opt, with_scheme(dist::Scheme::ulysses, d));
    g.bytes_sent =
        dist::attention_backward(comm, space, q, kv::dense(k, v), o, lse, dout, dq, dk, dv, opt, {}, with_scheme(dist::Scheme::ulysses, d))
            .bytes_sent;
  }
  Kokkos::fence();
  g.dq = gathered_rows(dq, ql, {B, Nq, Hq, D}, comm);
  g.dk = gathered_rows(dk, kl, {B, Nk, Hkv, D}, comm);
  g.dv = gathered_rows(dv, kl, {B, Nk, Hkv, D}, comm);
  return g;
}

template <class S>
void check_backward(Call call, const Shape& s, const Options& opt, const DistOptions& d) {
  const std::uint64_t seed = shared_seed();
  const std::string what = std::string(storage_name<S>()) + (call == Call::hybrid ? " hybrid " : " ulysses ") +
                           describe(s, opt) + " " + dist::name(d.sharding) + (d.deterministic ? " deterministic" : "") +
                           " seed=" + std::to_string(seed);
  SCOPED_TRACE(what);
  const Problem16<S> p(s, seed);
  const Backward16Reference<S> ref = backward16_reference(p, opt, seed);
  const View4<S>& dout = ref.dout;
  const Grads g = run_backward(call, MPI_COMM_WORLD, p.q, p.k, p.v, dout, opt, d);
  expect_16bit_grad_rule({g.dq, g.dk, g.dv}, ref.tb, ref.grads, what);
  if (d.deterministic) {
    // One rank alone (hybrid's deterministic backward is the ring's: a 1 x 1 grid).
    DistOptions alone_d = d;
    alone_d.ulysses_size = 0;
    const Grads alone = run_backward(call, MPI_COMM_SELF, p.q, p.k, p.v, dout, opt, alone_d);
    expect_gradient_bits_equal(alone, g, what);
  }
}

TEST(Ulysses16, BackwardMeetsTheRuleAndBitsAreDeterministic) {
  const int P = size_of(MPI_COMM_WORLD);
  Options causal, window;
  causal.causal = true;
  window.causal = true, window.window_left = 40;
  DistOptions zig, det;
  zig.sharding = dist::Sharding::zigzag;
  det.deterministic = true, det.chunk = 16;
  // FlashAttention's grid sizes, as in test_ring16.cpp: bf16 rows of a handful of keys (causal
  // with Nq = Nk) read a 16-bit o that can exceed the rule by itself.
  for (const Options& o : {Options{}, causal, window}) {
    // 12 KV heads: whole GQA groups on every rank count 1-4, deterministic mode allowed.
    check_backward<bf16>(Call::ulysses, {1, 113, 203, 24, 12, 32}, o, det);
    check_backward<fp16>(Call::ulysses, {1, 128, 128, 12, 12, 64}, o, zig);
    // 2 KV heads: shared by ranks at 3 and 4 (parts summed in float).
    check_backward<bf16>(Call::ulysses, {2, 77, 150, 12, 2, 16}, o, DistOptions{});
    DistOptions grid = det;
    grid.ulysses_size = P % 2 == 0 ? 2 : 1;
    check_backward<fp16>(Call::hybrid, {1, 128, 128, 12, 6, 64}, o, grid);
  }
}

// What a 16-bit backward sends against the same call on float arrays.
enum class Bytes {
  half_lse_apart,  // all of it through all-to-alls in 16 bits but the lse (float in both)
  less,            // also float: shared KV heads' dk, dv parts, or a hybrid's rings (float backward)
  same             // only a hybrid's rings (U = 1), or nothing (one rank)
};

// half_lse_apart: twice the 16-bit call's bytes less the float call's is what the lse costs, the
// same at two head dims. Both calls send what the traffic model says.
template <class S>
void expect_backward_bytes(Call call, const Shape& s, Bytes expect, const DistOptions& d) {
  const std::string what =
      std::string(storage_name<S>()) + (call == Call::hybrid ? " hybrid " : " ulysses ") + describe(s, Options{});
  SCOPED_TRACE(what);
  std::int64_t lse_cost[2] = {0, 0};
  for (int dims = 0; dims < 2; ++dims) {
    Shape sd = s;
    sd.D = dims == 0 ? s.D : 2 * s.D;
    const Problem16<S> p(sd, shared_seed());
    View4<S> dout("dout", sd.B, sd.Nq, sd.Hq, sd.D);
    View4<double> dout_d("dout_d", sd.B, sd.Nq, sd.Hq, sd.D);
    fill_rounded(dout, dout_d, 7);
    const auto widened = [](const View4<S>& x) {
      View4<float> f("f", x.extent(0), x.extent(1), x.extent(2), x.extent(3));
      convert_into(x, f);
      return f;
    };
    const std::int64_t half = run_backward(call, MPI_COMM_WORLD, p.q, p.k, p.v, dout, Options{}, d).bytes_sent,
                       full = run_backward(call, MPI_COMM_WORLD, widened(p.q), widened(p.k), widened(p.v),
                                           widened(dout), Options{}, d)
                                  .bytes_sent;
    EXPECT_EQ(half, modelled_bytes(call, sd, Options{}, 2, d, dist::Pass::backward));
    EXPECT_EQ(full, modelled_bytes(call, sd, Options{}, 4, d, dist::Pass::backward));
    lse_cost[dims] = 2 * half - full;
    if (expect == Bytes::same) {
      EXPECT_EQ(half, full);
    } else {
      EXPECT_LT(half, full);
    }
  }
  if (expect == Bytes::half_lse_apart) {
    EXPECT_EQ(lse_cost[0], lse_cost[1]);
  }
}

TEST(Ulysses16, BackwardMovesSixteenBits) {
  const int P = size_of(MPI_COMM_WORLD);
  DistOptions zig;
  zig.sharding = dist::Sharding::zigzag;
  if (P == 1) {
    expect_backward_bytes<bf16>(Call::ulysses, {2, 61, 61, 12, 12, 16}, Bytes::same, DistOptions{});
    return;
  }
  expect_backward_bytes<bf16>(Call::ulysses, {2, 61, 61, 12, 12, 16}, Bytes::half_lse_apart, zig);
  // 2 KV heads: shared at 3 and 4 ranks.
  expect_backward_bytes<fp16>(Call::ulysses, {1, 50, 50, 12, 2, 8}, P > 2 ? Bytes::less : Bytes::half_lse_apart,
                              DistOptions{});
  DistOptions grid;
  grid.ulysses_size = P % 2 == 0 ? 2 : 1;
  const Bytes hybrid = grid.ulysses_size == 1   ? Bytes::same
                       : grid.ulysses_size == P ? Bytes::half_lse_apart
                                                : Bytes::less;
  expect_backward_bytes<bf16>(Call::hybrid, {1, 70, 70, 12, 6, 16}, hybrid, grid);
}

}  // namespace
}  // namespace test
}  // namespace kattn
