// The backward in 16-bit storage: dq, dk, dv against the float64 textbook backward on the same
// 16-bit inputs under FlashAttention's rule (at most twice the error of the textbook backward run
// in the 16-bit type) on FlashAttention's test grid, every mask and GQA ratio, on the CPU products
// the process takes (bf16 pairs on AMD's cores with AVX512_BF16) and on bf16 pairs asked for (their
// emulation where the CPU lacks them); with the products widened, edge shapes, ragged and paged
// batches equal the rounding of the float backward on the same values (that path is that, by
// construction).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/detail/tuning.hpp"
#include "kattn/errors.hpp"
#include "kattn/reference_backward.hpp"
#include "ragged_support.hpp"
#include "storage16_support.hpp"

namespace kattn {
namespace test {
namespace {

template <class S>
void check_backward(const Shape& s, const Options& opt) {
  const std::uint64_t seed = fresh_seed();
  const std::string what = std::string(storage_name<S>()) + " " + describe(s, opt) + " seed=" + std::to_string(seed);
  SCOPED_TRACE(what);
  Problem16<S> p(s, seed);
  const Backward16Reference<S> ref = backward16_reference(p, opt, seed);
  View4<S> dq("dq", s.B, s.Nq, s.Hq, s.D), dk("dk", s.B, s.Nk, s.Hkv, s.D), dv("dv", s.B, s.Nk, s.Hkv, s.D);
  poison(dq), poison(dk), poison(dv);
  const auto space = TestSpace();
  attention(space, p.q, kv::dense(p.k, p.v), p.o, p.lse, opt);
  attention_backward(space, p.q, kv::dense(p.k, p.v), p.o, p.lse, ref.dout, dq, dk, dv, opt);
  Kokkos::fence();
  expect_16bit_grad_rule({to_host(dq), to_host(dk), to_host(dv)}, ref.tb, ref.grads, what);
}

// The rule (storage16_support.hpp, expect_16bit_grad_rule) on FlashAttention's own test grid
// (head dims 32 to 128, lengths that tiles do not divide); edge shapes are checked below against
// the rounded float backward (DenseEdgeShapesAreTheRoundedFloatBackward).
TEST(Storage16Backward, DenseMeetsTheRuleForEveryVariantAndGqaRatio) {
  const std::vector<Shape> shapes = {{2, 113, 203, 4, 2, 32}, {1, 128, 217, 2, 1, 128}, {1, 203, 113, 8, 1, 64}};
  for (const Shape& s : shapes)
    for (const Options& o : option_variants()) {
      check_backward<bf16>(s, o);
      check_backward<fp16>(s, o);
    }
  for (int ratio : {1, 2, 8}) {
    Options tiles;
    tiles.block_q = 7, tiles.block_k = 5;
    check_backward<bf16>({1, 113, 203, 2 * ratio, 2, 64}, tiles);
  }
}

// A ragged batch of 8 query heads over 2 KV heads in float, rounded to S in place (so float and S
// runs see the same values), with its S copies, dO, and the float forward's o and lse (o rounded for
// the S runs).
template <class S>
struct RaggedInputs16 {
  RaggedProblem<float> f;
  View3<S> q, k, v, dout, o;
  View3<float> dout_f;
  RaggedLayout<TestMemory> ragged;

  RaggedInputs16(const std::vector<std::int64_t>& q_lens, const std::vector<std::int64_t>& kv_lens, int D,
                 std::uint64_t seed, const Options& opt)
      : f(q_lens, kv_lens, 8, 2, D, seed), dout_f("dout", f.q.extent(0), 8, D) {
    q = rounded_copy<S>(f.q), k = rounded_copy<S>(f.k), v = rounded_copy<S>(f.v);
    fill_normal(dout_f, seed + 5);
    dout = rounded_copy<S>(dout_f);
    ragged = make_ragged_layout<TestMemory>(host_index(f.q_indptr()), host_index(f.kv_indptr()));
    attention(TestSpace(), f.q, kv::ragged(f.k, f.v, ragged), f.o, f.lse, opt);
    Kokkos::fence();
    o = rounded_copy<S>(f.o);
  }

