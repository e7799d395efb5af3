// The public merge and cascade attention: partial results over disjoint key sets merged into the
// attention over their union, and a shared prefix attended once for many requests equal to flat
// attention over prefix + suffix, ragged and paged, with and without a causal mask.
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/merge.hpp"
#include "ragged_support.hpp"

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

TEST(Cascade, EqualsFlatAttentionOverPrefixAndSuffix) {
  const std::vector<std::int64_t> q_lens = {1, 1, 4, 1, 0, 2};
  const std::vector<std::int64_t> suffix_lens = {5, 0, 9, 300, 3, 2};
  for (int page : {0, 1, 16})
    for (bool causal : {false, true})
      for (std::int64_t prefix : {0, 1, 517}) {
        Options o;
        o.causal = causal;
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
