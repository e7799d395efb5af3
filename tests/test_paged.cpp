// Paged KV caches against the float64 reference on the same keys laid out densely, sequence by
// sequence: page sizes 1, 3, 16, 256, pages in shuffled order with unused pages around them,
// pages shared between sequences, every split choice.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/errors.hpp"
#include "kattn/paged.hpp"
#include "ragged_support.hpp"

namespace kattn {
namespace test {
namespace {

template <class T>
void check_paged(const std::vector<std::int64_t>& q_lens, const std::vector<std::int64_t>& kv_lens, int Hq, int Hkv,
                 int D, int page, Options opt, int splits, bool int32 = false) {
  opt.splits = splits;
  const std::uint64_t seed = fresh_seed();
  RaggedProblem<T> p(q_lens, kv_lens, Hq, Hkv, D, seed);
  const PagedCopy<T> cache(p, page, seed + 11);
  SCOPED_TRACE(p.what() + " page=" + std::to_string(page) + " " + describe(Shape{}, opt) +
               " seed=" + std::to_string(seed));
  const auto index = [&](const std::vector<std::int64_t>& v) { return host_index(v); };
  const auto layout =
      int32 ? make_paged_layout<TestMemory>(host_index32(p.q_indptr()), host_index32(cache.page_indptr),
                                            host_index32(cache.page_indices), host_index32(cache.last_page_len), page)
            : make_paged_layout<TestMemory>(index(p.q_indptr()), index(cache.page_indptr), index(cache.page_indices),
                                            index(cache.last_page_len), page);
  attention(TestSpace(), p.q, kv::paged(cache.k, cache.v, layout), p.o, p.lse, opt);
  Kokkos::fence();
  std::vector<double> o_ref, lse_ref;
  ragged_reference(p, opt, o_ref, lse_ref);
  expect_outputs_close(p.o, p.lse, o_ref, lse_ref, "paged splitkv");
}

TEST(Paged, EqualsDenseForPageSizesOneThreeSixteen256) {
  // Decode only (row tiles: one position x 4 heads per tile) and mixed with a 12-token append
  // (transposed tiles for the whole batch).
  const std::vector<std::int64_t> kv_lens = {1, 700, 3, 50, 0, 300};
  for (const std::vector<std::int64_t>& q_lens : {std::vector<std::int64_t>{1, 1, 1, 0, 1, 1},
                                                  std::vector<std::int64_t>{1, 1, 3, 0, 1, 12}})
    for (int page : {1, 3, 16, 256})
      for (bool causal : {false, true})
        for (int splits : {0, 1, 5}) {
          Options o;
          o.causal = causal;
          check_paged<double>(q_lens, kv_lens, 8, 2, 32, page, o, splits);
        }
}

TEST(Paged, EveryVariantAndGqa) {
  std::vector<Options> v(4);
  v[1].window_left = 20, v[1].window_right = 0;
  v[2].softcap = 4.0;
  v[3].causal = true, v[3].scale = 0.3;
  for (const Options& o : v)
    for (int ratio : {1, 8}) check_paged<double>({1, 2, 1}, {129, 17, 1000}, 2 * ratio, 2, 64, 16, o, 3);
}

TEST(Paged, Int32IndicesAndFloat) {
  check_paged<double>({1, 1}, {33, 70}, 4, 4, 16, 7, Options{}, 2, /*int32=*/true);
  check_paged<float>({1, 1, 1, 1}, {4000, 1, 513, 64}, 16, 2, 128, 16, Options{}, 0);
  check_paged<float>({1, 1}, {2048, 100}, 8, 8, 128, 256, Options{}, 4);
}

TEST(Paged, SharedPagesAreReadByEverySequence) {
  // Two sequences whose first pages are the same pages of the cache (a shared prefix).
  const int page = 4, Hkv = 2, D = 16;
  RaggedProblem<double> p({1, 2}, {10, 9}, 4, Hkv, D, fresh_seed());
  PagedCopy<double> cache(p, page, fresh_seed(), 0);
  // Point sequence 1's first two pages at sequence 0's, and make its ragged keys match them.
  auto hk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.k);
  auto hv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.v);
  for (int j = 0; j < 2 * page; ++j)
    for (int h = 0; h < Hkv; ++h)
      for (int d = 0; d < D; ++d) hk(10 + j, h, d) = hk(j, h, d), hv(10 + j, h, d) = hv(j, h, d);
  Kokkos::deep_copy(p.k, hk);
  Kokkos::deep_copy(p.v, hv);
  std::vector<std::int64_t> indices = cache.page_indices;
  indices[cache.page_indptr[1]] = indices[0];
  indices[cache.page_indptr[1] + 1] = indices[1];
  const auto layout = make_paged_layout<TestMemory>(host_index(p.q_indptr()), host_index(cache.page_indptr),
                                                    host_index(indices), host_index(cache.last_page_len), page);
  attention(TestSpace(), p.q, kv::paged(cache.k, cache.v, layout), p.o, p.lse);
  Kokkos::fence();
  std::vector<double> o_ref, lse_ref;
  ragged_reference(p, Options{}, o_ref, lse_ref);
  expect_outputs_close(p.o, p.lse, o_ref, lse_ref, "shared pages");
}

// The backward over a paged cache against the ragged backward on the same keys: dq equal, each
// key's dk and dv in its page slot, slots that hold no key 0; pages in shuffled order, GQA, masks,
// empty sequences, pages of 3 and 16 keys, both deterministic dQ strategies.
TEST(Paged, BackwardEqualsTheRaggedBackwardOnTheSameKeys) {
  using H3 = Kokkos::View<double***, Kokkos::LayoutRight, Kokkos::HostSpace>;
  using H4 = Kokkos::View<double****, Kokkos::LayoutRight, Kokkos::HostSpace>;
  std::vector<Options> variants(3);
  variants[1].causal = true;
  variants[2].window_left = 5, variants[2].window_right = 2, variants[2].softcap = 3.0;
  for (const int page : {3, 16})
    for (const DqStrategy strategy : {DqStrategy::key_chunks, DqStrategy::query_pass})
    for (const Options& opt : variants) {
      BackwardOptions bopt;
      bopt.dq = strategy;
      RaggedProblem<double> p({4, 0, 33, 1}, {7, 5, 40, 0}, 8, 2, 16, fresh_seed());
      PagedCopy<double> cache(p, page, fresh_seed());
      const auto layout =
          make_paged_layout<TestMemory>(host_index(p.q_indptr()), host_index(cache.page_indptr),
                                        host_index(cache.page_indices), host_index(cache.last_page_len), page);
      const auto space = TestSpace();
      attention(space, p.q, kv::paged(cache.k, cache.v, layout), p.o, p.lse, opt);
      View3<double> dout("do", p.q.extent(0), p.Hq, p.D), dq("dq", p.q.extent(0), p.Hq, p.D);
      View3<double> dq_r("dq_r", p.q.extent(0), p.Hq, p.D), dk_r("dk_r", p.k.extent(0), p.Hkv, p.D),
          dv_r("dv_r", p.k.extent(0), p.Hkv, p.D);
      View4<double> dk("dk", cache.k.extent(0), page, p.Hkv, p.D), dv("dv", cache.k.extent(0), page, p.Hkv, p.D);
      fill_normal(dout, fresh_seed());
      Kokkos::deep_copy(dk, 7.0);  // stale values: the slots that hold no key must come back 0
      Kokkos::deep_copy(dv, 7.0);
      attention_backward(space, p.q, kv::paged(cache.k, cache.v, layout), p.o, p.lse, dout, dq, dk, dv, opt, bopt);
      const auto ragged = make_ragged_layout<TestMemory>(host_index(p.q_indptr()), host_index(p.kv_indptr()));
      attention_backward(space, p.q, kv::ragged(p.k, p.v, ragged), p.o, p.lse, dout, dq_r, dk_r, dv_r, opt, bopt);
      Kokkos::fence();
      SCOPED_TRACE("page " + std::to_string(page) + " " + name(strategy) + " " + describe(Shape{}, opt));
      const std::vector<double> a = to_host(dq), b = to_host(dq_r);
      for (std::size_t n = 0; n < a.size(); ++n) ASSERT_NEAR(a[n], b[n], 1e-12) << "dq element " << n;
      const H4 hk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dk);
      const H4 hv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dv);
      const H3 rk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dk_r);
      const H3 rv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), dv_r);
      std::vector<bool> holds_key(hk.extent(0) * page, false);
      std::int64_t row = 0;
      for (std::size_t s = 0; s < p.kv_lens.size(); ++s)
        for (std::int64_t j = 0; j < p.kv_lens[s]; ++j, ++row) {
          const std::int64_t pg = cache.page_indices[cache.page_indptr[s] + j / page], slot = j % page;
          holds_key[pg * page + slot] = true;
          for (int h = 0; h < p.Hkv; ++h)
            for (int d = 0; d < p.D; ++d) {
              ASSERT_NEAR(hk(pg, slot, h, d), rk(row, h, d), 1e-12) << "dk of key " << j << " of sequence " << s;
              ASSERT_NEAR(hv(pg, slot, h, d), rv(row, h, d), 1e-12) << "dv of key " << j << " of sequence " << s;
            }
        }
      for (std::size_t pg = 0; pg < hk.extent(0); ++pg)
        for (int slot = 0; slot < page; ++slot)
          if (!holds_key[pg * page + slot])
            for (int h = 0; h < p.Hkv; ++h)
              for (int d = 0; d < p.D; ++d) {
                ASSERT_EQ(hk(pg, slot, h, d), 0.0) << "dk of empty slot " << slot << " of page " << pg;
                ASSERT_EQ(hv(pg, slot, h, d), 0.0) << "dv of empty slot " << slot << " of page " << pg;
              }
    }
}

