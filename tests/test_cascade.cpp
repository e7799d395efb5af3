// The public merge and cascade attention: partial results over disjoint key sets merged into the
// attention over their union, and a shared prefix attended once for many requests equal to flat
// attention over prefix + suffix, ragged and paged, with and without a causal mask, with every
// score variant (sinks, ALiBi, a bias tensor) as that flat attention has it.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/core/request_rows.hpp"
#include "kattn/merge.hpp"
#include "kattn/score_bias.hpp"
#include "ragged_support.hpp"
#include "variant_support.hpp"

namespace kattn {
namespace test {
namespace {

// Attention of the rows of p over keys [k0, k1) of every sequence, as a ragged problem of its own.
template <class T>
void attend_keys(const RaggedProblem<T>& p, std::int64_t k0, std::int64_t k1, const View3<T>& o, const View2<T>& lse) {
  std::vector<std::int64_t> part_lens(p.kv_lens.size());
  for (std::size_t b = 0; b < part_lens.size(); ++b)
    part_lens[b] = std::max<std::int64_t>(0, std::min(k1, p.kv_lens[b]) - std::min(k0, p.kv_lens[b]));
  const std::int64_t total = RaggedProblem<T>::total(part_lens);
  View3<T> k("k_part", total, p.Hkv, p.D), v("v_part", total, p.Hkv, p.D);
  auto hk = Kokkos::create_mirror_view(k), hv = Kokkos::create_mirror_view(v);
  const auto pk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.k);
  const auto pv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.v);
  std::int64_t src = 0, dst = 0;
  for (std::size_t b = 0; b < part_lens.size(); ++b) {
    for (std::int64_t j = 0; j < part_lens[b]; ++j)
      for (int h = 0; h < p.Hkv; ++h)
        for (int d = 0; d < p.D; ++d) hk(dst + j, h, d) = pk(src + k0 + j, h, d), hv(dst + j, h, d) = pv(src + k0 + j, h, d);
    src += p.kv_lens[b];
    dst += part_lens[b];
  }
  Kokkos::deep_copy(k, hk);
  Kokkos::deep_copy(v, hv);
  const auto layout = make_ragged_layout<TestMemory>(host_index(p.q_indptr()), host_index(indptr_of(part_lens)));
  attention(TestSpace(), p.q, kv::ragged(k, v, layout), o, lse);
}

TEST(Merge, TwoHalvesOfTheKeysGiveTheWhole) {
  RaggedProblem<double> p({1, 3, 2, 1}, {100, 40, 7, 0}, 8, 2, 32, fresh_seed());
  const std::int64_t tq = RaggedProblem<double>::total(p.q_lens);
  View3<double> oa("oa", tq, 8, 32), ob("ob", tq, 8, 32);
  View2<double> la("la", tq, 8), lb("lb", tq, 8);
  attend_keys(p, 0, 30, oa, la);     // the last two sequences' first part holds all or none of their keys
  attend_keys(p, 30, 1000, ob, lb);  // ... and their second part none: lse = -inf, no weight
  merge(TestSpace(), oa, la, ob, lb, p.o, p.lse);
  Kokkos::fence();
  std::vector<double> o_ref, lse_ref;
  ragged_reference(p, Options{}, o_ref, lse_ref);
  expect_outputs_close(p.o, p.lse, o_ref, lse_ref, "merge of two halves");
  // In place into the first part.
  merge(TestSpace(), oa, la, ob, lb, oa, la);
  Kokkos::fence();
  expect_outputs_close(oa, la, o_ref, lse_ref, "merge in place");
}

TEST(Merge, ManyPartsInOrderAndEmptyParts) {
  RaggedProblem<double> p({1, 2}, {90, 61}, 4, 4, 16, fresh_seed());
  const std::int64_t tq = 3;
  const std::vector<std::int64_t> cuts = {0, 10, 10, 45, 80, 1000};  // the second part is empty
  const int S = static_cast<int>(cuts.size()) - 1;
  View4<double> o_parts("o_parts", S, tq, 4, 16);
  View3<double> lse_parts("lse_parts", S, tq, 4);
  for (int s = 0; s < S; ++s)
    attend_keys(p, cuts[s], cuts[s + 1],
                View3<double>(Kokkos::subview(o_parts, s, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL)),
                View2<double>(Kokkos::subview(lse_parts, s, Kokkos::ALL, Kokkos::ALL)));
  merge(TestSpace(), o_parts, lse_parts, p.o, p.lse);
  Kokkos::fence();
  std::vector<double> o_ref, lse_ref;
  ragged_reference(p, Options{}, o_ref, lse_ref);
  expect_outputs_close(p.o, p.lse, o_ref, lse_ref, "merge of many parts");
}

TEST(Merge, NoPartsOrOnlyEmptyPartsGiveZeroAndMinusInfinity) {
  View4<double> o_parts("o_parts", 2, 3, 2, 4);
  View3<double> lse_parts("lse_parts", 2, 3, 2);
  fill_normal(o_parts, fresh_seed());
  Kokkos::deep_copy(lse_parts, -std::numeric_limits<double>::infinity());
  View3<double> o("o", 3, 2, 4);
  View2<double> lse("lse", 3, 2);
  poison(o);
  poison(lse);
  merge(TestSpace(), o_parts, lse_parts, o, lse);
  Kokkos::fence();
  for (double x : to_host(o)) EXPECT_EQ(x, 0.0);
  for (double x : to_host(lse)) EXPECT_EQ(x, -std::numeric_limits<double>::infinity());
  View4<double> none("none", 0, 3, 2, 4);
  View3<double> none_lse("none_lse", 0, 3, 2);
  poison(o);
  merge(TestSpace(), none, none_lse, o, lse);
  Kokkos::fence();
  for (double x : to_host(o)) EXPECT_EQ(x, 0.0);
}

// Cascade against flat attention: each request's keys are the shared prefix followed by its suffix.
template <class T>
void check_cascade(const std::vector<std::int64_t>& q_lens, const std::vector<std::int64_t>& suffix_lens,
                   std::int64_t prefix, int Hq, int Hkv, int D, const Options& opt, int page) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("q_lens=" + describe(q_lens) + " suffix=" + describe(suffix_lens) + " prefix=" +
               std::to_string(prefix) + " page=" + std::to_string(page) + " causal=" + std::to_string(opt.causal) +
               " seed=" + std::to_string(seed));
  RaggedProblem<T> suffix(q_lens, suffix_lens, Hq, Hkv, D, seed);
  View3<T> kp("k_prefix", prefix, Hkv, D), vp("v_prefix", prefix, Hkv, D);
  fill_normal(kp, seed + 5);
  fill_normal(vp, seed + 6);
  // The flat problem: prefix + suffix per request, the same queries.
  std::vector<std::int64_t> flat_lens(q_lens.size());
  for (std::size_t b = 0; b < q_lens.size(); ++b) flat_lens[b] = prefix + suffix_lens[b];
  RaggedProblem<T> flat(q_lens, flat_lens, Hq, Hkv, D, seed + 9);
  Kokkos::deep_copy(flat.q, suffix.q);
  {
    auto fk = Kokkos::create_mirror_view(flat.k), fv = Kokkos::create_mirror_view(flat.v);
    const auto sk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), suffix.k);
    const auto sv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), suffix.v);
    const auto pk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), kp);
    const auto pv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), vp);
    std::int64_t f = 0, s = 0;
    for (std::size_t b = 0; b < q_lens.size(); ++b) {
      for (std::int64_t j = 0; j < flat_lens[b]; ++j)
        for (int h = 0; h < Hkv; ++h)
          for (int d = 0; d < D; ++d) {
            fk(f + j, h, d) = j < prefix ? pk(j, h, d) : sk(s + j - prefix, h, d);
            fv(f + j, h, d) = j < prefix ? pv(j, h, d) : sv(s + j - prefix, h, d);
          }
      f += flat_lens[b];
      s += suffix_lens[b];
    }
    Kokkos::deep_copy(flat.k, fk);
    Kokkos::deep_copy(flat.v, fv);
  }
  if (page == 0) {
    const auto layout = make_ragged_layout<TestMemory>(host_index(suffix.q_indptr()), host_index(suffix.kv_indptr()));
    attention(TestSpace(), suffix.q, kv::cascade(kp, vp, kv::ragged(suffix.k, suffix.v, layout)), suffix.o,
              suffix.lse, opt);
  } else {
    const PagedCopy<T> cache(suffix, page, seed + 3);
    const auto layout =
        make_paged_layout<TestMemory>(host_index(suffix.q_indptr()), host_index(cache.page_indptr),
                                      host_index(cache.page_indices), host_index(cache.last_page_len), page);
    attention(TestSpace(), suffix.q, kv::cascade(kp, vp, kv::paged(cache.k, cache.v, layout)), suffix.o,
              suffix.lse, opt);
  }
  Kokkos::fence();
  std::vector<double> o_ref, lse_ref;
  ragged_reference(flat, opt, o_ref, lse_ref);
  expect_outputs_close(suffix.o, suffix.lse, o_ref, lse_ref, "cascade");
}

