// The forward's head-major copy of interleaved K and V (detail/head_major_kv.hpp): made for long
// queries on host backends only, and invisible in the results: interleaved K and V give the bits
// that the same values given head-major (which the forward reads as they are) give, for every
// mask, split count, GQA ratio and storage type (float, bf16), and both agree with the float64
// reference.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/detail/head_major_kv.hpp"
#include "kattn/detail/shapes.hpp"
#include "storage16_support.hpp"
#include "support.hpp"

namespace kattn {
namespace test {
namespace {

template <class T>
using Strided4 = Kokkos::View<T****, Kokkos::LayoutStride, TestMemory>;

// The values of a [B, N, H, D] view held head-major ([B, H, N, D] in memory), seen as [B, N, H, D].
template <class T>
struct HeadMajor {
  Kokkos::View<T*, TestMemory> storage;
  Strided4<T> view;  // unmanaged, into storage
  explicit HeadMajor(const View4<T>& v) {
    const std::size_t B = v.extent(0), N = v.extent(1), H = v.extent(2), D = v.extent(3);
    storage = Kokkos::View<T*, TestMemory>("head_major", B * H * N * D);
    view = Strided4<T>(storage.data(), Kokkos::LayoutStride(B, H * N * D, N, D, H, N * D, D, 1));
    Kokkos::deep_copy(view, v);
  }
};

template <class V>
std::string bytes_of(const V& v) {
  const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::string(reinterpret_cast<const char*>(h.data()), h.span() * sizeof(typename V::value_type));
}

std::vector<Options> variants() {
  std::vector<Options> v(5);
  v[1].causal = true;
  v[2].window_left = 300, v[2].window_right = 40, v[2].softcap = 3.0;
  v[3].splits = 3;
  v[4].causal = true, v[4].split_chunk = 700;
  return v;
}

template <class S, class OView, class LseView>
void expect_same_bits(const View4<S>& q, const View4<S>& k, const View4<S>& v, const OView& o, const LseView& lse,
                      const Options& opt, const std::string& what) {
  SCOPED_TRACE(what);
  const HeadMajor<S> hm_k(k), hm_v(v);
  const Strided4<S>& hk = hm_k.view;
  const Strided4<S>& hv = hm_v.view;
  const bool copies = std::is_same_v<TestMemory, Kokkos::HostSpace>;
  EXPECT_EQ(detail::wants_head_major<TestSpace>(dense_params(q, k, v, o, lse)), copies)
      << "interleaved K and V are " << (copies ? "not " : "") << "copied head-major";
  EXPECT_FALSE(detail::wants_head_major<TestSpace>(dense_params(q, hk, hv, o, lse))) << "head-major K and V copied";
  attention(TestSpace(), q, kv::dense(k, v), o, lse, opt);
  Kokkos::fence();
  const std::string interleaved = bytes_of(o) + bytes_of(lse);
  poison(o);
  if (lse.size() > 0) poison(lse);
  attention(TestSpace(), q, kv::dense(hk, hv), o, lse, opt);
  Kokkos::fence();
  EXPECT_TRUE(bytes_of(o) + bytes_of(lse) == interleaved) << "o or lse differ in their bits";
}

template <class T>
void check(const Shape& s, const Options& opt) {
  const std::uint64_t seed = fresh_seed();
  const std::string what = describe(s, opt) + " seed=" + std::to_string(seed);
  Problem<T> p(s, seed);
  expect_same_bits(p.q, p.k, p.v, p.o, p.lse, opt, what);
  expect_close(p, reference_of(p, opt), tolerance<T>(), what);
}

TEST(HeadMajorKV, InterleavedHeadsGiveTheBitsOfHeadMajorOnes) {
  for (const Options& opt : variants()) {
    check<float>({1, 2100, 2100, 4, 2, 16}, opt);  // 4200 query rows per KV head
    check<float>({1, 4096, 777, 3, 3, 8}, opt);
    check<float>({1, 1024, 1500, 8, 2, 32}, opt);  // GQA 4:1: 4096 rows
  }
}

TEST(HeadMajorKV, SixteenBitStorage) {
  const Shape s{1, 2048, 2048, 4, 2, 16};
  for (const Options& opt : variants()) {
    const Problem16<bf16> p(s, fresh_seed());
    expect_same_bits(p.q, p.k, p.v, p.o, p.lse, opt, "bf16 " + describe(s, opt));
  }
}

TEST(HeadMajorKV, OnlyWhereTheCopyPays) {
  const auto wants = [](const Shape& s) {
    const View4<float> q("q", s.B, s.Nq, s.Hq, s.D), k("k", s.B, s.Nk, s.Hkv, s.D), v("v", s.B, s.Nk, s.Hkv, s.D),
        o("o", s.B, s.Nq, s.Hq, s.D);
    return detail::wants_head_major<Kokkos::DefaultHostExecutionSpace>(dense_params(q, k, v, o, View3<float>()));
  };
  EXPECT_TRUE(wants({1, 4096, 64, 2, 2, 8}));
  EXPECT_TRUE(wants({2, 1024, 64, 8, 2, 8})) << "GQA 4:1, 4096 query rows per KV head";
  EXPECT_FALSE(wants({1, 4095, 8192, 2, 2, 8})) << "short queries: the copy would not pay";
  EXPECT_FALSE(wants({1, 1, 65536, 64, 8, 8})) << "decode: the keys are read once";
  EXPECT_FALSE(wants({4, 4096, 4096, 8, 1, 8})) << "one KV head: its rows are already adjacent";
  EXPECT_FALSE(wants({1, 4096, 0, 2, 2, 8})) << "no keys";
  const View4<double> q("q", 1, 4096, 2, 8), k("k", 1, 64, 2, 8), o("o", 1, 4096, 2, 8);
  EXPECT_FALSE(detail::wants_head_major<Kokkos::DefaultHostExecutionSpace>(dense_params(q, k, k, o, View3<double>())))
      << "double: the copy does not pay";
}

}  // namespace
}  // namespace test
}  // namespace kattn
