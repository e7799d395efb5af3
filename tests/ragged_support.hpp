// Test support for ragged and paged batches: random packed problems, paged copies of them with
// pages in any order, and an oracle that runs the float64 textbook reference on each sequence as
// a dense problem of its own (so it shares no addressing code with the kernels under test).
#pragma once

#include <Kokkos_Core.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kattn/options.hpp"
#include "kattn/reference.hpp"
#include "support.hpp"

namespace kattn {
namespace test {

using HostIndex = Kokkos::View<std::int64_t*, Kokkos::HostSpace>;
using HostIndex32 = Kokkos::View<std::int32_t*, Kokkos::HostSpace>;

inline HostIndex host_index(const std::vector<std::int64_t>& values, const char* label = "index") {
  HostIndex v(std::string(label), values.size());
  std::copy(values.begin(), values.end(), v.data());
  return v;
}
inline HostIndex32 host_index32(const std::vector<std::int64_t>& values, const char* label = "index") {
  HostIndex32 v(std::string(label), values.size());
  for (std::size_t i = 0; i < values.size(); ++i) v(i) = static_cast<std::int32_t>(values[i]);
  return v;
}

inline std::vector<std::int64_t> indptr_of(const std::vector<std::int64_t>& lens) {
  std::vector<std::int64_t> p(lens.size() + 1, 0);
  std::partial_sum(lens.begin(), lens.end(), p.begin() + 1);
  return p;
}

inline std::string describe(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

// Packed sequences: q, o [total_q, Hq, D], k, v [total_kv, Hkv, D], lse [total_q, Hq].
template <class T>
struct RaggedProblem {
  std::vector<std::int64_t> q_lens, kv_lens;
  int Hq = 1, Hkv = 1, D = 1;
  View3<T> q, k, v, o;
  View2<T> lse;

  RaggedProblem(std::vector<std::int64_t> ql, std::vector<std::int64_t> kl, int hq, int hkv, int d, std::uint64_t seed)
      : q_lens(std::move(ql)), kv_lens(std::move(kl)), Hq(hq), Hkv(hkv), D(d) {
    const std::int64_t tq = total(q_lens), tk = total(kv_lens);
    q = View3<T>("q", tq, Hq, D);
    k = View3<T>("k", tk, Hkv, D);
    v = View3<T>("v", tk, Hkv, D);
    o = View3<T>("o", tq, Hq, D);
    lse = View2<T>("lse", tq, Hq);
    fill_normal(q, seed);
    fill_normal(k, seed + 1);
    fill_normal(v, seed + 2);
    poison(o);
    poison(lse);
  }
  static std::int64_t total(const std::vector<std::int64_t>& l) { return std::accumulate(l.begin(), l.end(), std::int64_t(0)); }
  std::vector<std::int64_t> q_indptr() const { return indptr_of(q_lens); }
  std::vector<std::int64_t> kv_indptr() const { return indptr_of(kv_lens); }
  std::string what() const {
    return "q_lens=" + describe(q_lens) + " kv_lens=" + describe(kv_lens) + " Hq=" + std::to_string(Hq) +
           " Hkv=" + std::to_string(Hkv) + " D=" + std::to_string(D);
  }
};

// The float64 oracle: each sequence as its own dense problem through kattn::reference. Returns o
// [total_q, Hq, D] and lse [total_q, Hq] flattened, on the host.
template <class T>
void ragged_reference(const RaggedProblem<T>& p, const Options& opt, std::vector<double>& o_ref,
                      std::vector<double>& lse_ref) {
  const auto hq = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.q);
  const auto hk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.k);
  const auto hv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.v);
  const std::int64_t tq = RaggedProblem<T>::total(p.q_lens);
  o_ref.assign(tq * p.Hq * p.D, 0.0);
  lse_ref.assign(tq * p.Hq, 0.0);
  std::int64_t q0 = 0, k0 = 0;
  for (std::size_t b = 0; b < p.q_lens.size(); ++b) {
    const std::int64_t nq = p.q_lens[b], nk = p.kv_lens[b];
    if (nq > 0) {
      View4<double> q("q", 1, nq, p.Hq, p.D), k("k", 1, nk, p.Hkv, p.D), v("v", 1, nk, p.Hkv, p.D),
          o("o", 1, nq, p.Hq, p.D);
      View3<double> lse("lse", 1, p.Hq, nq);
      auto mq = Kokkos::create_mirror_view(q), mk = Kokkos::create_mirror_view(k), mv = Kokkos::create_mirror_view(v);
      for (std::int64_t i = 0; i < nq; ++i)
        for (int h = 0; h < p.Hq; ++h)
          for (int d = 0; d < p.D; ++d) mq(0, i, h, d) = hq(q0 + i, h, d);
      for (std::int64_t j = 0; j < nk; ++j)
        for (int h = 0; h < p.Hkv; ++h)
          for (int d = 0; d < p.D; ++d) mk(0, j, h, d) = hk(k0 + j, h, d), mv(0, j, h, d) = hv(k0 + j, h, d);
      Kokkos::deep_copy(q, mq);
      Kokkos::deep_copy(k, mk);
      Kokkos::deep_copy(v, mv);
      Options seq = opt;  // a bias: the sequence's corner
      seq.bias = opt.bias.of_sequence(static_cast<int>(b), nq, nk);
      reference(TestSpace(), q, k, v, o, lse, seq);
      Kokkos::fence();
      const auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o);
      const auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
      for (std::int64_t i = 0; i < nq; ++i)
        for (int h = 0; h < p.Hq; ++h) {
          lse_ref[(q0 + i) * p.Hq + h] = hl(0, h, i);
          for (int d = 0; d < p.D; ++d) o_ref[((q0 + i) * p.Hq + h) * p.D + d] = ho(0, i, h, d);
        }
    }
    q0 += nq;
    k0 += nk;
  }
}

