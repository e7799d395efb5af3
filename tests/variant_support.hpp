// The checks the score-variant tests (sinks, ALiBi, the bias tensor) share: each runs one path of
// kattn::attention (or its backward) under a variant's options and holds it to the float64
// textbook with the same variant.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "backward_support.hpp"
#include "kattn/attention.hpp"
#include "kattn/block_mask.hpp"
#include "kattn/reference_masked.hpp"
#include "ragged_support.hpp"

namespace kattn {
namespace test {

// A bias [batch, heads, Nq, Nk] of element type B: normal values of spread 2 (for bool, true with
// probability 3/4); a few -inf where B can hold them.
template <class B>
View4<B> random_bias(int batch, int heads, int Nq, int Nk, std::uint64_t seed) {
  View4<B> v("bias", batch, heads, Nq, Nk);
  auto h = Kokkos::create_mirror_view(v);
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> n(0.0, 2.0);
  for (std::size_t e = 0; e < h.span(); ++e) {
    if constexpr (std::is_same_v<B, bool>) {
      h.data()[e] = gen() % 4 != 0;
    } else {
      const double x = gen() % 17 == 0 ? -std::numeric_limits<double>::infinity() : n(gen);
      h.data()[e] = narrow<B>(x);
    }
  }
  Kokkos::deep_copy(v, h);
  return v;
}

// The dense forward of a fresh problem (this seed) under opt against the textbook with the same
// options; `trace` names what the caller chose at random.
template <class T>
void expect_dense_matches_textbook(const Shape& shape, const Options& opt, std::uint64_t seed,
                                   const std::string& what, const std::string& trace = "") {
  SCOPED_TRACE(describe(shape, opt) + trace + " seed=" + std::to_string(seed));
  Problem<T> p(shape, seed);
  attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt);
  Kokkos::fence();
  expect_close(p, reference_of(p, opt), tolerance<T>(), what);
}

// A block mask of 8 x 8 blocks over Nq x Nk (one head pattern for all), about a third of the
// blocks unlisted; `edit` may change the kept blocks (row-major, blocks of queries x keys) first.
template <class Edit = void (*)(std::vector<int>&)>
BlockMask random_block_mask(std::int64_t Nq, std::int64_t Nk, std::uint64_t seed,
                            const Edit& edit = [](std::vector<int>&) {}) {
  const std::int64_t rows = (Nq + 7) / 8, cols = (Nk + 7) / 8;
  std::vector<int> keep(static_cast<std::size_t>(rows * cols));
  std::mt19937_64 gen(seed);
  for (int& x : keep) x = gen() % 3 != 0;
  edit(keep);
  return BlockMask::from_dense(8, 1, rows, cols, keep);
}

// The block-sparse forward of p under opt (opt.block_mask set) against the element-masked textbook.
inline void expect_block_sparse_matches_masked(const Problem<double>& p, const Options& opt, const std::string& what) {
  attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt);
  Kokkos::fence();
  Problem<double> ref(p.shape, 0);
  const auto host = [](const auto& v) { return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v); };
  auto ro = host(ref.o);
  auto rl = host(ref.lse);
  reference_masked(host(p.q), host(p.k), host(p.v), ro, rl, expand_block_mask(*opt.block_mask, p.shape.Nq, p.shape.Nk),
                   opt);
  std::vector<double> o_ref(ro.data(), ro.data() + ro.span()), lse_ref(rl.data(), rl.data() + rl.span());
  expect_outputs_close(p.o, p.lse, o_ref, lse_ref, what);
}

// A ragged batch of these lengths (Hq, Hkv, head dim 16), then the same keys as a paged cache, each
// against the textbook per sequence.
inline void expect_ragged_and_paged_match(const std::vector<std::int64_t>& q_lens,
                                          const std::vector<std::int64_t>& kv_lens, int Hq, int Hkv,
                                          const Options& opt, std::uint64_t seed, const std::string& what) {
  RaggedProblem<double> p(q_lens, kv_lens, Hq, Hkv, 16, seed);
  std::vector<double> o_ref, lse_ref;
  ragged_reference(p, opt, o_ref, lse_ref);
  const auto ragged = make_ragged_layout<TestMemory>(host_index(p.q_indptr()), host_index(p.kv_indptr()));
  attention(TestSpace(), p.q, kv::ragged(p.k, p.v, ragged), p.o, p.lse, opt);
  Kokkos::fence();
  expect_outputs_close(p.o, p.lse, o_ref, lse_ref, "ragged " + what);
  const PagedCopy<double> cache(p, 16, seed + 5);
  const auto paged = make_paged_layout<TestMemory>(host_index(p.q_indptr()), host_index(cache.page_indptr),
                                                   host_index(cache.page_indices), host_index(cache.last_page_len),
                                                   16);
  poison(p.o);
  poison(p.lse);
  attention(TestSpace(), p.q, kv::paged(cache.k, cache.v, paged), p.o, p.lse, opt);
  Kokkos::fence();
  expect_outputs_close(p.o, p.lse, o_ref, lse_ref, "paged " + what);
}

// dq, dk, dv of a fresh problem under opt against the textbook's, for every dq strategy.
inline void expect_backward_matches_textbook(const Shape& shape, const Options& opt, std::uint64_t seed,
                                             const std::string& what) {
  GradProblem<double> p(shape, seed);
  p.forward(opt);
  const GradProblem<double> ref = textbook_gradients(p, opt);
  for (DqStrategy dq : {DqStrategy::key_chunks, DqStrategy::query_pass, DqStrategy::atomic}) {
    BackwardOptions b;
    b.dq = dq;
    p.poison_gradients();
    p.backward(opt, b);
    expect_gradients_close(p, ref, kGradDoubleTol, what + " (dq " + name(dq) + ")");
  }
}

}  // namespace test
}  // namespace kattn
