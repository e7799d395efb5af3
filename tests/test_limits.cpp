// Limits of scale (README, "Hardening"): element offsets past 2^31 (every index is 64-bit), and
// workspaces checked against the memory space before they are allocated. The offset tests map
// host memory (mmap), so they run on a host execution space: the tests' own where it is one (a
// host backend's build), else the default host space.
#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "backward_support.hpp"
#include "kattn/attention.hpp"
#include "kattn/memory.hpp"
#include "kattn/paged.hpp"
#include "kattn/reference.hpp"
#include "support.hpp"

namespace kattn {
namespace test {
namespace {

using Host = std::conditional_t<Kokkos::SpaceAccessibility<TestSpace, Kokkos::HostSpace>::accessible, TestSpace,
                                Kokkos::DefaultHostExecutionSpace>;
template <class T>
using HostView4 = Kokkos::View<T****, Kokkos::LayoutRight, Kokkos::HostSpace>;
template <class T>
using HostView3 = Kokkos::View<T***, Kokkos::LayoutRight, Kokkos::HostSpace>;

// A large virtual reservation of which only the touched pages take memory (MAP_NORESERVE):
// views with strides past 2^31 elements over a few KiB of real data.
struct SparseMapping {
  void* base = nullptr;
  std::size_t bytes = 0;
  explicit SparseMapping(std::size_t n) : bytes(n) {
    base = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) base = nullptr;
  }
  ~SparseMapping() {
    if (base) munmap(base, bytes);
  }
  float* at(std::int64_t element) const { return static_cast<float*>(base) + element; }
};

using Strided4 = Kokkos::View<float****, Kokkos::LayoutStride, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;
using Strided3 = Kokkos::View<float***, Kokkos::LayoutStride, Kokkos::HostSpace, Kokkos::MemoryUnmanaged>;

constexpr std::int64_t kHuge = (std::int64_t(1) << 31) + 4096;  // a batch (or page) stride past 2^31 elements

// [n0, n1, n2, n3] with stride kHuge on dim 0, dense below, starting `offset` elements in.
Strided4 strided4(const SparseMapping& m, std::int64_t offset, int n0, int n1, int n2, int n3) {
  return Strided4(m.at(offset), Kokkos::LayoutStride(n0, kHuge, n1, std::int64_t(n2) * n3, n2, n3, n3, 1));
}

template <class From, class To>
void copy_values(const From& from, const To& to) {
  Kokkos::parallel_for(
      Kokkos::MDRangePolicy<Host, Kokkos::Rank<4>>(
          {0, 0, 0, 0}, {from.extent(0), from.extent(1), from.extent(2), from.extent(3)}),
      [=](int a, int b, int c, int d) { to(a, b, c, d) = from(a, b, c, d); });
  Kokkos::fence();
}

// Dense forward, split-KV and backward on B = 3 sequences 2^31 + 4096 elements apart: the last
// sequence's elements sit past 2^32. Results equal those on compact copies of the same inputs.
TEST(Limits, BatchStridePast2To31Elements) {
  const Shape s{3, 19, 45, 4, 2, 8};
  SparseMapping m(std::size_t(kHuge) * s.B * sizeof(float) + (1 << 20));
  ASSERT_NE(m.base, nullptr) << "mmap of a sparse region failed";
  const std::int64_t slot = 4096;  // each array's elements of a sequence fit in one slot
  const Strided4 q = strided4(m, 0 * slot, s.B, s.Nq, s.Hq, s.D), k = strided4(m, 1 * slot, s.B, s.Nk, s.Hkv, s.D),
                 v = strided4(m, 2 * slot, s.B, s.Nk, s.Hkv, s.D), o = strided4(m, 3 * slot, s.B, s.Nq, s.Hq, s.D),
                 dout = strided4(m, 4 * slot, s.B, s.Nq, s.Hq, s.D), dq = strided4(m, 5 * slot, s.B, s.Nq, s.Hq, s.D),
                 dk = strided4(m, 6 * slot, s.B, s.Nk, s.Hkv, s.D), dv = strided4(m, 7 * slot, s.B, s.Nk, s.Hkv, s.D);
  const Strided3 lse(m.at(8 * slot), Kokkos::LayoutStride(s.B, kHuge, s.Hq, s.Nq, s.Nq, 1));
  ASSERT_GT(&q(2, 0, 0, 0) - &q(0, 0, 0, 0), std::int64_t(1) << 32);

  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE("seed=" + std::to_string(seed));
  // Compact copies of the same inputs.
  const HostView4<float> cq("cq", s.B, s.Nq, s.Hq, s.D), ck("ck", s.B, s.Nk, s.Hkv, s.D),
      cv("cv", s.B, s.Nk, s.Hkv, s.D), co("co", s.B, s.Nq, s.Hq, s.D), cdout("cdo", s.B, s.Nq, s.Hq, s.D),
      cdq("cdq", s.B, s.Nq, s.Hq, s.D), cdk("cdk", s.B, s.Nk, s.Hkv, s.D), cdv("cdv", s.B, s.Nk, s.Hkv, s.D);
  const HostView3<float> clse("clse", s.B, s.Hq, s.Nq);
  fill_normal(cq, seed);
  fill_normal(ck, seed + 1);
  fill_normal(cv, seed + 2);
  fill_normal(cdout, seed + 3);
  copy_values(cq, q);
  copy_values(ck, k);
  copy_values(cv, v);
  copy_values(cdout, dout);
  for (int splits : {0, 3}) {
    Options opt;
    opt.causal = true;
    opt.splits = splits;
    if (splits == 0) {
      attention(Host(), q, kv::dense(k, v), o, lse, one_split(opt));
      attention(Host(), cq, kv::dense(ck, cv), co, clse, one_split(opt));
    } else {
      attention(Host(), q, kv::dense(k, v), o, lse, opt);
      attention(Host(), cq, kv::dense(ck, cv), co, clse, opt);
    }
    Kokkos::fence();
    HostView4<float> o_copy("o_copy", s.B, s.Nq, s.Hq, s.D);
    copy_values(o, o_copy);
    EXPECT_EQ(to_host(o_copy), to_host(co)) << "splits=" << splits;
    for (int b = 0; b < s.B; ++b)
      for (int h = 0; h < s.Hq; ++h)
        for (int i = 0; i < s.Nq; ++i) ASSERT_EQ(lse(b, h, i), clse(b, h, i));
  }
  attention(Host(), q, kv::dense(k, v), o, lse, one_split(Options{}));
  attention_backward(Host(), q, kv::dense(k, v), o, lse, dout, dq, dk, dv);
  attention(Host(), cq, kv::dense(ck, cv), co, clse, one_split(Options{}));
  attention_backward(Host(), cq, kv::dense(ck, cv), co, clse, cdout, cdq, cdk, cdv);
  Kokkos::fence();
  HostView4<float> dq_copy("dq_copy", s.B, s.Nq, s.Hq, s.D), dv_copy("dv_copy", s.B, s.Nk, s.Hkv, s.D);
  copy_values(dq, dq_copy);
  copy_values(dv, dv_copy);
  EXPECT_EQ(to_host(dq_copy), to_host(cdq));
  EXPECT_EQ(to_host(dv_copy), to_host(cdv));
}

// A paged cache whose pages are 2^31 + 4096 elements apart (page * page_size * Hkv * D past 2^32),
// against the same pages packed densely.
TEST(Limits, PageOffsetsPast2To31Elements) {
  const int pages = 3, page_size = 4, Hkv = 1, Hq = 2, D = 8;
  SparseMapping m(std::size_t(kHuge) * pages * sizeof(float) + (1 << 20));
  ASSERT_NE(m.base, nullptr);
  const Strided4 k = strided4(m, 0, pages, page_size, Hkv, D), v = strided4(m, 4096, pages, page_size, Hkv, D);
  HostView4<float> kc("kc", pages, page_size, Hkv, D), vc("vc", pages, page_size, Hkv, D);
  fill_normal(kc, fresh_seed());
  fill_normal(vc, fresh_seed());
  copy_values(kc, k);
  copy_values(vc, v);
  Kokkos::View<std::int64_t*, Kokkos::HostSpace> q_indptr("qi", 3), page_indptr("pi", 3), indices("idx", 4),
      last("last", 2);
  const std::int64_t qi[] = {0, 1, 3}, pi[] = {0, 3, 4}, idx[] = {2, 0, 1, 2}, ln[] = {3, 2};
  for (int i = 0; i < 3; ++i) q_indptr(i) = qi[i], page_indptr(i) = pi[i];
  for (int i = 0; i < 4; ++i) indices(i) = idx[i];
  for (int i = 0; i < 2; ++i) last(i) = ln[i];
  const auto layout = make_paged_layout<Kokkos::HostSpace>(q_indptr, page_indptr, indices, last, page_size);
  HostView3<float> q("q", 3, Hq, D), o("o", 3, Hq, D), oc("oc", 3, Hq, D);
  Kokkos::View<float**, Kokkos::LayoutRight, Kokkos::HostSpace> lse("lse", 3, Hq), lsec("lsec", 3, Hq);
  fill_normal(q, fresh_seed());
  Options opt;
  opt.splits = 2;
  attention(Host(), q, kv::paged(k, v, layout), o, lse, opt);
  attention(Host(), q, kv::paged(kc, vc, layout), oc, lsec, opt);
  Kokkos::fence();
  EXPECT_EQ(to_host(o), to_host(oc));
  EXPECT_EQ(to_host(lse), to_host(lsec));
}

// Sets KATTN_MEMORY_LIMIT for one scope.
struct MemoryLimit {
  explicit MemoryLimit(const char* bytes) { setenv("KATTN_MEMORY_LIMIT", bytes, 1); }
  ~MemoryLimit() { unsetenv("KATTN_MEMORY_LIMIT"); }
};

template <class F>
std::string error_of(const F& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The textbook reference's S for 1M x 1M keys (4 TiB) is refused before anything is allocated,
// with the size and the way out; q and k are only 4 MiB each.
TEST(Limits, ReferenceScoresLargerThanMemoryAreRefused) {
  const int n = 1 << 20;
  View4<float> q("q", 1, n, 1, 1), k("k", 1, n, 1, 1), v("v", 1, n, 1, 1), o("o", 1, n, 1, 1);
  View3<float> lse("lse", 1, 1, n);
  const std::string msg = error_of([&] { reference(TestSpace(), q, k, v, o, lse); });
  EXPECT_NE(msg.find("kattn::reference: the score matrix S (P in place) needs 4.0 TiB (1 sequences x 1 heads x 1048576 "
                     "queries x 1048576 keys x 4 bytes), more than the"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("use the tiled algorithm (kattn::attention"), std::string::npos) << msg;
}

// Sizes past 2^64 (extents of 2^32 - 1 over zero strides) are refused too, not wrapped. (Kokkos
// 3.4 keeps LayoutStride extents in 32 bits: 2^32 would read as 0.)
TEST(Limits, WorkspaceSizesThatOverflow64BitsAreRefused) {
  float x[4] = {1, 2, 3, 4}, out[4] = {};
  const std::int64_t n = (std::int64_t(1) << 32) - 1;
  const Strided4 q(x, Kokkos::LayoutStride(1, 0, n, 0, 1, 0, 4, 1)), o(out, Kokkos::LayoutStride(1, 0, n, 0, 1, 0, 4, 1));
  const std::string msg = error_of([&] { reference(Host(), q, q, q, o, Kokkos::View<float***, Kokkos::HostSpace>()); });
  EXPECT_NE(msg.find("kattn::reference: the score matrix S (P in place): its size (1 sequences x 1 heads x 4294967295 "
                     "queries x 4294967295 keys x 4 bytes) overflows 64 bits"),
            std::string::npos)
      << msg;
}

// The public check (kattn/memory.hpp) for a program's own allocations: the same message as kattn's.
TEST(Limits, PublicMemoryCheckRefusesWhatDoesNotFit) {
  const MemoryLimit limit("1000000");
  EXPECT_NO_THROW(check_memory<Kokkos::HostSpace>(999999, "inputs", "q", "use smaller shapes"));
  const std::string msg =
      error_of([] { check_memory<Kokkos::HostSpace>(2000000, "--random: the inputs", "q, k and v", "use less"); });
  EXPECT_EQ(msg.rfind("kattn: --random: the inputs needs 1.9 MiB (q, k and v), more than the 976.6 KiB allowed "
                      "(KATTN_MEMORY_LIMIT) in ",
                      0),
            0u)
      << msg;
  EXPECT_EQ(msg.substr(msg.size() - 10), "; use less") << msg;
  EXPECT_NE(error_of([] { check_memory<Kokkos::HostSpace>(UINT64_MAX, "x", "a x b", "less"); }).find("overflows 64 bits"),
            std::string::npos);
}

TEST(Limits, SplitWorkspaceOverTheLimitNamesItsSizeAndTheWayOut) {
  const Shape s{2, 64, 300, 4, 2, 32};
  Problem<float> p(s, fresh_seed());
  Options opt;
  opt.splits = 50;  // 50 x 128 rows x 4 heads x 33 values x 4 bytes = 3.4 MB
  {
    MemoryLimit limit("1000000");
    const std::string msg =
        error_of([&] { attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt); });
    EXPECT_NE(msg.find("kattn::attention: the split-KV workspace needs 3.2 MiB (50 splits x 128 query rows x 4 heads x (32 "
                       "+ 1) values of 4 bytes), more than the 976.6 KiB allowed (KATTN_MEMORY_LIMIT) in"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("use fewer splits"), std::string::npos) << msg;
    opt.splits = 10;  // 0.7 MB fits
    EXPECT_NO_THROW(attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt));
  }
  Kokkos::fence();
}

TEST(Limits, BackwardAndReferenceWorkspacesOverTheLimitAreRefused) {
  const Shape s{1, 300, 300, 2, 1, 16};
  GradProblem<float> p(s, fresh_seed());
  p.forward(Options{});
  MemoryLimit limit("100000");
  BackwardOptions bopt;
  bopt.dq = DqStrategy::key_chunks;
  bopt.dq_chunks = 8;  // 7 partial chunks x 600 rows x 16 dims x 4 bytes = 262 KiB of dQ partials
  const std::string bw = error_of([&] { p.backward(Options{}, bopt); });
  EXPECT_NE(bw.find("kattn::backward: the workspace (D, lse and dQ partials) needs"), std::string::npos) << bw;
  EXPECT_NE(bw.find("use the query-pass or atomic dQ strategy"), std::string::npos) << bw;
  const std::string ref = error_of([&] {
    reference_backward(TestSpace(), p.q, p.k, p.v, p.dout, p.dq, p.dk, p.dv);
  });
  EXPECT_NE(ref.find("kattn::reference_backward: P and dS needs 1.4 MiB (2 x 1 sequences x 2 heads x 300 queries x 300 "
                     "keys x 4 bytes), more than the 97.7 KiB allowed (KATTN_MEMORY_LIMIT)"),
            std::string::npos)
      << ref;
}

}  // namespace
}  // namespace test
}  // namespace kattn