// The same keys in a paged cache [num_pages, page_size, Hkv, D]: sequence b's keys fill its pages
// in order, pages placed at shuffled positions (plus `spare` unused pages) in the cache.
template <class T>
struct PagedCopy {
  View4<T> k, v;
  std::vector<std::int64_t> page_indptr, page_indices, last_page_len;
  int page_size = 1;

  PagedCopy(const RaggedProblem<T>& p, int page, std::uint64_t seed, int spare = 3) : page_size(page) {
    const std::size_t B = p.kv_lens.size();
    page_indptr.assign(B + 1, 0);
    last_page_len.assign(B, 0);
    for (std::size_t b = 0; b < B; ++b) {
      const std::int64_t pages = (p.kv_lens[b] + page - 1) / page;
      page_indptr[b + 1] = page_indptr[b] + pages;
      last_page_len[b] = pages == 0 ? 0 : p.kv_lens[b] - (pages - 1) * page;
    }
    const std::int64_t used = page_indptr[B], total = used + spare;
    std::vector<std::int64_t> slots(total);
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), std::mt19937_64(seed));
    page_indices.assign(slots.begin(), slots.begin() + used);
    k = View4<T>("k_pages", total, page, p.Hkv, p.D);
    v = View4<T>("v_pages", total, page, p.Hkv, p.D);
    fill_normal(k, seed + 7);  // unused slots hold finite noise the kernels must not read
    fill_normal(v, seed + 8);
    auto mk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), k);
    auto mv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
    const auto hk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.k);
    const auto hv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.v);
    std::int64_t k0 = 0;
    for (std::size_t b = 0; b < B; ++b) {
      for (std::int64_t j = 0; j < p.kv_lens[b]; ++j) {
        const std::int64_t pg = page_indices[page_indptr[b] + j / page], slot = j % page;
        for (int h = 0; h < p.Hkv; ++h)
          for (int d = 0; d < p.D; ++d) mk(pg, slot, h, d) = hk(k0 + j, h, d), mv(pg, slot, h, d) = hv(k0 + j, h, d);
      }
      k0 += p.kv_lens[b];
    }
    Kokkos::deep_copy(k, mk);
    Kokkos::deep_copy(v, mv);
  }
};

}  // namespace test
}  // namespace kattn
