// Options::progress: the forward in pieces of query positions gives the rows the single launch
// gives, reports increasing fractions ending at 1, and stops cleanly when the callback says so.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/detail/tuning.hpp"
#include "kattn/errors.hpp"
#include "ragged_support.hpp"
#include "support.hpp"

namespace kattn {
namespace test {
namespace {

TEST(Progress, PiecesGiveTheRowsOfOneLaunch) {
  for (const Options& variant : option_variants()) {
    const Shape s{2, 700, 900, 4, 2, 16};
    Problem<double> one(s, fresh_seed());
    Problem<double> pieces = one;
    pieces.o = View4<double>("o2", s.B, s.Nq, s.Hq, s.D);
    pieces.lse = View3<double>("lse2", s.B, s.Hq, s.Nq);
    attention(TestSpace(), one.q, kv::dense(one.k, one.v), one.o, one.lse, one_split(variant));
    std::vector<double> seen;
    Options opt = variant;
    opt.progress = [&](double f) {
      seen.push_back(f);
      return true;
    };
    attention(TestSpace(), pieces.q, kv::dense(pieces.k, pieces.v), pieces.o, pieces.lse, one_split(opt));
    Kokkos::fence();
    SCOPED_TRACE(describe(s, variant));
    ASSERT_EQ(seen.size(), 3u);  // 700 positions in pieces of 256
    EXPECT_LT(seen[0], seen[1]);
    EXPECT_DOUBLE_EQ(seen.back(), 1.0);
    const std::vector<double> o1 = to_host(one.o), o2 = to_host(pieces.o);
    const std::vector<double> l1 = to_host(one.lse), l2 = to_host(pieces.lse);
    for (std::size_t n = 0; n < o1.size(); ++n) ASSERT_NEAR(o1[n], o2[n], 1e-12) << "o element " << n;
    for (std::size_t n = 0; n < l1.size(); ++n) {
      if (std::isinf(l1[n]))
        ASSERT_EQ(l1[n], l2[n]);
      else
        ASSERT_NEAR(l1[n], l2[n], 1e-12) << "lse element " << n;
    }
  }
}

TEST(Progress, SplitKeysReportInPiecesAndRaggedBatchesOnceAtTheEnd) {
  // Split-KV through the front door: the same pieces, each with its merge, close to the reference.
  const Shape s{1, 600, 1100, 4, 2, 16};
  Problem<double> p(s, fresh_seed());
  Options opt;
  opt.causal = true;
  opt.splits = 3;
  std::vector<double> seen;
  opt.progress = [&](double f) {
    seen.push_back(f);
    return true;
  };
  attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt);
  Kokkos::fence();
  ASSERT_EQ(seen.size(), 3u);  // 600 positions in pieces of 256
  EXPECT_LT(seen[0], seen[1]);
  EXPECT_LT(seen[1], seen[2]);
  EXPECT_DOUBLE_EQ(seen.back(), 1.0);
  Options plain = opt;
  plain.progress = nullptr;
  expect_close(p, reference_of(p, plain), kDoubleTol, "split-KV with progress");

  // A ragged batch runs in one launch and reports 1 once, after it.
  RaggedProblem<double> r({3, 1, 40}, {9, 300, 40}, 4, 2, 16, fresh_seed());
  const auto layout = make_ragged_layout<TestMemory>(host_index(r.q_indptr()), host_index(r.kv_indptr()));
  seen.clear();
  attention(TestSpace(), r.q, kv::ragged(r.k, r.v, layout), r.o, r.lse, opt);
  Kokkos::fence();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_DOUBLE_EQ(seen[0], 1.0);
  std::vector<double> o_ref, lse_ref;
  ragged_reference(r, plain, o_ref, lse_ref);
  expect_outputs_close(r.o, r.lse, o_ref, lse_ref, "ragged with progress");
}

TEST(Progress, FalseOrAThrowStopsTheCall) {
  const Shape s{1, 1000, 1000, 1, 1, 8};
  Problem<float> p(s, fresh_seed());
  Options opt;
  opt.causal = true;
  int calls = 0;
  opt.progress = [&](double) { return ++calls < 2; };
  EXPECT_THROW(attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, one_split(opt)), Error);
  EXPECT_EQ(calls, 2);
  opt.progress = [](double) -> bool { throw std::runtime_error("user stop"); };
  EXPECT_THROW(attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, one_split(opt)), std::runtime_error);
  Kokkos::fence();
}

