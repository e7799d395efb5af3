// reference_dq_row and reference_dkdv_rows (gradient rows of the textbook backward in float64,
// without the [Nq, Nk] matrices) against the full textbook backward, on every row of small
// problems: GQA, every mask variant, softcap, ALiBi and a bias, ragged batches with empty sequences; and
// key_rows_to_check's choice of key rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "kattn/backward_shapes.hpp"
#include "kattn/ragged.hpp"
#include "kattn/reference_backward.hpp"
#include "kattn/reference_backward_rows.hpp"
#include "kattn/score_bias.hpp"
#include "ragged_support.hpp"
#include "support.hpp"

namespace kattn {
namespace test {
namespace {

using Host = Kokkos::HostSpace;
using H4 = Kokkos::View<double****, Kokkos::LayoutRight, Host>;
using H3 = Kokkos::View<double***, Kokkos::LayoutRight, Host>;
using H2 = Kokkos::View<double**, Kokkos::LayoutRight, Host>;

void expect_close(const double* got, const double* want, int n, const std::string& what) {
  for (int d = 0; d < n; ++d) EXPECT_NEAR(got[d], want[d], 1e-11 * (1 + std::abs(want[d]))) << what << " dim " << d;
}

// p's dq, dk, dv hold the full textbook's gradients: every row computed alone must match them.
void expect_gradient_rows_match(const BackwardParams<double>& p, const Options& opt, const std::string& what) {
  const AttentionParams<double>& f = p.fwd;
  std::vector<double> row(f.head_dim);
  for (int b = 0; b < f.batch; ++b)
    for (std::int64_t i = 0; i < f.seq_q_len(b); ++i)
      for (int h = 0; h < f.heads_q; ++h) {
        reference_dq_row(p, opt, {b, i, h}, row.data());
        expect_close(row.data(), p.dq_ptr(b, i, h), f.head_dim,
                     what + " dq b=" + std::to_string(b) + " i=" + std::to_string(i) + " h=" + std::to_string(h));
      }
  std::vector<KeyRow> keys;
  for (int b = 0; b < f.batch; ++b)
    for (std::int64_t j = 0; j < f.seq_kv_len(b); ++j)
      for (int h = 0; h < f.heads_kv; ++h) keys.push_back({b, j, h});
  std::vector<double> dk(keys.size() * f.head_dim), dv(keys.size() * f.head_dim);
  reference_dkdv_rows(p, opt, keys, dk.data(), dv.data());
  for (std::size_t r = 0; r < keys.size(); ++r) {
    const std::string at = " b=" + std::to_string(keys[r].b) + " j=" + std::to_string(keys[r].j) +
                           " h=" + std::to_string(keys[r].h);
    expect_close(dk.data() + r * f.head_dim, p.dk_ptr(keys[r].b, keys[r].j, keys[r].h), f.head_dim, what + " dk" + at);
    expect_close(dv.data() + r * f.head_dim, p.dv_ptr(keys[r].b, keys[r].j, keys[r].h), f.head_dim, what + " dv" + at);
  }
}

TEST(ReferenceBackwardRows, DenseRowsEqualTheTextbookUnderEveryVariant) {
  for (const Shape& s : {Shape{2, 9, 13, 4, 2, 8}, Shape{1, 13, 6, 3, 1, 5}, Shape{1, 1, 40, 8, 8, 16}})
    for (const Options& opt : option_variants()) {
      const std::uint64_t seed = fresh_seed();
      H4 q("q", s.B, s.Nq, s.Hq, s.D), k("k", s.B, s.Nk, s.Hkv, s.D), v("v", s.B, s.Nk, s.Hkv, s.D);
      H4 dout("do", s.B, s.Nq, s.Hq, s.D), dq("dq", s.B, s.Nq, s.Hq, s.D);
      H4 dk("dk", s.B, s.Nk, s.Hkv, s.D), dv("dv", s.B, s.Nk, s.Hkv, s.D);
      fill_normal(q, seed), fill_normal(k, seed + 1), fill_normal(v, seed + 2), fill_normal(dout, seed + 3);
      reference_backward(Kokkos::DefaultHostExecutionSpace(), q, k, v, dout, dq, dk, dv, opt);
      H3 lse("lse", s.B, s.Hq, s.Nq);  // not read by the row functions
      expect_gradient_rows_match(backward_params(q, k, v, dout, lse, dout, dq, dk, dv), opt, describe(s, opt));
    }
}

// ALiBi and a bias tensor, alone and under softcap (whose derivative reads the score before them).
TEST(ReferenceBackwardRows, RowsWithAlibiAndABiasEqualTheTextbook) {
  const Shape s{2, 9, 13, 4, 2, 8};
  H4 bias("bias", 1, s.Hq, s.Nq, s.Nk);
  for (const Options& variant : option_variants())
    for (int what = 0; what < 3; ++what) {
      const std::uint64_t seed = fresh_seed();
      Options opt = variant;
      if (what != 1) opt.alibi_slopes = {0.5, 0.25, 0.125, 0.0625};
      if (what != 0) {
        fill_normal(bias, seed + 4);
        opt.bias = score_bias(bias);
      }
      H4 q("q", s.B, s.Nq, s.Hq, s.D), k("k", s.B, s.Nk, s.Hkv, s.D), v("v", s.B, s.Nk, s.Hkv, s.D);
      H4 dout("do", s.B, s.Nq, s.Hq, s.D), dq("dq", s.B, s.Nq, s.Hq, s.D);
      H4 dk("dk", s.B, s.Nk, s.Hkv, s.D), dv("dv", s.B, s.Nk, s.Hkv, s.D);
      fill_normal(q, seed), fill_normal(k, seed + 1), fill_normal(v, seed + 2), fill_normal(dout, seed + 3);
      reference_backward(Kokkos::DefaultHostExecutionSpace(), q, k, v, dout, dq, dk, dv, opt);
      H3 lse("lse", s.B, s.Hq, s.Nq);
      expect_gradient_rows_match(backward_params(q, k, v, dout, lse, dout, dq, dk, dv), opt,
                                 describe(s, opt) + " seed=" + std::to_string(seed));
    }
}

TEST(ReferenceBackwardRows, RaggedRowsEqualTheTextbook) {
  const std::vector<std::int64_t> q_lens = {1, 0, 4, 7, 2}, kv_lens = {5, 3, 0, 9, 2};
  const int Hq = 4, Hkv = 2, D = 8;
  std::vector<std::int64_t> q_indptr = {0}, kv_indptr = {0};
  for (std::size_t b = 0; b < q_lens.size(); ++b)
    q_indptr.push_back(q_indptr.back() + q_lens[b]), kv_indptr.push_back(kv_indptr.back() + kv_lens[b]);
  const std::int64_t total_q = q_indptr.back(), total_kv = kv_indptr.back();
  for (const Options& opt : option_variants()) {
    if (opt.diagonal_shift != 0) continue;  // whole sequences only
    H3 q("q", total_q, Hq, D), k("k", total_kv, Hkv, D), v("v", total_kv, Hkv, D), dout("do", total_q, Hq, D);
    H3 dq("dq", total_q, Hq, D), dk("dk", total_kv, Hkv, D), dv("dv", total_kv, Hkv, D);
    H2 lse("lse", total_q, Hq);
    const std::uint64_t seed = fresh_seed();
    fill_normal(q, seed), fill_normal(k, seed + 1), fill_normal(v, seed + 2), fill_normal(dout, seed + 3);
    const auto layout = make_ragged_layout<Host>(host_index(q_indptr), host_index(kv_indptr));
    const BackwardParams<double> p = ragged_backward_params(q, k, v, dout, lse, dout, dq, dk, dv, layout);
    detail::reference_backward_impl(Kokkos::DefaultHostExecutionSpace(), p, opt);
    expect_gradient_rows_match(p, opt, "ragged " + describe(Shape{}, opt));
  }
}

bool has(const std::vector<KeyRow>& rows, int b, std::int64_t j, int h) {
  return std::any_of(rows.begin(), rows.end(), [&](const KeyRow& r) { return r.b == b && r.j == j && r.h == h; });
}

TEST(ReferenceBackwardRows, KeyRowsToCheckHoldTheFirstLastAndEveryMaskedEdge) {
  H4 q("q", 1, 30, 4, 2), k("k", 1, 100, 2, 2), v("v", 1, 100, 2, 2), o("o", 1, 30, 4, 2), dout("do", 1, 30, 4, 2);
  H4 dq("dq", 1, 30, 4, 2), dk("dk", 1, 100, 2, 2), dv("dv", 1, 100, 2, 2);
  H3 lse("lse", 1, 4, 30);
  const BackwardParams<double> p = backward_params(q, k, v, o, lse, dout, dq, dk, dv);
  Options opt;
  opt.causal = true;
  opt.window_left = 10;
  // Causal with Nq = 30 < Nk = 100: query i sees keys [i + 60, i + 70]. Keys 0..59 are seen by no
  // row; 60..70 by the first; key 89 is the first the last row sees; 99 the last key. Heads 0 and 1.
  const std::vector<KeyRow> rows = key_rows_to_check(p, opt, 0, 1);
  for (std::int64_t j : {0, 59, 60, 70, 71, 88, 89, 99})
    for (int h : {0, 1}) EXPECT_TRUE(has(rows, 0, j, h)) << "key " << j << " head " << h;
  EXPECT_FALSE(has(rows, 0, 80, 0));
  EXPECT_LE(rows.size(), 16u);
  const std::vector<KeyRow> more = key_rows_to_check(p, opt, 30, 7), again = key_rows_to_check(p, opt, 30, 7);
  EXPECT_GT(more.size(), rows.size());
  EXPECT_EQ(more.size(), again.size());
  for (std::size_t n = 1; n < more.size(); ++n)
    EXPECT_FALSE(more[n].b == more[n - 1].b && more[n].j == more[n - 1].j && more[n].h == more[n - 1].h);
}

}  // namespace
}  // namespace test
}  // namespace kattn
