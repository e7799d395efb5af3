// kattn::attention's way to the hand-written CUDA kernels (detail/cuda_dispatch.hpp; the rule is
// detail/cuda/kernel_rule.hpp, tested on the host in tests/cuda_bridge), seen from the
// front door: a 16-bit paged decode the CUDA split-KV decode takes runs on it where kattn has the
// dispatch (a CUDA space, the kernels built), and the plan says so; every other space, and every
// problem the decode does not take, runs the portable kernel. Either way o meets FlashAttention's
// rule against the float64 textbook on the same 16-bit inputs.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/detail/cuda_dispatch.hpp"
#include "ragged16_support.hpp"
#include "storage16_support.hpp"

namespace kattn {
namespace test {
namespace {

constexpr const char* kCudaDecode = "CUDA split-KV paged decode";

bool has_cuda_dispatch() { return KATTN_CUDA_DISPATCH && std::string(TestSpace::name()) == "Cuda"; }

// A paged decode-like batch (Hq 8, Hkv 2, D 128, pages of 16 keys) in storage S: o checked against
// the rule; returns the plan's reason.
template <class S>
std::string paged_reason(const std::vector<std::int64_t>& q_lens, const std::vector<std::int64_t>& kv_lens,
                         const Options& opt) {
  const int Hq = 8, Hkv = 2, D = 128, page = 16;
  const std::uint64_t seed = fresh_seed();
  RaggedProblem<double> exact(q_lens, kv_lens, Hq, Hkv, D, seed);
  const std::string what = std::string(storage_name<S>()) + " " + exact.what() + " " + describe(Shape{}, opt) +
                           " seed=" + std::to_string(seed);
  SCOPED_TRACE(what);
  // The exact inputs rounded to S in place (the pages below copy k and v), and q's S copy.
  const View3<S> q = rounded_copy<S>(exact.q);
  rounded_copy<S>(exact.k);
  rounded_copy<S>(exact.v);
  PagedCopy<double> cache(exact, page, seed + 11);
  View4<S> kp("kp", cache.k.extent(0), page, Hkv, D), vp("vp", cache.v.extent(0), page, Hkv, D);
  convert_into(cache.k, kp);
  convert_into(cache.v, vp);
  const auto layout = make_paged_layout<TestMemory>(host_index(exact.q_indptr()), host_index(cache.page_indptr),
                                                    host_index(cache.page_indices), host_index(cache.last_page_len),
                                                    page);
  View3<S> o("o", exact.o.extent(0), Hq, D);
  View2<float> lse("lse", exact.lse.extent(0), Hq);
  poison(o);
  poison(lse);
  const SplitPlan plan = attention(TestSpace(), q, kv::paged(kp, vp, layout), o, lse, opt);
  Kokkos::fence();
  const RaggedHost host(exact);
  expect_16bit_rule<S>(host.params(), opt, to_host(o), to_host(lse), "paged " + what);
  return plan.reason;
}

const std::vector<std::int64_t> kOneQueryEach{1, 1, 1, 1}, kKeys{1, 700, 0, 300};  // a sequence without keys

TEST(CudaDispatch, PagedDecodesTheCudaDecodeTakesRunOnItWhereKattnHasTheDispatch) {
  for (bool causal : {false, true})
    for (int splits : {0, 1, 3}) {
      Options opt;
      opt.causal = causal;  // a sequence's one query sees all its keys either way
      opt.splits = splits;
      for (const std::string& reason :
           {paged_reason<bf16>(kOneQueryEach, kKeys, opt), paged_reason<fp16>(kOneQueryEach, kKeys, opt)})
        EXPECT_EQ(reason.find(kCudaDecode) != std::string::npos, has_cuda_dispatch()) << reason;
    }
}

TEST(CudaDispatch, PagedProblemsTheCudaDecodeDoesNotTakeRunThePortableKernel) {
  Options softcap, window, chunk;
  softcap.softcap = 4.0;
  window.window_left = 20;
  chunk.split_chunk = 128;
  for (const Options& opt : {softcap, window, chunk})
    EXPECT_EQ(paged_reason<bf16>(kOneQueryEach, kKeys, opt).find(kCudaDecode), std::string::npos);
  EXPECT_EQ(paged_reason<fp16>({1, 2, 1, 1}, kKeys, Options{}).find(kCudaDecode), std::string::npos);
}

}  // namespace
}  // namespace test
}  // namespace kattn