// With ALiBi, each query measures its distance to the prefix's keys and its suffix's as flat
// attention over its own prefix + suffix does (the prefix pass places it in its request).
TEST(Cascade, EqualsFlatAttentionOverPrefixAndSuffix) {
  const std::vector<std::int64_t> q_lens = {1, 1, 4, 1, 0, 2};
  const std::vector<std::int64_t> suffix_lens = {5, 0, 9, 300, 3, 2};
  for (int page : {0, 1, 16})
    for (bool causal : {false, true})
      for (std::int64_t prefix : {0, 1, 517})
        for (bool alibi : {false, true}) {
          Options o;
          o.causal = causal;
          if (alibi) o.alibi_slopes = {0.5, 0.0, 0.25, 1.0, 0.125, 2.0, 0.03125, 0.75};
          check_cascade<double>(q_lens, suffix_lens, prefix, 8, 2, 32, o, page);
        }
}

TEST(Cascade, SoftcapScaleGqaAndFloat) {
  Options o;
  o.softcap = 5.0;
  o.scale = 0.11;
  check_cascade<double>({1, 1, 1, 1}, {10, 20, 0, 1}, 2000, 16, 2, 64, o, 0);
  check_cascade<float>({1, 1, 3}, {100, 7, 40}, 3000, 8, 8, 128, Options{}, 16);
}

