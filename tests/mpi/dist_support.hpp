// Support for the MPI tests: one seed for all ranks, shards of global arrays as a layout says,
// comparisons of a rank's shard with the matching rows of a global result.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kattn/distributed/layout.hpp"
#include "kattn/distributed/options.hpp"
#include "kattn/distributed/traffic.hpp"
#include "support.hpp"

namespace kattn {
namespace test {

// The MPI layer's option and layout types, by the names every MPI test uses.
using dist::DistOptions;
using dist::SequenceLayout;
using dist::Sharding;

inline int rank_of(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}
inline int size_of(MPI_Comm comm) {
  int n = 1;
  MPI_Comm_size(comm, &n);
  return n;
}

// d with the scheme set: the DistOptions of a call of that scheme.
inline dist::DistOptions with_scheme(dist::Scheme scheme, dist::DistOptions d = {}) {
  d.scheme = scheme;
  return d;
}

// Every grid shape rows x cols = P, rows ascending.
inline std::vector<DistOptions::GridShape> grid_shapes(int P) {
  std::vector<DistOptions::GridShape> out;
  for (int r = 1; r <= P; ++r)
    if (P % r == 0) out.push_back({r, P / r});
  return out;
}

// "rows x cols sharding[ deterministic]": a grid call's options in a trace.
inline std::string grid_name(const DistOptions& d) {
  return std::to_string(d.grid.rows) + "x" + std::to_string(d.grid.cols) + " " + dist::name(d.sharding) +
         (d.deterministic ? " deterministic" : "");
}

// A problem shape with the options of one call.
struct ShapeOptions {
  Shape shape;
  Options opt;
};

// The grid's deterministic mode's cases, forward and backward alike: two shapes (Nq != Nk in
// one), each with no mask, causal, a causal window and softcap over a two-sided window.
inline std::vector<ShapeOptions> grid_deterministic_cases() {
  std::vector<Options> v(4);
  v[1].causal = true;
  v[2].causal = true, v[2].window_left = 11;
  v[3].softcap = 5.0, v[3].window_left = 4, v[3].window_right = 9;
  std::vector<ShapeOptions> cases;
  for (const Shape& s : {Shape{2, 45, 45, 4, 2, 8}, Shape{1, 23, 61, 2, 1, 8}})
    for (const Options& opt : v) cases.push_back({s, opt});
  return cases;
}

// The bytes the traffic model (dist::traffic) says this rank sends in one call of d's scheme.
inline std::int64_t modelled_sent(const Shape& s, int bytes_per_value, const Options& opt, const dist::DistOptions& d,
                                  dist::Pass pass, bool lse = true) {
  dist::TrafficProblem pr;
  pr.Nq = s.Nq, pr.Nk = s.Nk, pr.batch = s.B, pr.heads_q = s.Hq, pr.heads_kv = s.Hkv, pr.head_dim = s.D;
  pr.bytes_per_value = bytes_per_value, pr.lse = lse;
  return dist::traffic(pr, opt, d, size_of(MPI_COMM_WORLD), rank_of(MPI_COMM_WORLD), pass).sent;
}

// An index array (a ragged batch's indptr) in the tests' memory space.
inline Kokkos::View<std::int64_t*, TestMemory> indptr_view(const std::vector<std::int64_t>& v) {
  Kokkos::View<std::int64_t*, TestMemory> d("indptr", v.size());
  auto h = Kokkos::create_mirror_view(d);
  for (std::size_t i = 0; i < v.size(); ++i) h(i) = v[i];
  Kokkos::deep_copy(d, h);
  return d;
}

// A fresh seed drawn on rank 0 and shared, so every rank draws the same global inputs.
inline std::uint64_t shared_seed(MPI_Comm comm = MPI_COMM_WORLD) {
  unsigned long long s = fresh_seed();
  MPI_Bcast(&s, 1, MPI_UNSIGNED_LONG_LONG, 0, comm);
  return s;
}

// Shard lengths of Nk keys over P ranks: even, and uneven with an empty rank in the middle.
inline std::vector<std::vector<std::int64_t>> splits_of(std::int64_t Nk, int P) {
  std::vector<std::vector<std::int64_t>> out;
  std::vector<std::int64_t> even(P), uneven(P, 0);
  for (int r = 0; r < P; ++r) even[r] = Nk / P + (r < Nk % P ? 1 : 0);
  out.push_back(even);
  std::int64_t left = Nk;
  for (int r = 0; r < P; ++r) {
    if (r == 1 && P > 2) continue;  // rank 1 holds nothing
    const std::int64_t n = (r == P - 1) ? left : std::min(left, Nk / 3 + r);
    uneven[r] = n;
    left -= n;
  }
  out.push_back(uneven);
  return out;
}

// Rows [B, n_r, H, D] of a global [B, N, H, D] array that `rank` holds under `layout`.
template <class T>
View4<T> shard(const View4<T>& global, const dist::SequenceLayout& layout, int rank, const char* label) {
  const int B = global.extent(0), H = global.extent(2), D = global.extent(3);
  View4<T> local(std::string(label), B, static_cast<std::size_t>(layout.local_length(rank)), H, D);
  auto g = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), global);
  auto l = Kokkos::create_mirror_view(local);
  for (const dist::Segment& s : layout.segments_of(rank))
    for (int b = 0; b < B; ++b)
      for (std::int64_t j = 0; j < s.length; ++j)
        for (int h = 0; h < H; ++h)
          for (int d = 0; d < D; ++d) l(b, s.local + j, h, d) = g(b, s.global + j, h, d);
  Kokkos::deep_copy(local, l);
  return local;
}