TEST(Paged, LayoutFindsRepeatedPagesWithoutMemoryForTheLargestIndex) {
  // Page indices up to 2^62 are valid in a table (checked against the cache when used).
  const auto huge = make_paged_layout<TestMemory>(host_index({0, 1, 2}), host_index({0, 1, 2}),
                                                  host_index({std::int64_t(1) << 62, 5}), host_index({4, 4}), 4);
  EXPECT_EQ(huge.repeated_at, -1);
  const auto shared = make_paged_layout<TestMemory>(host_index({0, 1, 1, 2}), host_index({0, 2, 3, 5}),
                                                    host_index({7, 2, 9, 2, 7}), host_index({1, 4, 4}), 4);
  EXPECT_EQ(shared.repeated_at, 3);  // page 2, first at position 1
}

TEST(Paged, BackwardRefusesAPageSharedBySequences) {
  RaggedProblem<double> p({1, 2}, {10, 9}, 4, 2, 8, fresh_seed());
  PagedCopy<double> cache(p, 4, fresh_seed(), 0);
  std::vector<std::int64_t> indices = cache.page_indices;
  indices[cache.page_indptr[1]] = indices[0];  // sequence 1 starts on sequence 0's first page
  const auto layout = make_paged_layout<TestMemory>(host_index(p.q_indptr()), host_index(cache.page_indptr),
                                                    host_index(indices), host_index(cache.last_page_len), 4);
  attention(TestSpace(), p.q, kv::paged(cache.k, cache.v, layout), p.o, p.lse);
  View3<double> dout("do", p.q.extent(0), p.Hq, p.D), dq("dq", p.q.extent(0), p.Hq, p.D);
  View4<double> dk("dk", cache.k.extent(0), 4, p.Hkv, p.D), dv("dv", cache.k.extent(0), 4, p.Hkv, p.D);
  try {
    attention_backward(TestSpace(), p.q, kv::paged(cache.k, cache.v, layout), p.o, p.lse, dout, dq,
                       dk, dv);
    FAIL() << "expected a kattn::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kv_page_indices: the page at position 3 is listed earlier too"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace test
}  // namespace kattn
