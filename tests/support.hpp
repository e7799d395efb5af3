// Test support: random problems, poisoned outputs, the float64 reference, error measures.
// Works on any backend: data moves through host mirrors.
#pragma once

#include <Kokkos_Core.hpp>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kattn/block_mask.hpp"
#include "kattn/core/storage.hpp"
#include "kattn/errors.hpp"
#include "kattn/options.hpp"
#include "kattn/reference.hpp"

// The execution space the tests run on. tests/CMakeLists.txt builds these tests once per enabled
// Kokkos backend: the default space's build, and one per other host backend with
// KATTN_TEST_SPACE naming it (its tests prefixed with the backend's name).
#ifndef KATTN_TEST_SPACE
#define KATTN_TEST_SPACE Kokkos::DefaultExecutionSpace
#endif

namespace kattn {
namespace test {

using TestSpace = KATTN_TEST_SPACE;
using TestMemory = TestSpace::memory_space;

template <class T>
using View5 = Kokkos::View<T*****, Kokkos::LayoutRight, TestMemory>;  // packed [B, N, 3, H, D]
template <class T>
using View4 = Kokkos::View<T****, Kokkos::LayoutRight, TestMemory>;
template <class T>
using View3 = Kokkos::View<T***, Kokkos::LayoutRight, TestMemory>;
template <class T>
using View2 = Kokkos::View<T**, Kokkos::LayoutRight, TestMemory>;

struct Shape {
  int B = 1, Nq = 1, Nk = 1, Hq = 1, Hkv = 1, D = 1;
};

inline std::string describe(const Shape& s, const Options& o) {
  return "B=" + std::to_string(s.B) + " Nq=" + std::to_string(s.Nq) + " Nk=" + std::to_string(s.Nk) +
         " Hq=" + std::to_string(s.Hq) + " Hkv=" + std::to_string(s.Hkv) + " D=" + std::to_string(s.D) +
         (o.causal ? " causal" : "") + " window=" + std::to_string(o.window_left) + "," +
         std::to_string(o.window_right) + " softcap=" + std::to_string(o.softcap) +
         " scale=" + std::to_string(o.scale) + " shift=" + std::to_string(o.diagonal_shift) + " block_q=" + std::to_string(o.block_q) +
         " block_k=" + std::to_string(o.block_k) + " splits=" + std::to_string(o.splits);
}

// The options every kernel is checked under: none, causal, windows (both sides, left only, right
// only), causal with a window, softcap, a given scale, the three together, and diagonal shifts
// (how an MPI rank sees a shard of keys to the left or right of its queries).
inline std::vector<Options> option_variants() {
  std::vector<Options> v(11);
  v[1].causal = true;
  v[2].window_left = 5, v[2].window_right = 3;
  v[3].window_left = 0, v[3].window_right = -1;
  v[4].window_left = -1, v[4].window_right = 2;
  v[5].causal = true, v[5].window_left = 7;
  v[6].softcap = 2.5;
  v[7].scale = 0.37;
  v[8].causal = true, v[8].softcap = 30.0, v[8].scale = -0.2;
  v[9].causal = true, v[9].diagonal_shift = -3;  // a shard further left than its keys
  v[10].window_left = 2, v[10].window_right = 4, v[10].diagonal_shift = 6;
  return v;
}

// The options with one split (the tiled forward, no merge of partials).
inline Options one_split(Options o) {
  o.splits = 1;
  return o;
}
// The options with a block mask (which must outlive the call).
inline Options with_mask(Options o, const BlockMask& mask) {
  o.block_mask = &mask;
  return o;
}

// A fresh seed for every call, so every run draws new inputs; printed on failure. KATTN_TEST_SEED
// set replays one: every call returns it (run the failing test alone with --gtest_filter).
inline std::uint64_t fresh_seed() {
  static const char* replay = std::getenv("KATTN_TEST_SEED");
  if (replay && *replay) return std::strtoull(replay, nullptr, 10);
  static std::uint64_t counter = std::random_device{}();
  return ++counter * 0x9E3779B97F4A7C15ull;
}

template <class View>
void fill_normal(const View& v, std::uint64_t seed) {
  auto h = Kokkos::create_mirror_view(v);
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  auto* p = h.data();
  for (std::size_t i = 0; i < h.span(); ++i) p[i] = static_cast<typename View::non_const_value_type>(dist(gen));
  Kokkos::deep_copy(v, h);
}

// Any storage type (float, double, bf16, fp16).
template <class View>
void poison(const View& v) {
  using S = typename View::non_const_value_type;
  Kokkos::deep_copy(v, narrow<S>(std::numeric_limits<float>::quiet_NaN()));
}

template <class T>
struct Problem {
  Shape shape;
  View4<T> q, k, v, o;
  View3<T> lse;

