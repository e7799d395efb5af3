// Test support for ragged problems in 16-bit storage: the float64 params of a ragged problem's
// exact inputs on the host (what expect_16bit_rule reads), and the key sets that merge and cascade
// tests split a problem into or build it from.
#pragma once

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kattn/ragged.hpp"
#include "ragged_support.hpp"
#include "storage16_support.hpp"

namespace kattn {
namespace test {

// The exact inputs and outputs of p copied to the host, as params for expect_16bit_rule.
struct RaggedHost {
  using H3 = Kokkos::View<double***, Kokkos::LayoutRight, Kokkos::HostSpace>;
  using H2 = Kokkos::View<double**, Kokkos::LayoutRight, Kokkos::HostSpace>;
  H3 q, k, v, o;
  H2 lse;
  RaggedLayout<Kokkos::HostSpace> layout;

  explicit RaggedHost(const RaggedProblem<double>& p)
      : q(Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.q)),
        k(Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.k)),
        v(Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.v)),
        o(Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.o)),
        lse(Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.lse)),
        layout(make_ragged_layout<Kokkos::HostSpace>(host_index(p.q_indptr()), host_index(p.kv_indptr()))) {}
  AttentionParams<double> params() const { return ragged_params(q, k, v, o, lse, layout); }
};

// Keys [k0, k1) of every sequence of p (clamped to its length) as ragged k, v [keys, Hkv, D] in
// storage S (p's values converted), with their indptr.
template <class S>
struct KeySlice {
  View3<S> k, v;
  std::vector<std::int64_t> kv_indptr;

  KeySlice(const RaggedProblem<double>& p, std::int64_t k0, std::int64_t k1) {
    std::vector<std::int64_t> lens(p.kv_lens.size());
    for (std::size_t b = 0; b < lens.size(); ++b)
      lens[b] = std::max<std::int64_t>(0, std::min(k1, p.kv_lens[b]) - std::min(k0, p.kv_lens[b]));
    kv_indptr = indptr_of(lens);
    View3<double> kd("k_slice", kv_indptr.back(), p.Hkv, p.D), vd("v_slice", kv_indptr.back(), p.Hkv, p.D);
    auto hk = Kokkos::create_mirror_view(kd), hv = Kokkos::create_mirror_view(vd);
    const auto pk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.k);
    const auto pv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), p.v);
    std::int64_t src = 0;
    for (std::size_t b = 0; b < lens.size(); ++b) {
      for (std::int64_t j = 0; j < lens[b]; ++j)
        for (int h = 0; h < p.Hkv; ++h)
          for (int d = 0; d < p.D; ++d) {
            hk(kv_indptr[b] + j, h, d) = pk(src + k0 + j, h, d);
            hv(kv_indptr[b] + j, h, d) = pv(src + k0 + j, h, d);
          }
      src += p.kv_lens[b];
    }
    Kokkos::deep_copy(kd, hk);
    Kokkos::deep_copy(vd, hv);
    k = View3<S>("k_slice", kd.extent(0), p.Hkv, p.D);
    v = View3<S>("v_slice", vd.extent(0), p.Hkv, p.D);
    convert_into(kd, k);
    convert_into(vd, v);
  }
};

// The flat problem of a cascade: each request's keys are the prefix (kp, vp [Np, Hkv, D]) followed
// by its own (suffix's), its queries suffix's.
inline RaggedProblem<double> with_prefix(const RaggedProblem<double>& suffix, const View3<double>& kp,
                                         const View3<double>& vp) {
  const std::int64_t prefix = kp.extent(0);
  std::vector<std::int64_t> flat_lens(suffix.kv_lens.size());
  for (std::size_t b = 0; b < flat_lens.size(); ++b) flat_lens[b] = prefix + suffix.kv_lens[b];
  RaggedProblem<double> flat(suffix.q_lens, flat_lens, suffix.Hq, suffix.Hkv, suffix.D, 0);
  Kokkos::deep_copy(flat.q, suffix.q);
  auto fk = Kokkos::create_mirror_view(flat.k), fv = Kokkos::create_mirror_view(flat.v);
  const auto sk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), suffix.k);
  const auto sv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), suffix.v);
  const auto pk = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), kp);
  const auto pv = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), vp);
  std::int64_t f = 0, s = 0;
  for (std::size_t b = 0; b < flat_lens.size(); ++b) {
    for (std::int64_t j = 0; j < flat_lens[b]; ++j)
      for (int h = 0; h < suffix.Hkv; ++h)
        for (int d = 0; d < suffix.D; ++d) {
          fk(f + j, h, d) = j < prefix ? pk(j, h, d) : sk(s + j - prefix, h, d);
          fv(f + j, h, d) = j < prefix ? pv(j, h, d) : sv(s + j - prefix, h, d);
        }
    f += flat_lens[b];
    s += suffix.kv_lens[b];
  }
  Kokkos::deep_copy(flat.k, fk);
  Kokkos::deep_copy(flat.v, fv);
  return flat;
}

}  // namespace test
}  // namespace kattn