  // The same keys and values in shuffled pages of `page` slots (PagedCopy): in float and in S.
  struct Paged {
    PagedCopy<float> cache;
    View4<S> k, v;
    PagedLayout<TestMemory> layout;
  };
  Paged paged(int page, std::uint64_t seed) const {
    Paged p{PagedCopy<float>(f, page, seed), {}, {}, {}};
    const int H = static_cast<int>(f.k.extent(1)), D = static_cast<int>(f.k.extent(2));
    p.k = View4<S>("kp", p.cache.k.extent(0), page, H, D), p.v = View4<S>("vp", p.cache.v.extent(0), page, H, D);
    convert_into(p.cache.k, p.k);
    convert_into(p.cache.v, p.v);
    p.layout = make_paged_layout<TestMemory>(host_index(f.q_indptr()), host_index(p.cache.page_indptr),
                                             host_index(p.cache.page_indices), host_index(p.cache.last_page_len), page);
    return p;
  }
};

// Ragged and paged, products widened: the 16-bit backward equals the rounding of the float backward
// on the same (widened) values, bit for bit; unused page slots come back 0.
template <class S>
void check_kinds(const std::vector<std::int64_t>& q_lens, const std::vector<std::int64_t>& kv_lens, int page,
                 const Options& widened_opt) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(std::string(storage_name<S>()) + " page=" + std::to_string(page) + " " + describe(Shape{}, widened_opt) +
               " seed=" + std::to_string(seed));
  Options opt = widened_opt;
  opt.cpu_products = CpuProducts::widened;
  BackwardOptions bopt;
  bopt.deterministic = true;
  const RaggedInputs16<S> in(q_lens, kv_lens, 16, seed, opt);
  const RaggedProblem<float>& f = in.f;
  const auto& [q, k, v, dout, o] = std::tie(in.q, in.k, in.v, in.dout, in.o);
  const auto& dout_f = in.dout_f;
  const auto& ragged = in.ragged;
  const auto space = TestSpace();
  View3<float> dq_f("dq", f.q.extent(0), 8, 16), dk_f("dk", f.k.extent(0), 2, 16), dv_f("dv", f.k.extent(0), 2, 16);
  View3<S> dq("dq", f.q.extent(0), 8, 16), dk("dk", f.k.extent(0), 2, 16), dv("dv", f.k.extent(0), 2, 16);
  attention_backward(space, f.q, kv::ragged(f.k, f.v, ragged), f.o, f.lse, dout_f, dq_f, dk_f, dv_f, opt, bopt);
  attention_backward(space, q, kv::ragged(k, v, ragged), o, f.lse, dout, dq, dk, dv, opt, bopt);
  Kokkos::fence();
  const auto expect_rounding_of = [](const auto& got, const auto& wide, const std::string& what) {
    const std::vector<double> a = to_host(got), b = to_host(wide);
    for (std::size_t n = 0; n < a.size(); ++n)
      ASSERT_EQ(a[n], static_cast<double>(widen(narrow<S>(static_cast<float>(b[n]))))) << what << " element " << n;
  };
  expect_rounding_of(dq, dq_f, "ragged dq");
  expect_rounding_of(dk, dk_f, "ragged dk");
  expect_rounding_of(dv, dv_f, "ragged dv");