// The backward of p's forward (o, lse computed here), with or without progress reports.
struct Grads {
  std::vector<double> dq, dk, dv;
};
Grads backward_of(Problem<double>& p, View4<double> dout, const Options& opt, const BackwardOptions& bopt) {
  const Shape& s = p.shape;
  Options forward = one_split(opt);
  forward.progress = nullptr;
  attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, forward);
  View4<double> dq("dq", s.B, s.Nq, s.Hq, s.D), dk("dk", s.B, s.Nk, s.Hkv, s.D), dv("dv", s.B, s.Nk, s.Hkv, s.D);
  attention_backward(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, dout, dq, dk, dv, opt, bopt);
  Kokkos::fence();
  return {to_host(dq), to_host(dk), to_host(dv)};
}

TEST(Progress, BackwardPiecesGiveTheBitsOfOneLaunch) {
  const Shape s{1, 1500, 2000, 2, 1, 8};  // 16 key tiles of 128 (4 rounds of the key chunks), 24 query tiles
  for (const DqStrategy dq : {DqStrategy::key_chunks, DqStrategy::query_pass})
    for (int variant = 0; variant < 3; ++variant) {
      Options opt;
      opt.causal = variant == 1;
      if (variant == 2) opt.window_left = 100, opt.window_right = 30;
      BackwardOptions bopt;
      bopt.dq = dq;
      bopt.deterministic = true;
      bopt.dq_chunks = dq == DqStrategy::key_chunks ? 4 : 0;
      Problem<double> p(s, fresh_seed());
      View4<double> dout("do", s.B, s.Nq, s.Hq, s.D);
      fill_normal(dout, fresh_seed());
      const Grads one = backward_of(p, dout, opt, bopt);
      std::vector<double> seen;
      Options with = opt;
      with.progress = [&](double f) {
        seen.push_back(f);
        return true;
      };
      const Grads pieces = backward_of(p, dout, with, bopt);
      SCOPED_TRACE(std::string(name(dq)) + " variant " + std::to_string(variant));
      // Pieces keep every team of the space busy (BackwardPieces): on a GPU this problem's passes
      // are one piece each, so the reports are the key pass's end and 1.
      ASSERT_GE(seen.size(), kattn::detail::is_host_space<TestSpace>() ? 3u : 2u);
      for (std::size_t n = 1; n < seen.size(); ++n) EXPECT_LT(seen[n - 1], seen[n]) << "report " << n;
      EXPECT_GT(seen.front(), 0.0);
      EXPECT_DOUBLE_EQ(seen.back(), 1.0);
      EXPECT_EQ(one.dq, pieces.dq);
      EXPECT_EQ(one.dk, pieces.dk);
      EXPECT_EQ(one.dv, pieces.dv);
    }
}

TEST(Progress, BackwardStopsWhenTheCallbackSaysSoAndRaggedReportsOnce) {
  const Shape s{1, 1000, 1000, 1, 1, 8};
  Problem<double> p(s, fresh_seed());
  View4<double> dout("do", s.B, s.Nq, s.Hq, s.D);
  fill_normal(dout, fresh_seed());
  Options opt;
  opt.causal = true;
  int calls = 0;
  opt.progress = [&](double) { return ++calls < 2; };
  BackwardOptions bopt;
  bopt.dq = DqStrategy::query_pass;
  EXPECT_THROW(backward_of(p, dout, opt, bopt), Error);
  EXPECT_EQ(calls, 2);

  RaggedProblem<double> r({3, 1, 40}, {9, 300, 40}, 4, 2, 16, fresh_seed());
  const auto layout = make_ragged_layout<TestMemory>(host_index(r.q_indptr()), host_index(r.kv_indptr()));
  attention(TestSpace(), r.q, kv::ragged(r.k, r.v, layout), r.o, r.lse, Options{});
  const auto like = [](const View3<double>& v, const char* label) {
    return View3<double>(std::string(label), v.extent(0), v.extent(1), v.extent(2));
  };
  View3<double> rdo = like(r.q, "do"), rdq = like(r.q, "dq"), rdk = like(r.k, "dk"), rdv = like(r.v, "dv");
  fill_normal(rdo, fresh_seed());
  std::vector<double> seen;
  Options ropt;
  ropt.progress = [&](double f) {
    seen.push_back(f);
    return true;
  };
  attention_backward(TestSpace(), r.q, kv::ragged(r.k, r.v, layout), r.o, r.lse, rdo, rdq, rdk, rdv,
                     ropt);
  Kokkos::fence();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_DOUBLE_EQ(seen[0], 1.0);
}

}  // namespace
}  // namespace test
}  // namespace kattn
