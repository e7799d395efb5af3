// Test support for the backward pass: a problem with dO and poisoned gradients, its forward
// (o, lse), the float64 textbook gradients, and error checks.
#pragma once

#include <Kokkos_Core.hpp>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kattn/backward.hpp"
#include "kattn/attention.hpp"
#include "kattn/reference_backward.hpp"
#include "support.hpp"

namespace kattn {
namespace test {

template <class T>
struct GradProblem {
  Shape shape;
  View4<T> q, k, v, o, dout, dq, dk, dv;
  View3<T> lse;

  GradProblem(const Shape& s, std::uint64_t seed) : shape(s) {
    q = View4<T>("q", s.B, s.Nq, s.Hq, s.D);
    k = View4<T>("k", s.B, s.Nk, s.Hkv, s.D);
    v = View4<T>("v", s.B, s.Nk, s.Hkv, s.D);
    o = View4<T>("o", s.B, s.Nq, s.Hq, s.D);
    dout = View4<T>("do", s.B, s.Nq, s.Hq, s.D);
    dq = View4<T>("dq", s.B, s.Nq, s.Hq, s.D);
    dk = View4<T>("dk", s.B, s.Nk, s.Hkv, s.D);
    dv = View4<T>("dv", s.B, s.Nk, s.Hkv, s.D);
    lse = View3<T>("lse", s.B, s.Hq, s.Nq);
    fill_normal(q, seed);
    fill_normal(k, seed + 1);
    fill_normal(v, seed + 2);
    fill_normal(dout, seed + 3);
    poison(o);
    poison(lse);
    poison_gradients();
  }
  void poison_gradients() const {
    poison(dq);
    poison(dk);
    poison(dv);
  }
  // o and lse by the tiled forward.
  void forward(const Options& opt) const {
    kattn::attention(TestSpace(), q, kattn::kv::dense(k, v), o, lse, one_split(opt));
    Kokkos::fence();
  }
  BackwardInfo backward(const Options& opt, const BackwardOptions& bopt = {}) const {
    return kattn::attention_backward(TestSpace(), q, kattn::kv::dense(k, v), o, lse, dout, dq, dk, dv, opt, bopt);
  }
};

template <class From, class To>
void copy_converted(const From& from, const To& to) {
  auto hf = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), from);
  auto ht = Kokkos::create_mirror_view(to);
  for (std::size_t i = 0; i < hf.span(); ++i)
    ht.data()[i] = static_cast<typename To::non_const_value_type>(hf.data()[i]);
  Kokkos::deep_copy(to, ht);
}

// The textbook gradients in double for the same (exactly representable) inputs.
template <class T>
GradProblem<double> textbook_gradients(const GradProblem<T>& p, const Options& opt) {
  GradProblem<double> d(p.shape, 0);
  copy_converted(p.q, d.q);
  copy_converted(p.k, d.k);
  copy_converted(p.v, d.v);
  copy_converted(p.dout, d.dout);
  reference_backward(TestSpace(), d.q, d.k, d.v, d.dout, d.dq, d.dk, d.dv, opt);
  return d;
}

// L = sum(o * dout) of the problem's o as it stands: the loss whose gradients the backward gives.
inline double output_loss(const GradProblem<double>& p) {
  const std::vector<double> o = to_host(p.o), g = to_host(p.dout);
  double l = 0;
  for (std::size_t i = 0; i < o.size(); ++i) l += o[i] * g[i];
  return l;
}

// L with o by the float64 textbook forward.
inline double textbook_loss(const GradProblem<double>& p, const Options& opt) {
  reference(TestSpace(), p.q, p.k, p.v, p.o, p.lse, opt);
  Kokkos::fence();
  return output_loss(p);
}

// The central difference (L(x + h) - L(x - h)) / 2h of textbook_loss in element e of x, one of
// p's inputs; hx is x's host mirror, its element e restored (and copied back) afterwards.
template <class HostView>
double central_difference(const GradProblem<double>& p, const Options& opt, const View4<double>& x, const HostView& hx,
                          std::size_t e, double h) {
  const double x0 = hx.data()[e];
  hx.data()[e] = x0 + h;
  Kokkos::deep_copy(x, hx);
  const double up = textbook_loss(p, opt);
  hx.data()[e] = x0 - h;
  Kokkos::deep_copy(x, hx);
  const double down = textbook_loss(p, opt);
  hx.data()[e] = x0;
  Kokkos::deep_copy(x, hx);
  return (up - down) / (2 * h);
}

// dq, dk, dv against the reference: max abs error in double, relative in float.
template <class T>
void expect_gradients_close(const GradProblem<T>& out, const GradProblem<double>& ref, double tol,
                            const std::string& what) {
  const char* names[3] = {"dq", "dk", "dv"};
  const std::vector<double> got[3] = {to_host(out.dq), to_host(out.dk), to_host(out.dv)};
  const std::vector<double> want[3] = {to_host(ref.dq), to_host(ref.dk), to_host(ref.dv)};
  for (int i = 0; i < 3; ++i) {
    const Errors e = compare(got[i], want[i]);
    EXPECT_FALSE(e.nan_mismatch) << what << ": " << names[i] << " has NaN (or unwritten elements) the reference does not";
    if (std::is_same<T, double>::value)
      EXPECT_LE(e.max_abs, tol) << what << ": " << names[i] << " max abs error";
    else
      EXPECT_LE(e.rel, tol) << what << ": " << names[i] << " relative error";
  }
}

template <class View>
bool bitwise_equal(const View& a, const View& b) {
  const std::vector<double> x = to_host(a), y = to_host(b);
  if (x.size() != y.size()) return false;
  return std::memcmp(x.data(), y.data(), x.size() * sizeof(double)) == 0;
}

// Double: the bound against the textbook backward.
constexpr double kGradDoubleTol = 1e-11;
// Float: relative to the float64 textbook gradients. dS = P (dP - D) subtracts two O(1) sums of
// float products, so its relative error is a few times the forward's (measured up to 3.4e-6 over
// the shapes below, D up to 256, Nk up to 1000).
constexpr double kGradFloatTol = 2e-5;

template <class T>
constexpr double grad_tolerance() {
  return std::is_same<T, double>::value ? kGradDoubleTol : kGradFloatTol;
}

}  // namespace test
}  // namespace kattn