// Positions [B, H, n_r] of a global [B, H, N] array (an LSE) that `rank` holds under `layout`.
template <class T>
View3<T> shard_lse(const View3<T>& global, const dist::SequenceLayout& layout, int rank) {
  const int B = global.extent(0), H = global.extent(1);
  View3<T> local(std::string("lse"), B, H, static_cast<std::size_t>(layout.local_length(rank)));
  auto g = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), global);
  auto l = Kokkos::create_mirror_view(local);
  for (const dist::Segment& s : layout.segments_of(rank))
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (std::int64_t j = 0; j < s.length; ++j) l(b, h, s.local + j) = g(b, h, s.global + j);
  Kokkos::deep_copy(local, l);
  return local;
}

// The largest |a - b| over two arrays of the same span (any storage types, widened; a NaN
// difference gives NaN); `bitwise`: 1 where any element's bits differ, else 0.
template <class A, class B>
double max_abs_diff(const A& a, const B& b, bool bitwise) {
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  double m = 0;
  for (std::size_t i = 0; i < ha.span(); ++i) {
    const double x = widen(ha.data()[i]), y = widen(hb.data()[i]);
    if (bitwise ? std::memcmp(&x, &y, sizeof(double)) != 0 : !(std::abs(x - y) <= m)) m = bitwise ? 1 : std::abs(x - y);
  }
  return m;
}

// This rank's rows of a [B, n, H, D] array next to the global rows they stand for.
template <class T, class U>
void pair_rows(const View4<T>& local, const View4<U>& global, const dist::SequenceLayout& layout, int rank,
               std::vector<double>& mine, std::vector<double>& theirs) {
  auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), local);
  auto hg = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), global);
  const int B = local.extent(0), H = local.extent(2), D = local.extent(3);
  for (const dist::Segment& s : layout.segments_of(rank))
    for (int b = 0; b < B; ++b)
      for (std::int64_t j = 0; j < s.length; ++j)
        for (int h = 0; h < H; ++h)
          for (int d = 0; d < D; ++d) {
            mine.push_back(hl(b, s.local + j, h, d));
            theirs.push_back(hg(b, s.global + j, h, d));
          }
}

// Local rows of o [B, n, H, D] and lse [B, H, n] next to the global ones they stand for.
struct ShardValues {
  std::vector<double> o, lse, ref_o, ref_lse;
};

template <class T, class U>
ShardValues pair_with_global(const View4<T>& o, const View3<T>& lse, const View4<U>& go, const View3<U>& glse,
                             const dist::SequenceLayout& layout, int rank) {
  auto ho = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o);
  auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
  auto hgo = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), go);
  auto hgl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), glse);
  ShardValues v;
  const int B = o.extent(0), H = o.extent(2), D = o.extent(3);
  for (const dist::Segment& s : layout.segments_of(rank))
    for (int b = 0; b < B; ++b)
      for (std::int64_t j = 0; j < s.length; ++j)
        for (int h = 0; h < H; ++h) {
          for (int d = 0; d < D; ++d) {
            v.o.push_back(ho(b, s.local + j, h, d));
            v.ref_o.push_back(hgo(b, s.global + j, h, d));
          }
          v.lse.push_back(hl(b, h, s.local + j));
          v.ref_lse.push_back(hgl(b, h, s.global + j));
        }
  return v;
}