  explicit Problem(const Shape& s, std::uint64_t seed) : shape(s) {
    q = View4<T>("q", s.B, s.Nq, s.Hq, s.D);
    k = View4<T>("k", s.B, s.Nk, s.Hkv, s.D);
    v = View4<T>("v", s.B, s.Nk, s.Hkv, s.D);
    o = View4<T>("o", s.B, s.Nq, s.Hq, s.D);
    lse = View3<T>("lse", s.B, s.Hq, s.Nq);
    fill_normal(q, seed);
    fill_normal(k, seed + 1);
    fill_normal(v, seed + 2);
    poison(o);
    poison(lse);
  }
};

// Every element of a view (any storage type) as doubles, in memory order.
template <class View>
std::vector<double> to_host(const View& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  std::vector<double> out(h.span());
  for (std::size_t i = 0; i < h.span(); ++i) out[i] = static_cast<double>(widen(h.data()[i]));
  return out;
}

// The same problem's inputs in double (values exactly those of T), with fresh outputs.
template <class T>
Problem<double> as_double(const Problem<T>& p) {
  Problem<double> d(p.shape, 0);
  const auto copy = [](const auto& from, const auto& to) {
    auto hf = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), from);
    auto ht = Kokkos::create_mirror_view(to);
    for (std::size_t i = 0; i < hf.span(); ++i) ht.data()[i] = static_cast<double>(hf.data()[i]);
    Kokkos::deep_copy(to, ht);
  };
  copy(p.q, d.q);
  copy(p.k, d.k);
  copy(p.v, d.v);
  return d;
}

// The float64 textbook result for a problem's inputs.
template <class T>
Problem<double> reference_of(const Problem<T>& p, const Options& opt) {
  Problem<double> d = as_double(p);
  reference(TestSpace(), d.q, d.k, d.v, d.o, d.lse, opt);
  Kokkos::fence();
  return d;
}

struct Errors {
  double max_abs = 0;
  double rel = 0;
  bool nan_mismatch = false;  // NaN (or an unwritten, poisoned element) where the reference has none
};

// max |a - b| and ||a - b|| / ||b||; equal infinities (lse of rows that see no key) match.
inline Errors compare(const std::vector<double>& a, const std::vector<double>& b) {
  Errors e;
  double d2 = 0, b2 = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) {
      e.nan_mismatch = true;
      continue;
    }
    if (std::isnan(a[i]) || (std::isinf(b[i]) && a[i] == b[i])) continue;
    const double d = std::abs(a[i] - b[i]);
    e.max_abs = std::max(e.max_abs, d);
    d2 += d * d;
    b2 += b[i] * b[i];
  }
  e.rel = b2 > 0 ? std::sqrt(d2 / b2) : std::sqrt(d2);
  return e;
}

// Double precision: every algorithm agrees with the textbook reference to 1e-12 (DESIGN.md).
constexpr double kDoubleTol = 1e-12;
// Float: ||o - ref|| / ||ref|| against the float64 reference. Each score carries a rounding error
// of about eps * sqrt(D) relative to its size, the online rescaling adds a few eps per tile and
// the exp2 polynomial 1.2 ulp; over unit-normal inputs that is ~1e-6 (measured 3e-7 .. 1e-6 at
// D = 256, Nk = 1000). 1e-5 (~170 eps) leaves a margin yet fails any algorithmic slip (a wrong
// mask or a lost tile moves the output by 1e-2 or more).
constexpr double kFloatTol = 1e-5;

template <class T>
constexpr double tolerance() {
  return std::is_same<T, double>::value ? kDoubleTol : kFloatTol;
}

// The errors of o (eo) and lse (el) in storage T within tol: no NaN the reference does not have,
// max abs error in double; in float o's relative error and lse's max abs error within 10 tol.
template <class T>
void expect_output_errors_within(const Errors& eo, const Errors& el, double tol, const std::string& what) {
  EXPECT_FALSE(eo.nan_mismatch) << what << ": o has NaN (or unwritten elements) the reference does not";
  EXPECT_FALSE(el.nan_mismatch) << what << ": lse has NaN (or unwritten elements) the reference does not";
  if (std::is_same<T, double>::value) {
    EXPECT_LE(eo.max_abs, tol) << what << ": o max abs error";
    EXPECT_LE(el.max_abs, tol) << what << ": lse max abs error";
  } else {
    EXPECT_LE(eo.rel, tol) << what << ": o relative error";
    EXPECT_LE(el.max_abs, tol * 10) << what << ": lse max abs error";
  }
}

// o and lse of any layout (views of any rank) against the reference's, flattened in the same
// order (expect_output_errors_within).
template <class OView, class LseView>
void expect_outputs_close(const OView& o, const LseView& lse, const std::vector<double>& o_ref,
                          const std::vector<double>& lse_ref, const std::string& what,
                          double tol = tolerance<typename OView::non_const_value_type>()) {
  expect_output_errors_within<typename OView::non_const_value_type>(compare(to_host(o), o_ref),
                                                                     compare(to_host(lse), lse_ref), tol, what);
}

// Asserts o and lse of `out` against the reference's.
template <class T>
void expect_close(const Problem<T>& out, const Problem<double>& ref, double tol, const std::string& what) {
  expect_outputs_close(out.o, out.lse, to_host(ref.o), to_host(ref.lse), what, tol);
}

// Runs f, expects a kattn::Error whose message contains every fragment.
template <class F>
void expect_error(F&& f, std::initializer_list<const char*> fragments) {
  try {
    f();
    ADD_FAILURE() << "expected kattn::Error mentioning " << *fragments.begin();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const char* frag : fragments) EXPECT_NE(msg.find(frag), std::string::npos) << "message: " << msg;
  }
}

}  // namespace test
}  // namespace kattn