  // Paged: the same keys in pages of float (already rounded values) and of S.
  const auto [cache, kp, vp, paged] = in.paged(page, seed + 11);
  View4<float> dkp_f("dkp", cache.k.extent(0), page, 2, 16), dvp_f("dvp", cache.k.extent(0), page, 2, 16);
  View4<S> dkp("dkp", cache.k.extent(0), page, 2, 16), dvp("dvp", cache.k.extent(0), page, 2, 16);
  poison(dkp), poison(dvp);  // slots that hold no key must come back 0
  attention_backward(space, f.q, kv::paged(cache.k, cache.v, paged), f.o, f.lse, dout_f, dq_f, dkp_f, dvp_f, opt, bopt);
  attention_backward(space, q, kv::paged(kp, vp, paged), o, f.lse, dout, dq, dkp, dvp, opt, bopt);
  Kokkos::fence();
  expect_rounding_of(dq, dq_f, "paged dq");
  expect_rounding_of(dkp, dkp_f, "paged dk");
  expect_rounding_of(dvp, dvp_f, "paged dv");
}

// Edge shapes (one token, head dims 1 and 3, rows of a few keys), products widened: the 16-bit
// backward is the rounding of the float backward on the same values.
TEST(Storage16Backward, DenseEdgeShapesAreTheRoundedFloatBackward) {
  for (const Shape& s : {Shape{1, 1, 1, 1, 1, 1}, Shape{2, 13, 13, 2, 2, 3}, Shape{1, 37, 21, 8, 1, 8}})
    for (Options o : option_variants()) {
      o.cpu_products = CpuProducts::widened;
      SCOPED_TRACE(describe(s, o));
      Problem16<bf16> p(s, fresh_seed());
      View4<float> q("q", s.B, s.Nq, s.Hq, s.D), k("k", s.B, s.Nk, s.Hkv, s.D), v("v", s.B, s.Nk, s.Hkv, s.D),
          o_f("o", s.B, s.Nq, s.Hq, s.D), dout_f("dout", s.B, s.Nq, s.Hq, s.D), dq_f("dq", s.B, s.Nq, s.Hq, s.D),
          dk_f("dk", s.B, s.Nk, s.Hkv, s.D), dv_f("dv", s.B, s.Nk, s.Hkv, s.D);
      View4<bf16> dout("dout", s.B, s.Nq, s.Hq, s.D), dq("dq", s.B, s.Nq, s.Hq, s.D), dk("dk", s.B, s.Nk, s.Hkv, s.D),
          dv("dv", s.B, s.Nk, s.Hkv, s.D);
      View4<double> dout_d("dout_d", s.B, s.Nq, s.Hq, s.D);
      fill_rounded(dout, dout_d, fresh_seed());
      const auto space = TestSpace();
      attention(space, p.q, kv::dense(p.k, p.v), p.o, p.lse, o);
      Kokkos::fence();
      convert_into(p.q, q), convert_into(p.k, k), convert_into(p.v, v), convert_into(p.o, o_f),
          convert_into(dout, dout_f);
      BackwardOptions bopt;
      bopt.deterministic = true;
      attention_backward(space, q, kv::dense(k, v), o_f, p.lse, dout_f, dq_f, dk_f, dv_f, o, bopt);
      attention_backward(space, p.q, kv::dense(p.k, p.v), p.o, p.lse, dout, dq, dk, dv, o, bopt);
      Kokkos::fence();
      for (const auto& [got, want, what] :
           {std::make_tuple(dq, dq_f, "dq"), std::make_tuple(dk, dk_f, "dk"), std::make_tuple(dv, dv_f, "dv")}) {
        const std::vector<double> a = to_host(got), b = to_host(want);
        for (std::size_t n = 0; n < a.size(); ++n)
          ASSERT_EQ(a[n], static_cast<double>(widen(narrow<bf16>(static_cast<float>(b[n]))))) << what << " " << n;
      }
    }
}

TEST(Storage16Backward, RaggedAndPagedAreTheRoundedFloatBackward) {
  std::vector<Options> variants(3);
  variants[1].causal = true;
  variants[2].window_left = 5, variants[2].window_right = 2, variants[2].softcap = 3.0;
  for (const Options& o : variants)
    for (int page : {3, 16}) {
      check_kinds<bf16>({4, 0, 33, 1}, {7, 5, 40, 0}, page, o);
      check_kinds<fp16>({4, 0, 33, 1}, {7, 5, 40, 0}, page, o);
    }
}

// bf16 pairs asked for (the instruction where the CPU has it, else its emulation): the rule on edge
// shapes (one token, odd head dims, 40 / 72 / 200, tiles that do not divide N, GQA) and every variant.
TEST(Storage16Backward, PairProductsMeetTheRuleOnEdgeShapes) {
  const std::vector<Shape> shapes = {{1, 1, 1, 1, 1, 1},   {2, 13, 13, 2, 2, 3},  {1, 37, 21, 8, 1, 8},
                                     {1, 45, 70, 2, 1, 40}, {1, 33, 50, 4, 2, 72}, {1, 20, 29, 2, 2, 200}};
  for (const Shape& s : shapes)
    for (Options o : option_variants()) {
      o.cpu_products = CpuProducts::bf16_dot;
      check_backward<bf16>(s, o);
    }
  for (int ratio : {1, 4}) {
    Options tiles;
    tiles.cpu_products = CpuProducts::bf16_dot;
    tiles.block_q = 7, tiles.block_k = 5;
    check_backward<bf16>({1, 51, 83, 2 * ratio, 2, 64}, tiles);
  }
}

// bf16 pairs on ragged and paged batches: the widened backward of the same batch to bf16's
// rounding of P and dS (each element within 2% of the gradient's largest: an addressing fault is
// off by the gradient's size); unused page slots come back 0.
TEST(Storage16Backward, PairProductsOnRaggedAndPagedFollowTheWidenedBackward) {
  std::vector<Options> variants(3);
  variants[1].causal = true;
  variants[2].window_left = 5, variants[2].window_right = 2, variants[2].softcap = 3.0;
  const std::vector<std::int64_t> q_lens = {4, 0, 33, 1}, kv_lens = {7, 5, 40, 0};
  for (Options opt : variants) {
    const std::uint64_t seed = fresh_seed();
    SCOPED_TRACE(describe(Shape{}, opt) + " seed=" + std::to_string(seed));
    const RaggedInputs16<bf16> in(q_lens, kv_lens, 32, seed, opt);
    const RaggedProblem<float>& f = in.f;
    const auto& [q, k, v, dout, o] = std::tie(in.q, in.k, in.v, in.dout, in.o);
    const auto& ragged = in.ragged;
    const auto space = TestSpace();
    const auto expect_close = [](const auto& pairs, const auto& widened, const std::string& what) {
      const std::vector<double> a = to_host(pairs), b = to_host(widened);
      double largest = 0;
      for (double x : b) largest = std::max(largest, std::abs(x));
      for (std::size_t n = 0; n < a.size(); ++n)
        ASSERT_LE(std::abs(a[n] - b[n]), 0.02 * largest + 1e-30) << what << " element " << n;
    };
    Options pairs = opt, widened = opt;
    pairs.cpu_products = CpuProducts::bf16_dot;
    widened.cpu_products = CpuProducts::widened;
    View3<bf16> dq("dq", f.q.extent(0), 8, 32), dk("dk", f.k.extent(0), 2, 32), dv("dv", f.k.extent(0), 2, 32);
    View3<bf16> dq_w("dq", f.q.extent(0), 8, 32), dk_w("dk", f.k.extent(0), 2, 32), dv_w("dv", f.k.extent(0), 2, 32);
    attention_backward(space, q, kv::ragged(k, v, ragged), o, f.lse, dout, dq, dk, dv, pairs);
    attention_backward(space, q, kv::ragged(k, v, ragged), o, f.lse, dout, dq_w, dk_w, dv_w, widened);
    Kokkos::fence();
    expect_close(dq, dq_w, "ragged dq");
    expect_close(dk, dk_w, "ragged dk");
    expect_close(dv, dv_w, "ragged dv");

    const auto [cache, kp, vp, paged] = in.paged(16, seed + 11);
    View4<bf16> dkp("dkp", cache.k.extent(0), 16, 2, 32), dvp("dvp", cache.k.extent(0), 16, 2, 32);
    View4<bf16> dkp_w("dkp", cache.k.extent(0), 16, 2, 32), dvp_w("dvp", cache.k.extent(0), 16, 2, 32);
    poison(dkp), poison(dvp);  // slots that hold no key must come back 0
    attention_backward(space, q, kv::paged(kp, vp, paged), o, f.lse, dout, dq, dkp, dvp, pairs);
    attention_backward(space, q, kv::paged(kp, vp, paged), o, f.lse, dout, dq_w, dkp_w, dvp_w, widened);
    Kokkos::fence();
    expect_close(dq, dq_w, "paged dq");
    expect_close(dkp, dkp_w, "paged dk");
    expect_close(dvp, dvp_w, "paged dv");
  }
}

// A NaN or Inf in q, k, v or dout: bf16 pairs asked for take the widened products (the NaN rule is
// theirs), bit for bit, and BackwardInfo says so.
TEST(Storage16Backward, PairProductsWidenNonFiniteInputs) {
  const Shape s{1, 40, 50, 2, 1, 32};
  for (int which = 0; which < 4; ++which)
    for (const bool inf : {false, true}) {
      SCOPED_TRACE("input " + std::to_string(which) + (inf ? " Inf" : " NaN"));
      Problem16<bf16> p(s, fresh_seed());
      const auto space = TestSpace();
      attention(space, p.q, kv::dense(p.k, p.v), p.o, p.lse);
      View4<bf16> dout("dout", s.B, s.Nq, s.Hq, s.D);
      View4<double> dout_d("dout_d", s.B, s.Nq, s.Hq, s.D);
      fill_rounded(dout, dout_d, fresh_seed());
      Kokkos::fence();
      Options pairs, widened;
      pairs.cpu_products = CpuProducts::bf16_dot;
      widened.cpu_products = CpuProducts::widened;
      View4<bf16> dq("dq", s.B, s.Nq, s.Hq, s.D), dk("dk", s.B, s.Nk, s.Hkv, s.D), dv("dv", s.B, s.Nk, s.Hkv, s.D);
      View4<bf16> dq_w("dq", s.B, s.Nq, s.Hq, s.D), dk_w("dk", s.B, s.Nk, s.Hkv, s.D),
          dv_w("dv", s.B, s.Nk, s.Hkv, s.D);
      // Device-shaped builds tune host spaces as a GPU's: no pairs there.
      const CpuProducts finite = detail::Tuning<TestSpace, float>::host ? CpuProducts::bf16_dot : CpuProducts::widened;
      EXPECT_EQ(attention_backward(space, p.q, kv::dense(p.k, p.v), p.o, p.lse, dout, dq, dk, dv, pairs).cpu_products,
                finite);
      const View4<bf16> target = which == 0 ? p.q : which == 1 ? p.k : which == 2 ? p.v : dout;
      const bf16 bad{static_cast<std::uint16_t>(inf ? 0x7f80 : 0x7fc1)};
      Kokkos::deep_copy(Kokkos::subview(target, 0, 7, 0, 3), bad);
      EXPECT_EQ(attention_backward(space, p.q, kv::dense(p.k, p.v), p.o, p.lse, dout, dq, dk, dv, pairs).cpu_products,
                CpuProducts::widened);
      attention_backward(space, p.q, kv::dense(p.k, p.v), p.o, p.lse, dout, dq_w, dk_w, dv_w, widened);
      Kokkos::fence();
      for (const auto& [got, want, what] : {std::make_tuple(dq, dq_w, "dq"), std::make_tuple(dk, dk_w, "dk"),
                                            std::make_tuple(dv, dv_w, "dv")}) {
        const std::vector<double> a = to_host(got), b = to_host(want);
        for (std::size_t n = 0; n < a.size(); ++n)
          ASSERT_TRUE(a[n] == b[n] || (std::isnan(a[n]) && std::isnan(b[n]))) << what << " " << n;
      }
    }
}

// The float copies are checked against the memory space before they are made.
TEST(Storage16Backward, RefusesFloatCopiesThatDoNotFit) {
  const Shape s{1, 64, 64, 2, 1, 32};
  Problem16<bf16> p(s, fresh_seed());
  View4<bf16> dout("dout", 1, 64, 2, 32), dq("dq", 1, 64, 2, 32), dk("dk", 1, 64, 1, 32), dv("dv", 1, 64, 1, 32);
  attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse);
  Kokkos::fence();
  setenv("KATTN_MEMORY_LIMIT", "10000", 1);
  try {
    attention_backward(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, dout, dq, dk, dv);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("float copies of the 16-bit arrays"), std::string::npos) << e.what();
  }
  unsetenv("KATTN_MEMORY_LIMIT");
}

}  // namespace
}  // namespace test
}  // namespace kattn
