// Ragged batches (sequences packed without padding, found by indptr arrays) against the float64
// reference run on each sequence alone: empty, 1-token and long sequences mixed, decode, appends
// and prefills in one call, every mask variant, every split choice, int32 and int64 indptr.
#include <gtest/gtest.h>

#include <vector>

#include "kattn/attention.hpp"
#include "kattn/ragged.hpp"
#include "ragged_support.hpp"

namespace kattn {
namespace test {
namespace {

std::vector<Options> variants() {
  std::vector<Options> v(6);
  v[1].causal = true;
  v[2].window_left = 6, v[2].window_right = 2;
  v[3].causal = true, v[3].window_left = 9;
  v[4].softcap = 3.0;
  v[5].causal = true, v[5].scale = 0.21;
  return v;
}

template <class T>
void check_ragged(const std::vector<std::int64_t>& q_lens, const std::vector<std::int64_t>& kv_lens, int Hq, int Hkv,
                  int D, Options opt, int splits, bool int32 = false) {
  opt.splits = splits;
  const std::uint64_t seed = fresh_seed();
  RaggedProblem<T> p(q_lens, kv_lens, Hq, Hkv, D, seed);
  SCOPED_TRACE(p.what() + " " + describe(Shape{}, opt) + " int32=" + std::to_string(int32) +
               " seed=" + std::to_string(seed));
  const auto layout = int32 ? make_ragged_layout<TestMemory>(host_index32(p.q_indptr()), host_index32(p.kv_indptr()))
                            : make_ragged_layout<TestMemory>(host_index(p.q_indptr()), host_index(p.kv_indptr()));
  attention(TestSpace(), p.q, kv::ragged(p.k, p.v, layout), p.o, p.lse, opt);
  Kokkos::fence();
  std::vector<double> o_ref, lse_ref;
  ragged_reference(p, opt, o_ref, lse_ref);
  expect_outputs_close(p.o, p.lse, o_ref, lse_ref, "ragged splitkv");
}

TEST(Ragged, EmptyOneTokenAndLongSequencesMixed) {
  // Decode rows (1 query), appends (3, 7), a prefill (40), a sequence with keys but no queries,
  // one with queries but no keys, and one with neither.
  const std::vector<std::int64_t> q_lens = {1, 0, 1, 3, 40, 1, 0, 7, 2, 1};
  const std::vector<std::int64_t> kv_lens = {1, 500, 0, 3, 40, 1300, 0, 64, 2, 17};
  for (const Options& o : variants())
    for (int splits : {0, 1, 3, 50}) check_ragged<double>(q_lens, kv_lens, 8, 2, 16, o, splits);
  // At most 4 queries x 4 heads per KV head: row tiles for the whole batch.
  const std::vector<std::int64_t> short_q = {1, 0, 1, 3, 4, 1, 0, 2, 2, 1};
  for (const Options& o : variants())
    for (int splits : {0, 1, 3, 50}) check_ragged<double>(short_q, kv_lens, 8, 2, 16, o, splits);
}

TEST(Ragged, DecodeBatchesWithGqaRatiosAndHeadDims) {
  const std::vector<std::int64_t> q_lens = {1, 1, 1, 1, 1};
  const std::vector<std::int64_t> kv_lens = {1, 1000, 33, 0, 257};
  for (int ratio : {1, 2, 8})
    for (int d : {3, 16, 64, 128}) {
      Options causal;
      causal.causal = true;
      check_ragged<double>(q_lens, kv_lens, 2 * ratio, 2, d, Options{}, 0);
      check_ragged<double>(q_lens, kv_lens, 2 * ratio, 2, d, causal, 4);
    }
}

TEST(Ragged, Int32IndptrIsAccepted) {
  check_ragged<double>({2, 1, 0, 5}, {10, 0, 3, 80}, 4, 1, 8, Options{}, 2, /*int32=*/true);
}

TEST(Ragged, AllSequencesEmpty) {
  check_ragged<double>({0, 0, 0}, {0, 0, 0}, 2, 1, 8, Options{}, 0);
  check_ragged<double>({0, 0}, {5, 9}, 2, 1, 8, Options{}, 3);
  check_ragged<double>({2, 1}, {0, 0}, 2, 1, 8, Options{}, 3);
}

TEST(Ragged, FloatWithinRelativeBound) {
  const std::vector<std::int64_t> q_lens = {1, 4, 1, 0, 33};
  const std::vector<std::int64_t> kv_lens = {2000, 4, 1, 7, 100};
  for (const Options& o : variants())
    for (int splits : {0, 1, 6}) check_ragged<float>(q_lens, kv_lens, 16, 2, 128, o, splits);
}

TEST(Ragged, LayoutIsReusable) {
  // One layout, validated once, for two problems of the same batch (two layers of a model).
  RaggedProblem<double> a({1, 2, 1}, {40, 3, 900}, 4, 2, 32, fresh_seed());
  RaggedProblem<double> b({1, 2, 1}, {40, 3, 900}, 4, 2, 32, fresh_seed());
  const auto layout = make_ragged_layout<TestMemory>(host_index(a.q_indptr()), host_index(a.kv_indptr()));
  for (RaggedProblem<double>* p : {&a, &b}) {
    attention(TestSpace(), p->q, kv::ragged(p->k, p->v, layout), p->o, p->lse);
    Kokkos::fence();
    std::vector<double> o_ref, lse_ref;
    ragged_reference(*p, Options{}, o_ref, lse_ref);
    expect_outputs_close(p->o, p->lse, o_ref, lse_ref, "reused layout");
  }
}

}  // namespace
}  // namespace test
}  // namespace kattn
