// 16-bit storage in kattn::merge and cascade attention, under FlashAttention's accuracy rule
// (storage16_support.hpp) against the float64 attention over the union of the keys: partial states
// from bf16 / fp16 inputs merged in float, stored in 16 bits or in float (then o is rounded once,
// by the merge, checked element by element); cascades over 16-bit prefixes and suffixes, ragged
// and paged, with GQA, masks, ALiBi and a bias, requests without queries or keys, and float
// queries over a 16-bit cascade.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/core/alibi.hpp"
#include "kattn/merge.hpp"
#include "kattn/score_bias.hpp"
#include "ragged16_support.hpp"
#include "storage16_support.hpp"
#include "variant_support.hpp"

namespace kattn {
namespace test {
namespace {

// The rows of a ragged problem in storage S, and their float copy (exact: every S value is a float).
template <class S>
struct Queries16 {
  View3<S> q;
  View3<float> q_float;
  explicit Queries16(const RaggedProblem<double>& p)
      : q(rounded_copy<S>(p.q)), q_float("q_float", p.q.extent(0), p.Hq, p.D) {
    convert_into(q, q_float);
  }
};

// o rounded once from float: every element lies between the roundings to S of the float64 result
// minus and plus `delta` (float's error), so a second rounding (a 16-bit running o, or 16-bit
// partials) shows as elements up to an ulp off. The accuracy rule alone cannot tell the two apart.
template <class S>
void expect_rounded_once(const std::vector<double>& o, const std::vector<double>& ref, const std::string& what,
                         double delta = 1e-5) {
  std::size_t off = 0;
  for (std::size_t n = 0; n < ref.size(); ++n) {
    const double lo = widen(narrow<S>(ref[n] - delta)), hi = widen(narrow<S>(ref[n] + delta));
    if (!(o[n] >= lo && o[n] <= hi) && off++ < 3)
      ADD_FAILURE() << what << ": o[" << n << "] = " << o[n] << " is not the float64 value " << ref[n]
                    << " rounded once to " << storage_name<S>();
  }
  EXPECT_EQ(off, 0u) << what << ": elements not rounded once";
}

// Attention of every row over keys [k0, k1) of each sequence: o in P (S from S queries; float from
// float queries over the S keys, unrounded), lse float.
template <class S, class P>
void attend_keys(const RaggedProblem<double>& p, const Queries16<S>& rows, std::int64_t k0, std::int64_t k1,
                 const View3<P>& o, const View2<float>& lse) {
  const KeySlice<S> keys(p, k0, k1);
  const auto layout = make_ragged_layout<TestMemory>(host_index(p.q_indptr()), host_index(keys.kv_indptr));
  if constexpr (std::is_same<P, S>::value)
    attention(TestSpace(), rows.q, kv::ragged(keys.k, keys.v, layout), o, lse);
  else
    attention(TestSpace(), rows.q_float, kv::ragged(keys.k, keys.v, layout), o, lse);
}

// A merge of parts already rounded to S carries each part's rounding on top of what the rule
// allows the one-pass attention: half a unit in the last place of S at the largest |o| of the
// reference (2^-11 relative for fp16, 2^-8 for bf16).
template <class S>
double parts_rounding(const RaggedProblem<double>& exact) {
  std::vector<double> o_ref, lse_ref;
  ragged_reference(exact, Options{}, o_ref, lse_ref);
  double largest = 0;
  for (double x : o_ref)
    if (std::isfinite(x)) largest = std::max(largest, std::abs(x));
  return largest * std::ldexp(1.0, std::is_same<S, fp16>::value ? -11 : -8);
}

// Two parts cut at key `cut` of every sequence, merged into a 16-bit o (and in place into part a
// when the parts are 16-bit): the rule over the whole keys.
template <class S, class P>
void check_two_parts(const std::vector<std::int64_t>& q_lens, const std::vector<std::int64_t>& kv_lens, int Hq, int Hkv,
                     int D, std::int64_t cut) {
  const std::uint64_t seed = fresh_seed();
  RaggedProblem<double> exact(q_lens, kv_lens, Hq, Hkv, D, seed);
  const Queries16<S> rows(exact);
  (void)rounded_copy<S>(exact.k), (void)rounded_copy<S>(exact.v);
  const std::string what = std::string(storage_name<S>()) + " parts in " + storage_name<P>() + " " + exact.what() +
                           " cut=" + std::to_string(cut) + " seed=" + std::to_string(seed);
  SCOPED_TRACE(what);
  const std::int64_t N = exact.q.extent(0);
  View3<P> oa("oa", N, Hq, D), ob("ob", N, Hq, D);
  View2<float> la("la", N, Hq), lb("lb", N, Hq), lse("lse", N, Hq);
  View3<S> o("o", N, Hq, D);
  attend_keys(exact, rows, 0, cut, oa, la);
  attend_keys(exact, rows, cut, std::numeric_limits<std::int64_t>::max(), ob, lb);
  poison(o);
  poison(lse);
  merge(TestSpace(), oa, la, ob, lb, o, lse);
  Kokkos::fence();
  const RaggedHost host(exact);
  const double allowance = std::is_same<P, S>::value ? parts_rounding<S>(exact) : 0.0;
  expect_16bit_rule<S>(host.params(), Options{}, to_host(o), to_host(lse), "merge " + what, allowance);
  if constexpr (std::is_same<P, float>::value) {
    std::vector<double> o_ref, lse_ref;
    ragged_reference(exact, Options{}, o_ref, lse_ref);
    expect_rounded_once<S>(to_host(o), o_ref, "merge " + what);
  }
  if constexpr (std::is_same<P, S>::value) {
    merge(TestSpace(), oa, la, ob, lb, oa, la);
    Kokkos::fence();
    expect_16bit_rule<S>(host.params(), Options{}, to_host(oa), to_host(la), "merge in place " + what, allowance);
  }
}

template <class S, class P>
void check_two_parts_everywhere() {
  // GQA 4:1, a sequence whose keys all fall in part a, one without keys (o = 0, lse = -inf), one
  // without queries.
  check_two_parts<S, P>({1, 3, 2, 1, 0}, {100, 40, 7, 0, 5}, 8, 2, 32, 30);
  check_two_parts<S, P>({1}, {1}, 1, 1, 1, 0);  // one token, one key: part a empty
  check_two_parts<S, P>({1}, {1}, 1, 1, 1, 1);  // ... part b empty
  check_two_parts<S, P>({1, 1}, {1000, 257}, 16, 2, 128, 500);
  check_two_parts<S, P>({5, 1}, {64, 3}, 2, 1, 256, 1);
}

TEST(Storage16Merge, Bf16PartsMergedIntoBf16) { check_two_parts_everywhere<bf16, bf16>(); }
TEST(Storage16Merge, Fp16PartsMergedIntoFp16) { check_two_parts_everywhere<fp16, fp16>(); }
TEST(Storage16Merge, FloatPartsRoundedOnceIntoBf16) { check_two_parts_everywhere<bf16, float>(); }
TEST(Storage16Merge, FloatPartsRoundedOnceIntoFp16) { check_two_parts_everywhere<fp16, float>(); }

// Many parts in order (o_parts [S, N, H, D]) cut at `cuts`: empty parts, and more parts than keys.
template <class S, class P>
void check_many_parts(const std::vector<std::int64_t>& q_lens, const std::vector<std::int64_t>& kv_lens, int Hq,
                      int Hkv, int D, const std::vector<std::int64_t>& cuts) {
  const std::uint64_t seed = fresh_seed();
  RaggedProblem<double> exact(q_lens, kv_lens, Hq, Hkv, D, seed);
  const Queries16<S> rows(exact);
  (void)rounded_copy<S>(exact.k), (void)rounded_copy<S>(exact.v);
  const std::string what = std::string(storage_name<S>()) + " parts in " + storage_name<P>() + " " + exact.what() +
                           " cuts=" + describe(cuts) + " seed=" + std::to_string(seed);
  SCOPED_TRACE(what);
  const std::int64_t N = exact.q.extent(0);
  const int parts = static_cast<int>(cuts.size()) - 1;
  View4<P> o_parts("o_parts", parts, N, Hq, D);
  View3<float> lse_parts("lse_parts", parts, N, Hq);
  for (int s = 0; s < parts; ++s)
    attend_keys(exact, rows, cuts[s], cuts[s + 1],
                View3<P>(Kokkos::subview(o_parts, s, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL)),
                View2<float>(Kokkos::subview(lse_parts, s, Kokkos::ALL, Kokkos::ALL)));
  View3<S> o("o", N, Hq, D);
  View2<float> lse("lse", N, Hq);
  poison(o);
  poison(lse);
  merge(TestSpace(), o_parts, lse_parts, o, lse);
  Kokkos::fence();
  const double allowance = std::is_same<P, S>::value ? parts_rounding<S>(exact) : 0.0;
  expect_16bit_rule<S>(RaggedHost(exact).params(), Options{}, to_host(o), to_host(lse), "merge " + what, allowance);
  if constexpr (std::is_same<P, float>::value) {
    std::vector<double> o_ref, lse_ref;
    ragged_reference(exact, Options{}, o_ref, lse_ref);
    expect_rounded_once<S>(to_host(o), o_ref, "merge " + what);
  }
}

TEST(Storage16Merge, ManyPartsInOrderEmptyPartsAndMorePartsThanKeys) {
  const std::vector<std::int64_t> cuts = {0, 10, 10, 45, 80, 1000};  // the second part is empty
  check_many_parts<bf16, bf16>({1, 2, 0}, {90, 61, 4}, 4, 4, 16, cuts);
  check_many_parts<fp16, float>({1, 2, 0}, {90, 61, 4}, 4, 4, 16, cuts);
  const std::vector<std::int64_t> singles = {0, 1, 2, 3, 4, 5, 6, 7};  // parts of one key, and empty ones
  check_many_parts<fp16, fp16>({1, 1}, {3, 5}, 8, 1, 64, singles);
  check_many_parts<bf16, float>({1, 1}, {3, 5}, 8, 1, 64, singles);
}

TEST(Storage16Merge, NoPartsGiveZeroAndMinusInfinity) {
  View4<bf16> none("none", 0, 3, 2, 4);
  View3<float> none_lse("none_lse", 0, 3, 2);
  View3<bf16> o("o", 3, 2, 4);
  View2<float> lse("lse", 3, 2);
  poison(o);
  poison(lse);
  merge(TestSpace(), none, none_lse, o, lse);
  Kokkos::fence();
  for (double x : to_host(o)) EXPECT_EQ(x, 0.0);
  for (double x : to_host(lse)) EXPECT_EQ(x, -std::numeric_limits<double>::infinity());
}

// A cascade in storage S (Q: the queries' and output's type, S or float over an S cache) against
// flat attention over prefix + suffix.
template <class S, class Q = S>
void check_cascade16(const std::vector<std::int64_t>& q_lens, const std::vector<std::int64_t>& suffix_lens,
                     std::int64_t prefix, int Hq, int Hkv, int D, const Options& opt, int page, bool want_lse = true) {
  const std::uint64_t seed = fresh_seed();
  RaggedProblem<double> suffix(q_lens, suffix_lens, Hq, Hkv, D, seed);
  const std::string what = std::string("q ") + storage_name<Q>() + " kv " + storage_name<S>() + " " + suffix.what() +
                           " prefix=" + std::to_string(prefix) + " page=" + std::to_string(page) + " " +
                           describe(Shape{}, opt) + (want_lse ? "" : " no lse") + " seed=" + std::to_string(seed);
  SCOPED_TRACE(what);
  View3<double> kpd("k_prefix", prefix, Hkv, D), vpd("v_prefix", prefix, Hkv, D);
  fill_normal(kpd, seed + 5);
  fill_normal(vpd, seed + 6);
  const View3<S> kp = rounded_copy<S>(kpd), vp = rounded_copy<S>(vpd);
  const View3<S> k = rounded_copy<S>(suffix.k), v = rounded_copy<S>(suffix.v);
  const View3<Q> q = rounded_copy<Q>(rounded_copy<S>(suffix.q));  // S's values, held in Q
  const std::int64_t N = suffix.q.extent(0);
  View3<Q> o("o", N, Hq, D);
  View2<float> lse;
  if (want_lse) lse = View2<float>("lse", N, Hq);
  poison(o);
  poison(lse);
  if (page == 0) {
    const auto layout = make_ragged_layout<TestMemory>(host_index(suffix.q_indptr()), host_index(suffix.kv_indptr()));
    attention(TestSpace(), q, kv::cascade(kp, vp, kv::ragged(k, v, layout)), o, lse, opt);
  } else {
    const PagedCopy<double> cache(suffix, page, seed + 3);
    View4<S> kpg("k_pages", cache.k.extent(0), page, Hkv, D), vpg("v_pages", cache.v.extent(0), page, Hkv, D);
    convert_into(cache.k, kpg);
    convert_into(cache.v, vpg);
    const auto layout =
        make_paged_layout<TestMemory>(host_index(suffix.q_indptr()), host_index(cache.page_indptr),
                                      host_index(cache.page_indices), host_index(cache.last_page_len), page);
    attention(TestSpace(), q, kv::cascade(kp, vp, kv::paged(kpg, vpg, layout)), o, lse, opt);
  }
  Kokkos::fence();
  const RaggedProblem<double> flat = with_prefix(suffix, kpd, vpd);
  const RaggedHost host(flat);
  const std::vector<double> lse_out = want_lse ? to_host(lse) : std::vector<double>{};
  if constexpr (std::is_same<Q, S>::value) {
    expect_16bit_rule<S>(host.params(), opt, to_host(o), lse_out, "cascade " + what);
    std::vector<double> o_ref, lse_ref;
    ragged_reference(flat, opt, o_ref, lse_ref);
    expect_rounded_once<S>(to_host(o), o_ref, "cascade " + what);
  } else {  // float queries: an exact float computation on the cache's values, float's bound
    std::vector<double> o_ref, lse_ref;
    ragged_reference(flat, opt, o_ref, lse_ref);
    if (want_lse) expect_outputs_close(o, lse, o_ref, lse_ref, "cascade " + what);
  }
}

template <class S>
void check_cascades() {
  const std::vector<std::int64_t> q_lens = {1, 1, 4, 1, 0, 2};
  const std::vector<std::int64_t> suffix_lens = {5, 0, 9, 300, 3, 2};
  for (int page : {0, 1, 16})
    for (bool causal : {false, true})
      for (std::int64_t prefix : {0, 1, 517}) {
        Options o;
        o.causal = causal;
        check_cascade16<S>(q_lens, suffix_lens, prefix, 8, 2, 32, o, page);
      }
  Options o;
  o.softcap = 5.0;
  o.scale = 0.11;
  check_cascade16<S>({1, 1, 1, 1}, {10, 20, 0, 1}, 2000, 16, 2, 128, o, 0);  // GQA 8:1
  check_cascade16<S>({1}, {0}, 1, 1, 1, 1, Options{}, 0);                    // one token, one key
  check_cascade16<S>({1, 2}, {3, 4}, 50, 2, 1, 8, Options{}, 0, /*want_lse=*/false);
  o.splits = 7;  // the suffix pass split (the prefix pass plans its own)
  check_cascade16<S>({1, 3}, {1000, 4}, 100, 4, 4, 64, o, 16);
}

TEST(Storage16Cascade, Bf16EqualsFlatAttentionOverPrefixAndSuffix) { check_cascades<bf16>(); }
TEST(Storage16Cascade, Fp16EqualsFlatAttentionOverPrefixAndSuffix) { check_cascades<fp16>(); }

TEST(Storage16Cascade, FloatQueriesOver16BitCascades) {
  Options causal;
  causal.causal = true;
  check_cascade16<bf16, float>({1, 1, 4, 1, 0, 2}, {5, 0, 9, 300, 3, 2}, 517, 8, 2, 32, causal, 0);
  check_cascade16<fp16, float>({1, 3}, {100, 7}, 3000, 8, 8, 128, Options{}, 16);
}

// ALiBi and a bias (float and bf16 elements, [B, Hq, max Nq, Np + max suffix] and broadcast) in
// 16-bit cascades: the rule, o rounded once; float queries over a 16-bit cascade.
TEST(Storage16Cascade, AlibiAndBiasMeetTheRule) {
  const std::vector<std::int64_t> q_lens = {1, 3, 0, 2}, suffix_lens = {40, 3, 5, 1};
  const std::int64_t prefix = 100;
  const View4<float> per_request = random_bias<float>(4, 8, 3, prefix + 40, fresh_seed());
  const View4<bf16> shared = random_bias<bf16>(1, 1, 3, prefix + 40, fresh_seed());
  for (int page : {0, 16})
    for (bool causal : {false, true}) {
      Options o;
      o.causal = causal;
      o.alibi_slopes = alibi_standard_slopes(8);
      o.bias = causal ? score_bias(per_request) : score_bias(shared);
      check_cascade16<bf16>(q_lens, suffix_lens, prefix, 8, 2, 32, o, page);
      check_cascade16<fp16>(q_lens, suffix_lens, prefix, 8, 2, 32, o, page);
      check_cascade16<bf16, float>(q_lens, suffix_lens, prefix, 8, 2, 32, o, page);
    }
}

}  // namespace
}  // namespace test
}  // namespace kattn
