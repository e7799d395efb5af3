// reference_row (one query row of the textbook algorithm in float64, O(keys) memory) against the
// full textbook reference, on every row of small problems: GQA, every mask variant, softcap,
// ragged and paged batches; and rows_to_check's choice of rows (the first and last row, every
// masked edge, rows that see no key).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kattn/paged.hpp"
#include "kattn/ragged.hpp"
#include "kattn/reference.hpp"
#include "kattn/reference_rows.hpp"
#include "ragged_support.hpp"
#include "support.hpp"

namespace kattn {
namespace test {
namespace {

using Host = Kokkos::HostSpace;
using H4 = Kokkos::View<double****, Kokkos::LayoutRight, Host>;
using H3 = Kokkos::View<double***, Kokkos::LayoutRight, Host>;
using H2 = Kokkos::View<double**, Kokkos::LayoutRight, Host>;

// Every row of p against the reference's o and lse (p.o, p.lse point at them).
void expect_rows_match(const AttentionParams<double>& p, const Options& opt, const std::string& what) {
  std::vector<double> o(p.head_dim);
  for (int b = 0; b < p.batch; ++b)
    for (std::int64_t i = 0; i < p.seq_q_len(b); ++i)
      for (int h = 0; h < p.heads_q; ++h) {
        const double lse = reference_row(p, opt, {b, i, h}, o.data());
        const double ref_lse = *p.lse_ptr(b, i, h);
        SCOPED_TRACE(what + " row b=" + std::to_string(b) + " i=" + std::to_string(i) + " h=" + std::to_string(h));
        if (std::isinf(ref_lse))
          EXPECT_EQ(lse, ref_lse);
        else
          EXPECT_NEAR(lse, ref_lse, 1e-12);
        for (int d = 0; d < p.head_dim; ++d) EXPECT_NEAR(o[d], p.o_ptr(b, i, h)[d], 1e-12);
      }
}

TEST(ReferenceRows, DenseRowsEqualTheTextbookUnderEveryVariant) {
  for (const Shape& s : {Shape{2, 9, 13, 4, 2, 8}, Shape{1, 13, 6, 3, 1, 5}, Shape{1, 1, 40, 8, 8, 16}})
    for (const Options& opt : option_variants()) {
      Problem<double> p(s, fresh_seed());
      const auto q = Kokkos::create_mirror_view_and_copy(Host(), p.q);
      const auto k = Kokkos::create_mirror_view_and_copy(Host(), p.k);
      const auto v = Kokkos::create_mirror_view_and_copy(Host(), p.v);
      H4 o("o", s.B, s.Nq, s.Hq, s.D);
      H3 lse("lse", s.B, s.Hq, s.Nq);
      reference(Kokkos::DefaultHostExecutionSpace(), q, k, v, o, lse, opt);
      expect_rows_match(dense_params(q, k, v, o, lse), opt, describe(s, opt));
    }
}

TEST(ReferenceRows, RaggedAndPagedRowsEqualTheTextbook) {
  const std::vector<std::int64_t> q_lens = {1, 0, 4, 7, 2}, kv_lens = {5, 3, 0, 9, 2};
  const int Hq = 4, Hkv = 2, D = 8;
  std::int64_t total_q = 0, total_kv = 0;
  for (std::size_t b = 0; b < q_lens.size(); ++b) total_q += q_lens[b], total_kv += kv_lens[b];
  std::vector<std::int64_t> q_indptr = {0}, kv_indptr = {0};
  for (std::size_t b = 0; b < q_lens.size(); ++b)
    q_indptr.push_back(q_indptr.back() + q_lens[b]), kv_indptr.push_back(kv_indptr.back() + kv_lens[b]);
  for (const Options& opt : option_variants()) {
    if (opt.diagonal_shift != 0) continue;  // whole sequences only
    H3 q("q", total_q, Hq, D), k("k", total_kv, Hkv, D), v("v", total_kv, Hkv, D), o("o", total_q, Hq, D);
    H2 lse("lse", total_q, Hq);
    const std::uint64_t seed = fresh_seed();
    fill_normal(q, seed), fill_normal(k, seed + 1), fill_normal(v, seed + 2);
    const auto ragged = make_ragged_layout<Host>(host_index(q_indptr), host_index(kv_indptr));
    reference(Kokkos::DefaultHostExecutionSpace(), q, k, v, o, lse, ragged, opt);
    expect_rows_match(ragged_params(q, k, v, o, lse, ragged), opt, "ragged " + describe(Shape{}, opt));
    // The same keys in pages of 2, in reverse page order.
    const std::int64_t page = 2;
    std::vector<std::int64_t> page_indptr = {0}, last_len;
    for (std::int64_t n : kv_lens) {
      const std::int64_t pages = (n + page - 1) / page;
      page_indptr.push_back(page_indptr.back() + pages);
      last_len.push_back(pages == 0 ? 0 : n - (pages - 1) * page);
    }
    const std::int64_t num_pages = page_indptr.back();
    std::vector<std::int64_t> indices(num_pages);
    for (std::int64_t n = 0; n < num_pages; ++n) indices[n] = num_pages - 1 - n;
    H4 kp("kp", num_pages, page, Hkv, D), vp("vp", num_pages, page, Hkv, D);
    for (std::size_t b = 0; b < kv_lens.size(); ++b)
      for (std::int64_t j = 0; j < kv_lens[b]; ++j)
        for (int h = 0; h < Hkv; ++h)
          for (int d = 0; d < D; ++d) {
            const std::int64_t pg = indices[page_indptr[b] + j / page];
            kp(pg, j % page, h, d) = k(kv_indptr[b] + j, h, d);
            vp(pg, j % page, h, d) = v(kv_indptr[b] + j, h, d);
          }
    const auto paged = make_paged_layout<Host>(host_index(q_indptr), host_index(page_indptr), host_index(indices),
                                               host_index(last_len), page);
    H3 op("op", total_q, Hq, D);
    H2 lp("lp", total_q, Hq);
    reference(Kokkos::DefaultHostExecutionSpace(), q, kp, vp, op, lp, paged, opt);
    expect_rows_match(paged_params(q, kp, vp, op, lp, paged), opt, "paged " + describe(Shape{}, opt));
  }
}

bool has(const std::vector<QueryRow>& rows, int b, std::int64_t i, int h) {
  return std::any_of(rows.begin(), rows.end(), [&](const QueryRow& r) { return r.b == b && r.i == i && r.h == h; });
}

TEST(ReferenceRows, RowsToCheckHoldTheFirstLastAndEveryMaskedEdge) {
  H4 q("q", 1, 100, 4, 2), k("k", 1, 60, 2, 2), o("o", 1, 100, 4, 2);
  H3 lse("lse", 1, 4, 100);
  const AttentionParams<double> p = dense_params(q, k, k, o, lse);
  Options opt;
  opt.causal = true;
  opt.window_left = 10;
  // Causal with Nk = 60 < Nq = 100: rows 0..39 see no key, row 40 sees key 0; row 50 is the first
  // whose window leaves key 0; row 99 is the last. Heads 0 and 3 at each.
  const std::vector<QueryRow> rows = rows_to_check(p, opt, 0, 1);
  for (std::int64_t i : {0, 39, 40, 50, 51, 99})
    for (int h : {0, 3}) EXPECT_TRUE(has(rows, 0, i, h)) << "row " << i << " head " << h;
  EXPECT_FALSE(has(rows, 0, 45, 0));
  EXPECT_LE(rows.size(), 16u);
  // A random sample on top, reproducible from the seed, without duplicates.
  const std::vector<QueryRow> more = rows_to_check(p, opt, 30, 7), again = rows_to_check(p, opt, 30, 7);
  EXPECT_GT(more.size(), rows.size());
  EXPECT_EQ(more.size(), again.size());
  for (std::size_t n = 1; n < more.size(); ++n)
    EXPECT_FALSE(more[n].b == more[n - 1].b && more[n].i == more[n - 1].i && more[n].h == more[n - 1].h);
}

}  // namespace
}  // namespace test
}  // namespace kattn