// This rank's shard of (o, lse) against the global reference rows.
template <class T>
void expect_shard_close(const View4<T>& o, const View3<T>& lse, const Problem<double>& ref,
                        const dist::SequenceLayout& layout, int rank, double tol, const std::string& what) {
  const ShardValues v = pair_with_global(o, lse, ref.o, ref.lse, layout, rank);
  expect_output_errors_within<T>(compare(v.o, v.ref_o), compare(v.lse, v.ref_lse), tol, what);
}

// Bitwise equality of this rank's shard with the matching rows of a global result.
template <class T>
void expect_shard_bitwise(const View4<T>& o, const View3<T>& lse, const View4<T>& go, const View3<T>& glse,
                          const dist::SequenceLayout& layout, int rank, const std::string& what) {
  const ShardValues v = pair_with_global(o, lse, go, glse, layout, rank);
  std::size_t diff_o = 0, diff_l = 0;
  for (std::size_t i = 0; i < v.o.size(); ++i) diff_o += std::memcmp(&v.o[i], &v.ref_o[i], sizeof(double)) != 0;
  for (std::size_t i = 0; i < v.lse.size(); ++i) diff_l += std::memcmp(&v.lse[i], &v.ref_lse[i], sizeof(double)) != 0;
  EXPECT_EQ(diff_o, 0u) << what << ": o elements that differ in their bits (of " << v.o.size() << ")";
  EXPECT_EQ(diff_l, 0u) << what << ": lse elements that differ in their bits (of " << v.lse.size() << ")";
}

// Gathered gradients (any struct with std::vector<double> dq, dk, dv) bit for bit the same.
template <class G>
void expect_gradient_bits_equal(const G& a, const G& b, const std::string& what) {
  EXPECT_EQ(std::memcmp(a.dq.data(), b.dq.data(), b.dq.size() * sizeof(double)), 0) << what << ": dq bits";
  EXPECT_EQ(std::memcmp(a.dk.data(), b.dk.data(), b.dk.size() * sizeof(double)), 0) << what << ": dk bits";
  EXPECT_EQ(std::memcmp(a.dv.data(), b.dv.data(), b.dv.size() * sizeof(double)), 0) << what << ": dv bits";
}

// The raw bytes of a View's values, for bitwise comparisons in any storage type.
template <class V>
std::string bytes_of(const V& v) {
  const auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::string(reinterpret_cast<const char*>(h.data()), h.span() * sizeof(typename V::value_type));
}

// Every rank's string, in rank order.
inline std::vector<std::string> allgather_strings(MPI_Comm comm, const std::string& s) {
  const int P = size_of(comm);
  int len = static_cast<int>(s.size());
  std::vector<int> lens(P), offs(P);
  MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, comm);
  int total = 0;
  for (int r = 0; r < P; ++r) offs[r] = total, total += lens[r];
  std::string all(static_cast<std::size_t>(total), '\0');
  MPI_Allgatherv(s.data(), len, MPI_CHAR, &all[0], lens.data(), offs.data(), MPI_CHAR, comm);
  std::vector<std::string> out;
  for (int r = 0; r < P; ++r) out.push_back(all.substr(offs[r], lens[r]));
  return out;
}

// Runs f, expecting a kattn::Error on this rank; checks every rank got the same message and that
// it contains `expected`; returns the message.
template <class F>
std::string expect_same_error(F&& f, const std::string& expected) {
  std::string message = "<no error>";
  try {
    f();
  } catch (const Error& e) {
    message = e.what();
  } catch (const std::exception& e) {
    message = std::string("<not a kattn::Error> ") + e.what();
  }
  const std::vector<std::string> all = allgather_strings(MPI_COMM_WORLD, message);
  for (std::size_t r = 0; r < all.size(); ++r) EXPECT_EQ(all[r], all[0]) << "rank " << r << " threw another message";
  EXPECT_NE(message.find(expected), std::string::npos)
      << "message: " << message << "\nexpected to contain: " << expected;
  return message;
}

// Communicators of the first s ranks, s = 1 .. P (MPI_COMM_NULL on ranks outside).
struct Prefixes {
  std::vector<MPI_Comm> comms;
  Prefixes() {
    const int P = size_of(MPI_COMM_WORLD), rank = rank_of(MPI_COMM_WORLD);
    for (int s = 1; s <= P; ++s) {
      MPI_Comm c;
      MPI_Comm_split(MPI_COMM_WORLD, rank < s ? 0 : MPI_UNDEFINED, rank, &c);
      comms.push_back(c);
    }
  }
  ~Prefixes() {
    for (MPI_Comm& c : comms)
      if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
  }
};

}  // namespace test
}  // namespace kattn
