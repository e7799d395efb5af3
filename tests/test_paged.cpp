// Paged KV caches against the float64 reference on the same keys laid out densely, sequence by
// sequence: page sizes 1, 3, 16, 256, pages in shuffled order with unused pages around them,
// pages shared between sequences, every split choice.
#include <gtest/gtest.h>

#include <vector>

#include "kattn/attention.hpp"
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
      int32 ? make_paged_layout(host_index32(p.q_indptr()), host_index32(cache.page_indptr),
                                host_index32(cache.page_indices), host_index32(cache.last_page_len), page)
            : make_paged_layout(index(p.q_indptr()), index(cache.page_indptr), index(cache.page_indices),
                                index(cache.last_page_len), page);
  attention(Kokkos::DefaultExecutionSpace(), p.q, kv::paged(cache.k, cache.v, layout), p.o, p.lse, opt);
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
  const auto layout = make_paged_layout(host_index(p.q_indptr()), host_index(cache.page_indptr), host_index(indices),
                                        host_index(cache.last_page_len), page);
  attention(Kokkos::DefaultExecutionSpace(), p.q, kv::paged(cache.k, cache.v, layout), p.o, p.lse);
  Kokkos::fence();
  std::vector<double> o_ref, lse_ref;
  ragged_reference(p, Options{}, o_ref, lse_ref);
  expect_outputs_close(p.o, p.lse, o_ref, lse_ref, "shared pages");
}

}  // namespace
}  // namespace test
}  // namespace kattn