// The sinks merge once into the cascade's merged rows: the flat attention with the same sinks.
TEST(Cascade, SinksEqualFlatAttentionWithSinks) {
  for (int page : {0, 16})
    for (bool causal : {false, true}) {
      Options o;
      o.causal = causal;
      o.sinks = {0.5, -std::numeric_limits<double>::infinity(), 3.0, -1.0};
      check_cascade<double>({1, 3, 0, 2}, {7, 2, 4, 40}, 129, 4, 2, 16, o, page);
    }
}

// The bias of a cascade of these requests after a prefix of `prefix` keys: random [batch, heads,
// the longest request's queries, prefix + the longest suffix] of element type B, as flat attention
// over prefix + suffix pads it.
template <class B>
View4<B> cascade_bias(int batch, int heads, const std::vector<std::int64_t>& q_lens,
                      const std::vector<std::int64_t>& suffix_lens, std::int64_t prefix, std::uint64_t seed) {
  const std::int64_t nq = *std::max_element(q_lens.begin(), q_lens.end());
  const std::int64_t nk = prefix + *std::max_element(suffix_lens.begin(), suffix_lens.end());
  return random_bias<B>(batch, heads, static_cast<int>(nq), static_cast<int>(nk), seed);
}

// Row i of the prefix pass is query i - indptr[r] of request r, requests without queries skipped.
TEST(Cascade, RequestRowsPlaceEachRowInItsRequest) {
  const std::vector<std::int64_t> indptr = {0, 0, 3, 3, 4, 6, 6}, keys = {10, 11, 12, 13, 14, 15};
  const RequestRows rows{indptr.data(), keys.data(), 6, 3};
  const std::vector<std::vector<std::int64_t>> want = {{1, 0, 3, 11}, {1, 1, 3, 11}, {1, 2, 3, 11},
                                                       {3, 0, 1, 13}, {4, 0, 2, 14}, {4, 1, 2, 14}};
  for (std::int64_t i = 0; i < 6; ++i) {
    const QueryAt at = rows.at(i);
    EXPECT_EQ((std::vector<std::int64_t>{at.seq, at.position, at.q_len, at.kv_len}), want[i]) << "row " << i;
  }
  const std::vector<std::int64_t> one = {0, 5}, one_keys = {7};
  const QueryAt last = RequestRows{one.data(), one_keys.data(), 1, 5}.at(4);
  EXPECT_EQ(last.seq, 0);
  EXPECT_EQ(last.position, 4);
}

