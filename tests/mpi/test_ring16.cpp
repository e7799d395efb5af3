// Ring attention in 16-bit storage (bf16, fp16 q, k, v, o; lse float): each rank's shard against
// the float64 reference of the whole sequence on the same rounded inputs under FlashAttention's
// rule (storage16_support.hpp), for the forward and the gradients; causal, window, GQA, uneven
// shards and fewer positions than ranks, contiguous and zigzag; K/V sent in 16 bits, forward and
// backward, dK/dV in float (bytes sent equal to dist::traffic's model at 2 and 4 bytes a value;
// half the K/V bytes of the backward on float copies); deterministic bits the same as one rank
// alone; head sharding and hybrid, which take 16-bit through the same front door; and ranks that
// pass different storage types refused alike.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "dist_support.hpp"
#include "gather_rows.hpp"
#include "kattn/distributed/attention.hpp"
#include "kattn/distributed/traffic.hpp"
#include "kattn/reference_backward.hpp"
#include "storage16_support.hpp"

namespace kattn {
namespace test {
namespace {

enum class Call { ring, ulysses, hybrid, grid };

// d with the scheme of the call.
DistOptions of_call(Call call, const DistOptions& d) {
  return with_scheme(call == Call::ulysses  ? dist::Scheme::ulysses
                     : call == Call::hybrid ? dist::Scheme::hybrid
                     : call == Call::grid   ? dist::Scheme::grid
                                            : dist::Scheme::ring,
                     d);
}

template <class S>
dist::DistStats forward(Call call, MPI_Comm comm, const View4<S>& q, const View4<S>& k, const View4<S>& v,
                        const View4<S>& o, const View3<float>& lse, const Options& opt, const DistOptions& d) {
  return dist::attention(comm, Kokkos::DefaultExecutionSpace(), q, kv::dense(k, v), o, lse, opt, of_call(call, d));
}

// o and lse of the whole sequence, gathered from every rank's shard of a 16-bit run over comm.
struct Run16 {
  std::vector<double> o, lse;
  dist::DistStats stats;
};

template <class S>
Run16 run_forward(Call call, MPI_Comm comm, const Problem16<S>& p, const Options& opt, const DistOptions& d) {
  const Shape& s = p.shape;
  const int P = size_of(comm), rank = rank_of(comm);
  const SequenceLayout ql = dist::layout_of(s.Nq, P, of_call(call, d)), kl = dist::layout_of(s.Nk, P, of_call(call, d));
  const std::size_t n = static_cast<std::size_t>(ql.local_length(rank));
  View4<S> o("o", s.B, n, s.Hq, s.D);
  View3<float> lse("lse", s.B, s.Hq, n);
  poison(o);
  poison(lse);
  Run16 r;
  r.stats = forward(call, comm, shard(p.q, ql, rank, "q"), shard(p.k, kl, rank, "k"), shard(p.v, kl, rank, "v"), o, lse,
                    opt, d);
  Kokkos::fence();
  const std::size_t B = s.B, Nq = s.Nq, Hq = s.Hq, D = s.D;
  r.o = gathered_rows(o, ql, {B, Nq, Hq, D}, comm);
  r.lse = gathered_rows(lse, ql, {B, Hq, Nq}, comm);
  return r;
}

template <class S>
void check_forward(Call call, const Shape& s, const Options& opt, const DistOptions& d = {}) {
  const std::uint64_t seed = shared_seed();
  const std::string what = std::string(storage_name<S>()) + " call=" + std::to_string(int(call)) + " " +
                           describe(s, opt) + " " + dist::name(d.sharding) + (d.deterministic ? " deterministic" : "") +
                           " seed=" + std::to_string(seed);
  SCOPED_TRACE(what);
  const Problem16<S> p(s, seed);
  const Run16 r = run_forward(call, MPI_COMM_WORLD, p, opt, d);
  expect_16bit_rule<S>(p.host().params(), opt, r.o, r.lse, what);
  if (call == Call::ring || call == Call::grid) {
    // K and V travel in their 16 bits: what was sent is the model at 2 bytes a value.
    EXPECT_EQ(r.stats.bytes_sent, modelled_sent(s, 2, opt, of_call(call, d), dist::Pass::forward)) << what;
  }
  if (d.deterministic) {
    // The bits of one rank alone (hybrid's and the grid's deterministic modes are the ring's).
    const Run16 alone =
        run_forward(call == Call::hybrid || call == Call::grid ? Call::ring : call, MPI_COMM_SELF, p, opt, d);
    EXPECT_EQ(std::memcmp(alone.o.data(), r.o.data(), r.o.size() * sizeof(double)), 0)
        << what << ": o differs from one rank's";
    EXPECT_EQ(std::memcmp(alone.lse.data(), r.lse.data(), r.lse.size() * sizeof(double)), 0)
        << what << ": lse differs from one rank's";
  }
}

std::vector<Options> masks() {
  std::vector<Options> v(4);
  v[1].causal = true;
  v[2].causal = true, v[2].window_left = 20;
  v[3].window_left = 9, v[3].window_right = 5, v[3].softcap = 3.0;
  return v;
}

std::vector<DistOptions> shardings() {
  std::vector<DistOptions> v(4);
  v[1].sharding = dist::Sharding::zigzag;
  v[2].deterministic = true, v[2].chunk = 16;
  v[3].deterministic = true, v[3].chunk = 16, v[3].sharding = dist::Sharding::zigzag;
  return v;
}

TEST(Ring16, ForwardMeetsTheRuleOnEveryShardingAndSendsSixteenBits) {
  for (const Options& o : masks())
    for (const DistOptions& d : shardings()) {
      check_forward<bf16>(Call::ring, {2, 113, 113, 4, 2, 32}, o, d);  // GQA 2:1, uneven shards
      check_forward<fp16>(Call::ring, {1, 77, 130, 8, 1, 64}, o, d);   // GQA 8:1, Nq != Nk
    }
}

// The grid in bf16 and fp16 (q widened, K/V sent in 16 bits, o rounded once), the most square
// shape of the ranks; its deterministic bits the one-rank ring's.
TEST(Ring16, GridMeetsTheRuleAndSendsSixteenBitKeys) {
  for (const Options& o : masks())
    for (const DistOptions& d : shardings()) {
      check_forward<bf16>(Call::grid, {2, 113, 113, 4, 2, 32}, o, d);
      check_forward<fp16>(Call::grid, {1, 77, 130, 8, 1, 64}, o, d);
    }
}

TEST(Ring16, FewerPositionsThanRanks) {
  Options causal;
  causal.causal = true;
  for (const DistOptions& d : shardings()) {
    check_forward<bf16>(Call::ring, {1, 3, 3, 2, 1, 16}, causal, d);
    check_forward<fp16>(Call::ring, {2, 1, 2, 2, 2, 8}, Options{}, d);
  }
}

TEST(Ring16, HeadShardingAndHybridTakeSixteenBits) {
  const int P = size_of(MPI_COMM_WORLD);
  Options causal;
  causal.causal = true, causal.window_left = 30;
  DistOptions zig;
  zig.sharding = dist::Sharding::zigzag;
  DistOptions det;
  det.deterministic = true, det.chunk = 16;
  DistOptions grid = det;
  grid.ulysses_size = P % 2 == 0 ? 2 : 1;
  for (const Options& o : {Options{}, causal}) {
    check_forward<bf16>(Call::ulysses, {1, 101, 101, 12, 2, 32}, o, zig);
    check_forward<fp16>(Call::ulysses, {2, 64, 64, 12, 4, 16}, o, det);
    check_forward<bf16>(Call::hybrid, {1, 101, 101, 12, 6, 32}, o, grid);
  }
}

// The overload without lse writes the same o.
TEST(Ring16, WithoutLseTheSameO) {
  const Shape s{2, 57, 57, 4, 2, 16};
  const Problem16<bf16> p(s, shared_seed());
  const int rank = rank_of(MPI_COMM_WORLD);
  Options causal;
  causal.causal = true;
  DistOptions d;
  d.sharding = dist::Sharding::zigzag;
  const SequenceLayout ql = dist::layout_of(s.Nq, size_of(MPI_COMM_WORLD), d), kl = ql;
  const View4<bf16> q = shard(p.q, ql, rank, "q"), k = shard(p.k, kl, rank, "k"), v = shard(p.v, kl, rank, "v");
  View4<bf16> o("o", s.B, static_cast<std::size_t>(ql.local_length(rank)), s.Hq, s.D);
  poison(o);
  dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), q, kv::dense(k, v), o, causal, d);
  Kokkos::fence();
  const Run16 with_lse = run_forward(Call::ring, MPI_COMM_WORLD, p, causal, d);
  const std::size_t B = s.B, Nq = s.Nq, Hq = s.Hq, D = s.D;
  const std::vector<double> alone = gathered_rows(o, ql, {B, Nq, Hq, D});
  EXPECT_EQ(std::memcmp(alone.data(), with_lse.o.data(), alone.size() * sizeof(double)), 0);
}

// dq, dk, dv of a 16-bit forward's outputs against the float64 reference gradients and the
// textbook backward in S; deterministic gradients the same bits as one rank's; K/V sent in 16
// bits and dK/dV in float (bytes sent equal to dist::traffic's model at 2 and 4 bytes a value).
struct Grads16 {
  std::vector<double> dq, dk, dv;
  dist::DistStats forward, backward;
};

// The float copy of a 16-bit array (exact).
template <class S>
View4<float> as_float(const View4<S>& a) {
  const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  const auto f = Kokkos::create_mirror_view(Kokkos::HostSpace(), View4<float>("as_float", a.layout()));
  for (std::size_t b = 0; b < h.extent(0); ++b)
    for (std::size_t j = 0; j < h.extent(1); ++j)
      for (std::size_t x = 0; x < h.extent(2); ++x)
        for (std::size_t d = 0; d < h.extent(3); ++d) f(b, j, x, d) = widen(h(b, j, x, d));
  return Kokkos::create_mirror_view_and_copy(Kokkos::DefaultExecutionSpace::memory_space(), f);
}

template <class S>
Grads16 run_backward(MPI_Comm comm, const Problem16<S>& p, const View4<S>& dout, const Options& opt,
                     const DistOptions& d) {
  const Shape& s = p.shape;
  const int rank = rank_of(comm), P = size_of(comm);
  const SequenceLayout ql = dist::layout_of(s.Nq, P, d), kl = dist::layout_of(s.Nk, P, d);
  const std::size_t nq = static_cast<std::size_t>(ql.local_length(rank)),
                    nk = static_cast<std::size_t>(kl.local_length(rank));
  const View4<S> q = shard(p.q, ql, rank, "q"), k = shard(p.k, kl, rank, "k"), v = shard(p.v, kl, rank, "v"),
                 dq("dq", s.B, nq, s.Hq, s.D), dk("dk", s.B, nk, s.Hkv, s.D), dv("dv", s.B, nk, s.Hkv, s.D),
                 o("o", s.B, nq, s.Hq, s.D), dout_r = shard(dout, ql, rank, "dout");
  View3<float> lse("lse", s.B, s.Hq, nq);
  const auto space = Kokkos::DefaultExecutionSpace();
  Grads16 g;
  g.forward = dist::attention(comm, space, q, kv::dense(k, v), o, lse, opt, d);
  poison(dq), poison(dk), poison(dv);
  g.backward = dist::attention_backward(comm, space, q, kv::dense(k, v), o, lse, dout_r, dq, dk, dv, opt, {}, d);
  Kokkos::fence();
  const std::size_t B = s.B, Nq = s.Nq, Nk = s.Nk, Hq = s.Hq, Hkv = s.Hkv, D = s.D;
  g.dq = gathered_rows(dq, ql, {B, Nq, Hq, D}, comm);
  g.dk = gathered_rows(dk, kl, {B, Nk, Hkv, D}, comm);
  g.dv = gathered_rows(dv, kl, {B, Nk, Hkv, D}, comm);
  if (!d.deterministic) {
    // The same backward on float copies moves its K/V in float: twice the bytes. The ring's K/V
    // are those its forward sends, so the difference is the forward's 16-bit K/V bytes.
    const View4<float> dqf("dqf", s.B, nq, s.Hq, s.D), dkf("dkf", s.B, nk, s.Hkv, s.D), dvf("dvf", s.B, nk, s.Hkv, s.D);
    const dist::DistStats f32 =
        dist::attention_backward(comm, space, as_float(q), kv::dense(as_float(k), as_float(v)), as_float(o), lse,
                                      as_float(dout_r), dqf, dkf, dvf, opt, {}, d);
    // The grid's forward sends queries and results too: there the K/V bytes are the model's.
    const std::int64_t kv16 = d.scheme == dist::Scheme::grid ? modelled_sent(s, 4, opt, d, dist::Pass::backward) -
                                                                   modelled_sent(s, 2, opt, d, dist::Pass::backward)
                                                             : g.forward.bytes_sent;
    EXPECT_EQ(f32.bytes_sent - g.backward.bytes_sent, kv16) << "float K/V: twice the bytes";
  }
  return g;
}

template <class S>
void check_backward(const Shape& s, const Options& opt, const DistOptions& d = {}) {
  const std::uint64_t seed = shared_seed();
  const std::string what = std::string(storage_name<S>()) + " backward " + describe(s, opt) + " " +
                           dist::name(d.sharding) + (d.deterministic ? " deterministic" : "") +
                           " seed=" + std::to_string(seed);
  SCOPED_TRACE(what);
  const Problem16<S> p(s, seed);
  const Backward16Reference<S> ref = backward16_reference(p, opt, seed);
  const View4<S>& dout = ref.dout;
  const Grads16 g = run_backward(MPI_COMM_WORLD, p, dout, opt, d);
  EXPECT_EQ(g.backward.bytes_sent, modelled_sent(s, 2, opt, d, dist::Pass::backward)) << what;
  expect_16bit_grad_rule({g.dq, g.dk, g.dv}, ref.tb, ref.grads, what);
  if (d.deterministic) {
    const Grads16 alone = run_backward(MPI_COMM_SELF, p, dout, opt, d);
    expect_gradient_bits_equal(alone, g, what);
  }
}

// FlashAttention's grid sizes, and a causal square whose first rows see a handful of keys (where
// the rule's allowance for the 16-bit o that D = rowsum(dO o) reads matters).
TEST(Ring16, BackwardMeetsTheRuleOnEveryShardingAndBitsAreDeterministic) {
  Options causal, window;
  causal.causal = true;
  window.causal = true, window.window_left = 60;
  for (const Options& o : {Options{}, causal, window})
    for (const DistOptions& d : shardings()) {
      check_backward<bf16>({1, 113, 203, 4, 2, 32}, o, d);
      check_backward<fp16>({1, 128, 128, 2, 1, 64}, o, d);
    }
}

// The grid's backward in bf16 and fp16, the most square shape of the ranks: the rule, K/V sent in
// 16 bits, its deterministic bits one rank's.
TEST(Ring16, GridBackwardMeetsTheRule) {
  Options causal;
  causal.causal = true;
  for (const Options& o : {Options{}, causal})
    for (DistOptions d : shardings()) {
      d.scheme = dist::Scheme::grid;
      check_backward<bf16>({1, 113, 203, 4, 2, 32}, o, d);
      check_backward<fp16>({1, 128, 128, 2, 1, 64}, o, d);
    }
}

// A rank whose arrays have another storage type than rank 0's: the same kattn::Error everywhere,
// naming the argument, before any transfer.
template <class Mine>
void call_ring(std::int64_t n) {
  const std::size_t un = static_cast<std::size_t>(n);
  View4<Mine> q("q", 1, un, 2, 8), k("k", 1, un, 2, 8), v("v", 1, un, 2, 8), o("o", 1, un, 2, 8);
  dist::attention(MPI_COMM_WORLD, Kokkos::DefaultExecutionSpace(), q, kv::dense(k, v), o);
}

TEST(DistErrors, Ring16StorageDiffersAcrossRanks) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  if (P < 2) GTEST_SKIP() << "needs two ranks";
  const std::int64_t n = SequenceLayout(20, P, dist::Sharding::contiguous).local_length(rank);
  expect_same_error(
      [&] {
        if (rank == P - 1)
          call_ring<fp16>(n);
        else
          call_ring<bf16>(n);
      },
      "q: expected dtype bf16 (from rank 0), got f16 on rank " + std::to_string(P - 1));
  expect_same_error(
      [&] {
        if (rank == P - 1)
          call_ring<bf16>(n);
        else
          call_ring<float>(n);
      },
      "q: expected dtype f32 (from rank 0), got bf16 on rank " + std::to_string(P - 1));
}

}  // namespace
}  // namespace test
}  // namespace kattn
