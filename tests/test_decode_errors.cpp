// Bad split-KV input and bad ragged / paged metadata: every case a kattn::Error naming the array
// (or option) and what was wrong, thrown before any kernel runs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/paged.hpp"
#include "kattn/ragged.hpp"
#include "ragged_support.hpp"

namespace kattn {
namespace test {
namespace {

TEST(DecodeErrors, RaggedIndptrInconsistencies) {
  using V = std::vector<std::int64_t>;
  expect_error([] { make_ragged_layout(host_index(V{}), host_index(V{0})); }, {"q_indptr", "empty"});
  expect_error([] { make_ragged_layout(host_index(V{1, 2}), host_index(V{0, 2})); }, {"q_indptr", "first offset", "got 1"});
  expect_error([] { make_ragged_layout(host_index(V{0, 3, 2}), host_index(V{0, 1, 2})); },
               {"q_indptr", "non-decreasing", "3 then 2"});
  expect_error([] { make_ragged_layout(host_index(V{0, 1, 2}), host_index(V{0, 2})); },
               {"kv_indptr", "expected 3 offsets", "got 2"});
  expect_error([] { make_ragged_layout(host_index(V{0, 1}), host_index(V{0, -1})); }, {"kv_indptr", "non-decreasing"});
  // Last offsets against the arrays.
  RaggedProblem<double> p({1, 2}, {3, 4}, 2, 1, 8, 1);
  const auto bad_q = make_ragged_layout<TestMemory>(host_index(V{0, 1, 4}), host_index(V{0, 3, 7}));
  expect_error([&] { attention(TestSpace(), p.q, kv::ragged(p.k, p.v, bad_q), p.o, p.lse); },
               {"q:", "expected 4 rows", "q_indptr", "got 3"});
  const auto bad_kv = make_ragged_layout<TestMemory>(host_index(V{0, 1, 3}), host_index(V{0, 3, 8}));
  expect_error([&] { attention(TestSpace(), p.q, kv::ragged(p.k, p.v, bad_kv), p.o, p.lse); },
               {"k:", "expected 8 rows", "kv_indptr", "got 7"});
}

TEST(DecodeErrors, RaggedShapes) {
  using V = std::vector<std::int64_t>;
  RaggedProblem<double> p({1, 2}, {3, 4}, 4, 2, 8, 1);
  const auto layout = make_ragged_layout<TestMemory>(host_index(V{0, 1, 3}), host_index(V{0, 3, 7}));
  View3<double> k3("k", 7, 3, 8), v3("v", 7, 3, 8);
  expect_error([&] { attention(TestSpace(), p.q, kv::ragged(k3, v3, layout), p.o, p.lse); },
               {"q:", "multiple of the 3 KV heads"});
  View3<double> v_short("v", 6, 2, 8);
  expect_error([&] { attention(TestSpace(), p.q, kv::ragged(p.k, v_short, layout), p.o, p.lse); },
               {"v:", "rows 7", "got 6"});
  View2<double> lse_bad("lse", 3, 5);
  expect_error([&] { attention(TestSpace(), p.q, kv::ragged(p.k, p.v, layout), p.o, lse_bad); },
               {"lse:", "heads 4", "got 5"});
  View3<double> o_bad("o", 3, 4, 9);
  expect_error([&] { attention(TestSpace(), p.q, kv::ragged(p.k, p.v, layout), o_bad, p.lse); },
               {"o:", "head dim 8", "got 9"});
}

TEST(DecodeErrors, PagedMetadataInconsistencies) {
  using V = std::vector<std::int64_t>;
  const auto make = [](V qi, V pi, V idx, V last, std::int64_t page) {
    return make_paged_layout<TestMemory>(host_index(qi), host_index(pi), host_index(idx), host_index(last), page);
  };
  expect_error([&] { make(V{0, 1}, V{0, 1}, V{0}, V{1}, 0); }, {"page_size", "got 0"});
  expect_error([&] { make(V{0, 1, 2}, V{0, 1}, V{0}, V{1, 1}, 4); }, {"kv_page_indptr", "expected 3 offsets", "got 2"});
  expect_error([&] { make(V{0, 1}, V{1, 2}, V{0, 1}, V{1}, 4); }, {"kv_page_indptr", "first offset", "got 1"});
  expect_error([&] { make(V{0, 1, 2}, V{0, 2, 1}, V{0, 1}, V{1, 1}, 4); }, {"kv_page_indptr", "non-decreasing"});
  expect_error([&] { make(V{0, 1}, V{0, 2}, V{0}, V{1}, 4); }, {"kv_page_indices", "expected 2 entries", "got 1"});
  expect_error([&] { make(V{0, 1}, V{0, 2}, V{0, -3}, V{1}, 4); }, {"kv_page_indices", ">= 0", "got -3", "position 1"});
  expect_error([&] { make(V{0, 1, 2}, V{0, 1, 2}, V{0, 1}, V{1}, 4); }, {"kv_last_page_len", "expected 2 entries"});
  expect_error([&] { make(V{0, 1}, V{0, 1}, V{0}, V{0}, 4); }, {"kv_last_page_len", "1 .. 4", "sequence 0", "got 0"});
  expect_error([&] { make(V{0, 1}, V{0, 1}, V{0}, V{5}, 4); }, {"kv_last_page_len", "1 .. 4", "got 5"});
  expect_error([&] { make(V{0, 1, 2}, V{0, 1, 1}, V{0}, V{2, 3}, 4); },
               {"kv_last_page_len", "sequence 1 has no pages", "expected 0", "got 3"});
  // Against the cache: page indices out of range, page size, shapes.
  RaggedProblem<double> p({1}, {5}, 2, 1, 8, 1);
  View4<double> k("k", 3, 4, 1, 8), v("v", 3, 4, 1, 8);
  const auto out_of_range = make(V{0, 1}, V{0, 2}, V{2, 3}, V{1}, 4);
  expect_error([&] { attention(TestSpace(), p.q, kv::paged(k, v, out_of_range), p.o, p.lse); },
               {"kv_page_indices", "page index 3", "position 1", "out of range", "3 pages"});
  const auto wrong_page = make(V{0, 1}, V{0, 1}, V{0}, V{5}, 8);
  expect_error([&] { attention(TestSpace(), p.q, kv::paged(k, v, wrong_page), p.o, p.lse); },
               {"k:", "pages of 8 keys", "got 4"});
  const auto good = make(V{0, 1}, V{0, 2}, V{2, 0}, V{1}, 4);
  View4<double> v_bad("v", 3, 4, 2, 8);
  expect_error([&] { attention(TestSpace(), p.q, kv::paged(k, v_bad, good), p.o, p.lse); }, {"v:", "KV heads 1"});
  EXPECT_NO_THROW(attention(TestSpace(), p.q, kv::paged(k, v, good), p.o, p.lse));
}

TEST(DecodeErrors, SplitOptionsAndCascadeLimits) {
  Problem<double> p({1, 1, 10, 2, 1, 8}, 1);
  Options o;
  o.splits = -1;
  expect_error([&] { attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, o); }, {"splits", "got -1"});
  o = Options{};
  o.split_chunk = -5;
  expect_error([&] { attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, o); },
               {"split_chunk", "got -5"});
  using V = std::vector<std::int64_t>;
  RaggedProblem<double> r({3}, {1}, 2, 1, 8, 1);
  View3<double> kp("kp", 4, 1, 8), vp("vp", 4, 1, 8);
  const auto layout = make_ragged_layout<TestMemory>(host_index(V{0, 3}), host_index(V{0, 1}));
  Options w;
  w.window_left = 3;
  expect_error([&] { attention(TestSpace(), r.q, kv::cascade(kp, vp, kv::ragged(r.k, r.v, layout)), r.o, r.lse, w); },
               {"window", "cascade"});
  Options c;
  c.causal = true;
  expect_error([&] { attention(TestSpace(), r.q, kv::cascade(kp, vp, kv::ragged(r.k, r.v, layout)), r.o, r.lse, c); },
               {"causal", "request 0", "3 queries", "1 suffix keys"});
  View3<double> kp_bad("kp", 4, 1, 16);
  expect_error([&] { attention(TestSpace(), r.q, kv::cascade(kp_bad, vp, kv::ragged(r.k, r.v, layout)), r.o, r.lse); },
               {"k_prefix", "head dim 8", "got 16"});
}

}  // namespace
}  // namespace test
}  // namespace kattn