// A bias [B or 1, Hq or 1, max Nq, Np + max suffix]: request b's rows read bias[b, :, :Nq_b,
// :Np + Nk_b], the prefix's keys first, as flat attention over prefix + suffix reads its corner.
TEST(Cascade, BiasEqualsFlatAttentionWithTheBias) {
  const std::vector<std::int64_t> q_lens = {2, 1, 5, 0, 3};
  const std::vector<std::int64_t> suffix_lens = {1, 0, 40, 3, 2};
  const std::int64_t prefix = 37;
  for (int page : {0, 16})
    for (bool causal : {false, true})
      for (const auto& [bb, hb] : {std::pair{5, 4}, {1, 1}, {5, 1}, {1, 4}}) {
        const std::uint64_t seed = fresh_seed();
        Options o;
        o.causal = causal;
        const View4<double> bias = cascade_bias<double>(bb, hb, q_lens, suffix_lens, prefix, seed);
        o.bias = score_bias(bias);
        SCOPED_TRACE("bias [" + std::to_string(bb) + ", " + std::to_string(hb) + "]");
        check_cascade<double>(q_lens, suffix_lens, prefix, 4, 2, 16, o, page);
      }
  // Every element type.
  Options o;
  o.causal = true;
  const View4<float> f = cascade_bias<float>(5, 4, q_lens, suffix_lens, prefix, fresh_seed());
  const View4<bool> mask = cascade_bias<bool>(1, 4, q_lens, suffix_lens, prefix, fresh_seed());
  const View4<bf16> b16 = cascade_bias<bf16>(5, 1, q_lens, suffix_lens, prefix, fresh_seed());
  const View4<fp16> h16 = cascade_bias<fp16>(1, 1, q_lens, suffix_lens, prefix, fresh_seed());
  for (const ScoreBias& b : {score_bias(f), score_bias(mask), score_bias(b16), score_bias(h16)}) {
    o.bias = b;
    check_cascade<double>(q_lens, suffix_lens, prefix, 4, 2, 16, o, 0);
  }
}

