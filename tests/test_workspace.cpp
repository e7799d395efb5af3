// The front door given a kattn::Workspace (Options::workspace): the split-KV partials, the
// backward's row sums and dQ partials, the 16-bit backward's float copies, the cascade's partial
// results and the head-major K/V copy come from it. The bits are those of a call without one, on
// the first call and again after a call of another problem has left its values in the buffers;
// a repeated call of the same shapes allocates nothing, and no buffer stays held after a call.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "backward_support.hpp"
#include "kattn/attention.hpp"
#include "kattn/block_patterns.hpp"
#include "kattn/detail/head_major_kv.hpp"
#include "ragged_support.hpp"
#include "storage16_support.hpp"
#include "support.hpp"
#include "workspace_support.hpp"

namespace kattn {
namespace test {
namespace {

template <class V>
std::string bytes_of(const V& v) {
  Kokkos::fence();
  const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::string(reinterpret_cast<const char*>(h.data()), h.span() * sizeof(typename V::value_type));
}

template <class T>
void forward_reuses(const Shape& s, const Options& opt, const std::string& what) {
  const std::uint64_t seed = fresh_seed();
  const Problem<T> p[2] = {Problem<T>(s, seed), Problem<T>(s, seed + 10)};
  expect_reused(what + " " + describe(s, opt) + " seed=" + std::to_string(seed), [&](Workspace* ws, int i) {
    attention(TestSpace(), p[i].q, kv::dense(p[i].k, p[i].v), p[i].o, p[i].lse, using_workspace(opt, ws));
    return bytes_of(p[i].o) + bytes_of(p[i].lse);
  });
}

TEST(Workspace, SplitForwardTakesItsPartialsFromIt) {
  Options split;
  split.splits = 3;
  forward_reuses<float>({2, 37, 300, 4, 2, 16}, split, "float, 3 splits");
  Options causal_chunks;
  causal_chunks.causal = true, causal_chunks.split_chunk = 64;
  forward_reuses<double>({1, 5, 301, 8, 2, 32}, causal_chunks, "double, causal, 64-key chunks");
}

TEST(Workspace, LongInterleavedForwardTakesItsHeadMajorCopyFromIt) {
  // 2048 positions x GQA 2 = 4096 query rows per KV head: the copy is made on host backends.
  const Shape s{1, 2048, 64, 4, 2, 16};
  if (std::is_same_v<TestMemory, Kokkos::HostSpace>) {
    const Problem<float> p(s, 1);
    EXPECT_TRUE(detail::wants_head_major<TestSpace>(dense_params(p.q, p.k, p.v, p.o, p.lse)));
  }
  forward_reuses<float>(s, Options{}, "float, interleaved heads");
}

template <class T>
void backward_reuses(const Shape& s, const Options& opt, const BackwardOptions& bopt, const std::string& what) {
  const std::uint64_t seed = fresh_seed();
  const GradProblem<T> p[2] = {GradProblem<T>(s, seed), GradProblem<T>(s, seed + 10)};
  for (const auto& g : p) g.forward(opt);
  expect_reused(what + " " + describe(s, opt) + " seed=" + std::to_string(seed), [&](Workspace* ws, int i) {
    p[i].backward(using_workspace(opt, ws), bopt);
    return bytes_of(p[i].dq) + bytes_of(p[i].dk) + bytes_of(p[i].dv);
  });
}

TEST(Workspace, BackwardTakesItsRowSumsAndDqPartialsFromIt) {
  Options causal;
  causal.causal = true;
  backward_reuses<float>({2, 70, 90, 4, 2, 16}, causal, BackwardOptions{}, "float, planned");
  BackwardOptions chunks;
  chunks.dq = DqStrategy::key_chunks, chunks.dq_chunks = 3;
  backward_reuses<double>({1, 130, 130, 2, 1, 32}, Options{}, chunks, "double, dQ in 3 key chunks");
  BackwardOptions query_pass;
  query_pass.dq = DqStrategy::query_pass;
  backward_reuses<float>({1, 64, 200, 2, 2, 8}, causal, query_pass, "float, query pass");
}

TEST(Workspace, BlockSparseForwardAndBackwardTakeTheMaskCopyFromIt) {
  const Shape s{1, 100, 130, 4, 2, 16};
  const BlockMask mask = make_block_mask(parse_block_pattern("local:2,global:1"), 16, s.Nq, s.Nk);
  Options opt;
  opt.block_mask = &mask;
  forward_reuses<float>(s, opt, "float, block mask");
  backward_reuses<double>(s, opt, BackwardOptions{}, "double, block mask");
}

TEST(Workspace, SixteenBitBackwardTakesItsFloatCopiesFromIt) {
  const Shape s{2, 45, 60, 4, 2, 16};
  const std::uint64_t seed = fresh_seed();
  const Problem16<bf16> p[2] = {Problem16<bf16>(s, seed), Problem16<bf16>(s, seed + 10)};
  View4<bf16> dout[2], dq[2], dk[2], dv[2];
  for (int i = 0; i < 2; ++i) {
    attention(TestSpace(), p[i].q, kv::dense(p[i].k, p[i].v), p[i].o, p[i].lse);
    dout[i] = rounded_copy<bf16>(p[i].q);
    dq[i] = View4<bf16>("dq", s.B, s.Nq, s.Hq, s.D);
    dk[i] = View4<bf16>("dk", s.B, s.Nk, s.Hkv, s.D), dv[i] = View4<bf16>("dv", s.B, s.Nk, s.Hkv, s.D);
  }
  Options causal;
  causal.causal = true;
  expect_reused("bf16 backward seed=" + std::to_string(seed), [&](Workspace* ws, int i) {
    attention_backward(TestSpace(), p[i].q, kv::dense(p[i].k, p[i].v), p[i].o, p[i].lse, dout[i], dq[i], dk[i], dv[i],
                       using_workspace(causal, ws));
    return bytes_of(dq[i]) + bytes_of(dk[i]) + bytes_of(dv[i]);
  });
}

TEST(Workspace, RaggedSplitForwardAndCascadeTakeTheirBuffersFromIt) {
  const std::uint64_t seed = fresh_seed();
  const std::vector<std::int64_t> q_lens{3, 1, 0, 7}, kv_lens{250, 40, 9, 300};
  const RaggedProblem<float> p[2] = {RaggedProblem<float>(q_lens, kv_lens, 4, 2, 16, seed),
                                     RaggedProblem<float>(q_lens, kv_lens, 4, 2, 16, seed + 10)};
  const auto layout = make_ragged_layout<TestMemory>(host_index(p[0].q_indptr()), host_index(p[0].kv_indptr()));
  Options split;
  split.splits = 4;
  expect_reused("ragged, 4 splits seed=" + std::to_string(seed), [&](Workspace* ws, int i) {
    attention(TestSpace(), p[i].q, kv::ragged(p[i].k, p[i].v, layout), p[i].o, p[i].lse, using_workspace(split, ws));
    return bytes_of(p[i].o) + bytes_of(p[i].lse);
  });
  // A prefix of 50 keys every request shares; no lse asked for, so the suffix pass's is a buffer too.
  View3<float> kp("k_prefix", 50, 2, 16), vp("v_prefix", 50, 2, 16);
  fill_normal(kp, seed + 20), fill_normal(vp, seed + 21);
  Options causal;
  causal.causal = true;
  expect_reused("cascade seed=" + std::to_string(seed), [&](Workspace* ws, int i) {
    attention(TestSpace(), p[i].q, kv::cascade(kp, vp, kv::ragged(p[i].k, p[i].v, layout)), p[i].o, View2<float>(),
              using_workspace(causal, ws));
    return bytes_of(p[i].o);
  });
}

}  // namespace
}  // namespace test
}  // namespace kattn