// Every variant at once, on the edge shapes: an empty suffix, a one-key suffix, suffixes longer
// than the prefix, an empty prefix, lengths no tile divides (tiles of 16), GQA, softcap and scale,
// a split suffix pass; float storage.
TEST(Cascade, VariantsTogetherOnEdgeShapes) {
  struct Case {
    std::vector<std::int64_t> q_lens, suffix_lens;
    std::int64_t prefix;
  };
  const std::vector<Case> cases = {{{1, 2, 0, 5}, {0, 1, 7, 300}, 37},
                                   {{1}, {0}, 1},
                                   {{17, 2}, {40, 1}, 5},
                                   {{3, 1}, {20, 2}, 0}};
  for (const Case& c : cases)
    for (int variant = 0; variant < 4; ++variant) {
      const std::uint64_t seed = fresh_seed();
      Options o;
      o.causal = variant % 2 == 1;
      if (variant >= 2) o.softcap = 4.0, o.scale = 0.2;
      o.block_q = o.block_k = 16;
      o.splits = variant == 3 ? 3 : 0;  // the suffix pass (the prefix pass plans its own)
      o.alibi_slopes = {0.25, 0.5, 1.0, 0.0, 0.125, 0.0625};
      o.sinks = {0.5, -std::numeric_limits<double>::infinity(), 2.0, -1.0, 0.0, 1.0};
      const View4<double> bias = cascade_bias<double>(variant % 2 ? 1 : int(c.q_lens.size()), variant < 2 ? 6 : 1,
                                                      c.q_lens, c.suffix_lens, c.prefix, seed);
      o.bias = score_bias(bias);
      for (int page : {0, 4}) check_cascade<double>(c.q_lens, c.suffix_lens, c.prefix, 6, 2, 8, o, page);
      const View4<float> fbias = cascade_bias<float>(1, 6, c.q_lens, c.suffix_lens, c.prefix, seed + 1);
      o.bias = score_bias(fbias);
      check_cascade<float>(c.q_lens, c.suffix_lens, c.prefix, 6, 3, 32, o, 0);
    }
}

// Refusals name the argument: a bias of the wrong shape (the prefix's keys alone, or a suffix
// length too few), slopes that are not one per head; windows stay refused.
TEST(Cascade, RefusesBadVariantsByName) {
  RaggedProblem<double> p({1, 3}, {3, 4}, 4, 2, 8, fresh_seed());
  View3<double> kp("kp", 50, 2, 8), vp("vp", 50, 2, 8);
  const auto layout = make_ragged_layout<TestMemory>(host_index(p.q_indptr()), host_index(p.kv_indptr()));
  const auto refused = [&](const Options& opt, const std::string& message) {
    try {
      attention(TestSpace(), p.q, kv::cascade(kp, vp, kv::ragged(p.k, p.v, layout)), p.o, p.lse, opt);
      ADD_FAILURE() << "accepted: " << message;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  };
  const std::string expected =
      "bias: expected [2 or 1, 4 or 1, 3, 54] (the longest request's queries; the prefix's keys, then the longest "
      "suffix's), got ";
  Options o;
  const View4<double> prefix_only("bias", 2, 1, 3, 50), short_one("bias", 1, 4, 3, 53), heads("bias", 2, 2, 3, 54);
  for (const auto& [bias, got] : {std::pair{prefix_only, "[2, 1, 3, 50]"}, {short_one, "[1, 4, 3, 53]"},
                                  {heads, "[2, 2, 3, 54]"}}) {
    o.bias = score_bias(bias);
    refused(o, expected + got);
  }
  o.bias = ScoreBias{};
  o.alibi_slopes = {0.5, 0.25, 1.0};
  refused(o, "alibi_slopes: expected one slope per query head (4), got 3");
  o.alibi_slopes.assign(4, 0.5);
  o.window_left = 4;
  refused(o, "window: cascade attention takes no sliding window");
}

TEST(Cascade, WithoutLse) {
  RaggedProblem<double> p({1, 2}, {3, 4}, 2, 1, 8, fresh_seed());
  View3<double> kp("kp", 50, 1, 8), vp("vp", 50, 1, 8);
  fill_normal(kp, 1);
  fill_normal(vp, 2);
  const auto layout = make_ragged_layout<TestMemory>(host_index(p.q_indptr()), host_index(p.kv_indptr()));
  EXPECT_NO_THROW(attention(TestSpace(), p.q, kv::cascade(kp, vp, kv::ragged(p.k, p.v, layout)), p.o,
                            View2<double>()));
  Kokkos::fence();
  for (double x : to_host(p.o)) EXPECT_TRUE(std::isfinite(x));
}

}  // namespace
}  // namespace test
}  // namespace kattn
