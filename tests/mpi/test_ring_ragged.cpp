// Ring attention over ragged batches: every sequence of a packed batch sharded over the ranks
// (ragged_layout.hpp), forward and backward against the one-process kattn::attention and
// kattn::attention_backward with kv::ragged on the whole batch; and the collective errors of the
// ragged ring's rules.
#include <gtest/gtest.h>
#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "dist_support.hpp"
#include "kattn/attention.hpp"
#include "kattn/distributed/ragged_layout.hpp"
#include "kattn/distributed/attention.hpp"
#include "kattn/workspace.hpp"
#include "ragged_support.hpp"
#include "support.hpp"

namespace kattn {
namespace test {
namespace {

// Rows `rows` of a packed [total, H, D] array, as a new array of type T (rounded once to a 16-bit T).
template <class T, class U>
View3<T> take_rows(const View3<U>& global, const std::vector<std::int64_t>& rows, const char* label) {
  const int H = global.extent(1), D = global.extent(2);
  View3<T> local(std::string(label), rows.size(), H, D);
  auto g = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), global);
  auto l = Kokkos::create_mirror_view(local);
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (int h = 0; h < H; ++h)
      for (int d = 0; d < D; ++d) l(r, h, d) = narrow<T>(widen(g(rows[r], h, d)));
  Kokkos::deep_copy(local, l);
  return local;
}

// Every value of this rank's rows next to the global rows they stand for (any rank of view).
template <class L, class G>
Errors compare_rows(const L& local, const G& global, const std::vector<std::int64_t>& rows) {
  auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), local);
  auto hg = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), global);
  const std::size_t per_row = local.extent(0) ? local.size() / local.extent(0) : 0;
  std::vector<double> a, b;
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (std::size_t x = 0; x < per_row; ++x) {
      a.push_back(widen(hl.data()[r * per_row + x]));
      b.push_back(widen(hg.data()[rows[r] * per_row + x]));
    }
  return compare(a, b);
}

void expect_near(const Errors& e, double tol, bool absolute, const std::string& what) {
  EXPECT_FALSE(e.nan_mismatch) << what << ": NaN the reference does not have";
  EXPECT_LE(absolute ? e.max_abs : e.rel, tol) << what << (absolute ? ": max abs error" : ": relative error");
}

struct Case {
  std::vector<std::int64_t> q_lengths, kv_lengths;  // global, per sequence
  int Hq = 2, Hkv = 2, D = 8;
  Options opt;
  Sharding sharding = Sharding::contiguous;
  std::string describe() const {
    std::string s = std::string(dist::name(sharding)) + (opt.causal ? " causal" : " full") + " window " +
                    std::to_string(opt.window_left) + "," + std::to_string(opt.window_right) + " Hq=" +
                    std::to_string(Hq) + " Hkv=" + std::to_string(Hkv) + " lengths";
    for (std::size_t b = 0; b < q_lengths.size(); ++b)
      s += " " + std::to_string(q_lengths[b]) + "/" + std::to_string(kv_lengths[b]);
    return s;
  }
};

// Row indices 0 .. n - 1.
std::vector<std::int64_t> all_rows(std::size_t n) {
  std::vector<std::int64_t> rows(n);
  for (std::size_t i = 0; i < n; ++i) rows[i] = static_cast<std::int64_t>(i);
  return rows;
}

// A case's global inputs q, k, v, dout (unit normal, from a seed every rank shares) and which of
// their rows this rank holds, with its local layout.
struct Drawn {
  int rank = 0, P = 1;
  std::uint64_t seed = 0;
  std::vector<std::int64_t> gq, gk, q_rows, kv_rows;  // global indptr; this rank's rows
  View3<double> q, k, v, dout;
  RaggedLayout<TestMemory> layout;
  explicit Drawn(const Case& c)
      : rank(rank_of(MPI_COMM_WORLD)),
        P(size_of(MPI_COMM_WORLD)),
        seed(shared_seed()),
        gq(indptr_of(c.q_lengths)),
        gk(indptr_of(c.kv_lengths)),
        q_rows(dist::ragged_positions(gq, rank, P, c.sharding)),
        kv_rows(dist::ragged_positions(gk, rank, P, c.sharding)),
        q("q", gq.back(), c.Hq, c.D),
        k("k", gk.back(), c.Hkv, c.D),
        v("v", gk.back(), c.Hkv, c.D),
        dout("dout", gq.back(), c.Hq, c.D),
        layout(make_ragged_layout<TestMemory>(indptr_view(dist::ragged_local_indptr(gq, P, c.sharding)),
                                              indptr_view(dist::ragged_local_indptr(gk, P, c.sharding)))) {
    fill_normal(q, seed), fill_normal(k, seed + 1), fill_normal(v, seed + 2), fill_normal(dout, seed + 3);
  }
  RaggedLayout<TestMemory> global_layout() const {
    return make_ragged_layout<TestMemory>(indptr_view(gq), indptr_view(gk));
  }
};

// x's values rounded to T, in double.
template <class T>
View3<double> stored_as(const View3<double>& x) {
  const std::vector<std::int64_t> all = all_rows(x.extent(0));
  return take_rows<double>(take_rows<T>(x, all, "rounded"), all, "rounded");
}

// Forward and backward of the ragged ring in T against the one-process double reference.
template <class T>
void check(const Case& c) {
  Drawn in(c);
  const int rank = in.rank, P = in.P;
  const std::vector<std::int64_t>&q_rows = in.q_rows, &kv_rows = in.kv_rows;
  const auto& layout = in.layout;
  // The inputs rounded to T, so both sides see the same values.
  const View3<double> q = stored_as<T>(in.q), k = stored_as<T>(in.k), v = stored_as<T>(in.v),
                      dout = stored_as<T>(in.dout);
  // The reference.
  const auto global_layout = in.global_layout();
  View3<double> o("o", in.gq.back(), c.Hq, c.D), dq("dq", in.gq.back(), c.Hq, c.D), dk("dk", in.gk.back(), c.Hkv, c.D),
      dv("dv", in.gk.back(), c.Hkv, c.D);
  View2<double> lse("lse", in.gq.back(), c.Hq);
  attention(TestSpace(), q, kv::ragged(k, v, global_layout), o, lse, c.opt);
  attention_backward(TestSpace(), q, kv::ragged(k, v, global_layout), o, lse, dout, dq, dk, dv, c.opt);
  // This rank's shards.
  const View3<T> lq = take_rows<T>(q, q_rows, "q"), lk = take_rows<T>(k, kv_rows, "k"),
                 lv = take_rows<T>(v, kv_rows, "v"), ldout = take_rows<T>(dout, q_rows, "dout");
  View3<T> lo("o", q_rows.size(), c.Hq, c.D), ldq("dq", q_rows.size(), c.Hq, c.D),
      ldk("dk", kv_rows.size(), c.Hkv, c.D), ldv("dv", kv_rows.size(), c.Hkv, c.D);
  View2<T> llse("lse", q_rows.size(), c.Hq);
  poison(lo), poison(llse), poison(ldq), poison(ldk), poison(ldv);
  dist::DistOptions d;
  d.sharding = c.sharding;
  dist::attention(MPI_COMM_WORLD, TestSpace(), lq, kv::ragged(lk, lv, layout), lo, llse, c.opt, d);
  dist::attention_backward(MPI_COMM_WORLD, TestSpace(), lq, kv::ragged(lk, lv, layout), lo, llse, ldout, ldq,
                                ldk, ldv, c.opt, {}, d);
  // The same calls taking their buffers from a workspace, twice: the same bits.
  const std::string want = bytes_of(lo) + bytes_of(llse) + bytes_of(ldq) + bytes_of(ldk) + bytes_of(ldv);
  Workspace ws;
  Options ow = c.opt;
  ow.workspace = &ws;
  for (int repeat = 0; repeat < 2; ++repeat) {
    View3<T> wo("o", q_rows.size(), c.Hq, c.D), wdq("dq", q_rows.size(), c.Hq, c.D),
        wdk("dk", kv_rows.size(), c.Hkv, c.D), wdv("dv", kv_rows.size(), c.Hkv, c.D);
    View2<T> wlse("lse", q_rows.size(), c.Hq);
    poison(wo), poison(wlse), poison(wdq), poison(wdk), poison(wdv);
    dist::attention(MPI_COMM_WORLD, TestSpace(), lq, kv::ragged(lk, lv, layout), wo, wlse, ow, d);
    dist::attention_backward(MPI_COMM_WORLD, TestSpace(), lq, kv::ragged(lk, lv, layout), wo, wlse, ldout, wdq,
                                  wdk, wdv, ow, {}, d);
    EXPECT_TRUE(bytes_of(wo) + bytes_of(wlse) + bytes_of(wdq) + bytes_of(wdk) + bytes_of(wdv) == want)
        << c.describe() << ": with a workspace (call " << repeat + 1 << ") the bits differ";
  }
  const bool dbl = std::is_same<T, double>::value;
  const double tol = dbl ? kDoubleTol : kFloatTol, grad_tol = dbl ? kDoubleTol : 1e-5;
  const std::string what = c.describe() + " on rank " + std::to_string(rank) + " of " + std::to_string(P);
  expect_near(compare_rows(lo, o, q_rows), tol, dbl, what + ": o");
  expect_near(compare_rows(llse, lse, q_rows), dbl ? tol : tol * 10, true, what + ": lse");
  expect_near(compare_rows(ldq, dq, q_rows), grad_tol, dbl, what + ": dq");
  expect_near(compare_rows(ldk, dk, kv_rows), grad_tol, dbl, what + ": dk");
  expect_near(compare_rows(ldv, dv, kv_rows), grad_tol, dbl, what + ": dv");
}

// Lengths in whole pieces, with an empty sequence and a one-piece one.
std::vector<std::int64_t> lengths_in(std::int64_t piece, std::vector<std::int64_t> pieces) {
  for (std::int64_t& n : pieces) n *= piece;
  return pieces;
}

int pieces_of(Sharding s) { return (s == Sharding::zigzag ? 2 : 1) * size_of(MPI_COMM_WORLD); }

TEST(RingRagged, DoubleMatchesOneProcessRagged) {
  for (Sharding s : {Sharding::contiguous, Sharding::zigzag})
    for (bool causal : {false, true})
      for (int Hkv : {2, 1}) {
        Case c;
        c.sharding = s;
        c.opt.causal = causal;
        c.Hq = 2, c.Hkv = Hkv;
        // Units of 3 positions per piece: awkward per-rank lengths.
        c.q_lengths = c.kv_lengths = lengths_in(pieces_of(s), {9, 0, 1, 17, 3});
        check<double>(c);
      }
}

TEST(RingRagged, FullMaskWithOtherKeyLengths) {
  for (Sharding s : {Sharding::contiguous, Sharding::zigzag}) {
    Case c;
    c.sharding = s;
    c.q_lengths = lengths_in(pieces_of(s), {5, 2, 0, 7, 1});
    c.kv_lengths = lengths_in(pieces_of(s), {3, 0, 4, 9, 1});
    c.opt.softcap = 5.0;
    c.opt.scale = 0.3;
    c.Hq = 4, c.Hkv = 2;
    check<double>(c);
  }
}

TEST(RingRagged, FloatGqaSoftcapLongerSequences) {
  for (Sharding s : {Sharding::contiguous, Sharding::zigzag}) {
    Case c;
    c.sharding = s;
    c.opt.causal = true;
    c.opt.softcap = 20.0;
    c.Hq = 4, c.Hkv = 2, c.D = 16;
    c.q_lengths = c.kv_lengths = lengths_in(pieces_of(s), {40, 1, 0, 67, 12});
    check<float>(c);
  }
}

// Sliding windows: each sequence's own, whatever its length, so pieces of different sequences
// are seen from different distances (a short sequence's window spans many of its pieces).
TEST(RingRagged, WindowsMatchOneProcessRagged) {
  struct Mask {
    bool causal;
    std::int64_t left, right;
  };
  const Mask masks[] = {{true, 0, -1}, {true, 1, -1}, {true, 3, -1}, {true, 18, -1}, {true, 200, -1},
                        {false, 2, 5},  {false, 4, -1}, {false, -1, 3}, {false, 0, 0}};
  for (Sharding s : {Sharding::contiguous, Sharding::zigzag})
    for (const Mask& m : masks) {
      Case c;
      c.sharding = s;
      c.opt.causal = m.causal;
      c.opt.window_left = m.left, c.opt.window_right = m.right;
      c.Hq = 2, c.Hkv = m.causal ? 1 : 2;
      c.q_lengths = c.kv_lengths = lengths_in(pieces_of(s), {9, 0, 1, 17, 3, 3});
      check<double>(c);
    }
  Case f;
  f.opt.causal = true;
  f.opt.window_left = 5;
  f.opt.softcap = 20.0;
  f.Hq = 4, f.Hkv = 2, f.D = 16;
  f.q_lengths = f.kv_lengths = lengths_in(pieces_of(Sharding::zigzag), {12, 1, 0, 30});
  f.sharding = Sharding::zigzag;
  check<float>(f);
}

// A diagonal shift moves every sequence's diagonal alike, as in one process; and sequences with
// more keys than queries (a cached prefix) under causal masks and windows, the diagonal
// bottom-right aligned per sequence.
TEST(RingRagged, DiagonalShiftAndCachedPrefixes) {
  struct Mask {
    bool causal;
    std::int64_t left, right, shift;
  };
  // A shift moves a short sequence's diagonal by several of its pieces: {1, 2} sees only the two
  // keys after each query's own, pieces ahead that no window of the long sequences reaches.
  const Mask masks[] = {{true, -1, -1, 3}, {true, -1, -1, -5}, {true, 4, -1, 2}, {true, 1, -1, 2}, {false, 2, 5, -7},
                        {false, 0, 0, -3}, {true, -1, -1, 0},  {true, 6, -1, 0}, {false, 3, 3, 0}, {true, -1, -1, -40}};
  for (Sharding s : {Sharding::contiguous, Sharding::zigzag})
    for (const Mask& m : masks)
      for (bool prefix : {false, true}) {
        if (!prefix && m.shift == 0) continue;  // WindowsMatchOneProcessRagged
        Case c;
        c.sharding = s;
        c.opt.causal = m.causal;
        c.opt.window_left = m.left, c.opt.window_right = m.right;
        c.opt.diagonal_shift = m.shift;
        c.Hq = 4, c.Hkv = 2;
        c.q_lengths = lengths_in(pieces_of(s), {9, 0, 1, 5, 3});
        c.kv_lengths = prefix ? lengths_in(pieces_of(s), {12, 2, 4, 5, 0}) : c.q_lengths;
        check<double>(c);
      }
  Case f;
  f.sharding = Sharding::zigzag;
  f.opt.causal = true;
  f.opt.diagonal_shift = -3;
  f.opt.softcap = 20.0;
  f.Hq = 4, f.Hkv = 1, f.D = 16;
  f.q_lengths = lengths_in(pieces_of(f.sharding), {12, 1, 0, 20});
  f.kv_lengths = lengths_in(pieces_of(f.sharding), {30, 3, 2, 20});
  check<float>(f);
}

// A window moves only the keys some query sees: rank r (contiguous shards) sends rank r + t, of
// each sequence's piece of n keys, the last min(n, window - (t - 1) n) (when positive), the
// keys the first query of that sequence's piece on rank r + t reaches back to.
TEST(RingRagged, WindowMovesOnlyTheKeysSomeQuerySees) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  const std::vector<std::int64_t> pieces{16, 0, 24};  // rows of one piece of each sequence
  const std::vector<std::int64_t> g = indptr_of(lengths_in(P, pieces));
  const std::vector<std::int64_t> local = dist::ragged_local_indptr(g, P, Sharding::contiguous);
  const auto layout = make_ragged_layout<TestMemory>(indptr_view(local), indptr_view(local));
  const std::vector<std::int64_t> rows = dist::ragged_positions(g, rank, P, Sharding::contiguous);
  const std::int64_t n = local.back();  // one piece of every sequence: 40 rows
  View3<double> q("q", g.back(), 2, 8), k("k", g.back(), 1, 8), v("v", g.back(), 1, 8), dout("dout", g.back(), 2, 8);
  fill_normal(q, 1), fill_normal(k, 2), fill_normal(v, 3), fill_normal(dout, 4);
  const auto global_layout = make_ragged_layout<TestMemory>(indptr_view(g), indptr_view(g));
  const std::int64_t row_bytes = 2 * 1 * 8 * std::int64_t(sizeof(double));  // a key's K and V
  for (std::int64_t window : {5, 17, 40}) {
    Options opt;
    opt.causal = true;
    opt.window_left = window;
    std::int64_t keys = 0;
    for (int t = 1; rank + t < P; ++t)
      for (std::int64_t m : pieces) keys += std::max<std::int64_t>(0, std::min(m, window - (t - 1) * m));
    // Against one process, forward and backward (the dK/dV of the parts sent go back as parts).
    View3<double> o("o", g.back(), 2, 8), dq("dq", g.back(), 2, 8), dk("dk", g.back(), 1, 8), dv("dv", g.back(), 1, 8);
    View2<double> lse("lse", g.back(), 2);
    attention(TestSpace(), q, kv::ragged(k, v, global_layout), o, lse, opt);
    attention_backward(TestSpace(), q, kv::ragged(k, v, global_layout), o, lse, dout, dq, dk, dv, opt);
    View3<double> lo("o", n, 2, 8), ldq("dq", n, 2, 8), ldk("dk", n, 1, 8), ldv("dv", n, 1, 8);
    View2<double> llse("lse", n, 2);
    const View3<double> lq = take_rows<double>(q, rows, "q"), lk = take_rows<double>(k, rows, "k"),
                        lv = take_rows<double>(v, rows, "v");
    const dist::DistStats st =
        dist::attention(MPI_COMM_WORLD, TestSpace(), lq, kv::ragged(lk, lv, layout), lo, llse, opt);
    const dist::DistStats bt = dist::attention_backward(MPI_COMM_WORLD, TestSpace(), lq,
                                                             kv::ragged(lk, lv, layout), lo, llse,
                                                             take_rows<double>(dout, rows, "dout"), ldq, ldk, ldv, opt);
    const std::string what = "window " + std::to_string(window) + " on rank " + std::to_string(rank) + " of " +
                             std::to_string(P);
    EXPECT_EQ(st.bytes_sent, keys * row_bytes) << what;
    EXPECT_GE(bt.bytes_sent, keys * row_bytes) << what << ": the backward sends the same keys, then gradients";
    expect_near(compare_rows(lo, o, rows), kDoubleTol, true, what + ": o");
    expect_near(compare_rows(ldq, dq, rows), kDoubleTol, true, what + ": dq");
    expect_near(compare_rows(ldk, dk, rows), kDoubleTol, true, what + ": dk");
    expect_near(compare_rows(ldv, dv, rows), kDoubleTol, true, what + ": dv");
  }
}

// The values of a local array, bit for bit (16-bit ones as their bits).
template <class T>
std::vector<T> values_of(const Kokkos::View<T***, Kokkos::LayoutRight, TestMemory>& x) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  return std::vector<T>(h.data(), h.data() + h.size());
}
template <class S>
bool same_bits(const std::vector<S>& a, const std::vector<S>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(S)) == 0);
}
// x rounded to S once, element by element.
template <class S>
std::vector<S> rounded(const std::vector<float>& x) {
  std::vector<S> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = narrow<S>(x[i]);
  return out;
}

// 16-bit storage: the ragged ring in S is the float ragged ring run on the same (widened) values
// with o and the gradients rounded once, bit for bit, and its K/V travel in 16 bits; o against the
// one-process float64 ragged attention on those values within S's rounding.
template <class S>
void check16(const Case& c) {
  const Drawn in(c);
  const std::vector<std::int64_t>&q_rows = in.q_rows, &kv_rows = in.kv_rows;
  const auto& layout = in.layout;
  const std::string what = std::string(storage_name<S>()) + " " + c.describe() + " on rank " +
                           std::to_string(in.rank) + " of " + std::to_string(in.P) + " seed=" + std::to_string(in.seed);
  SCOPED_TRACE(what);
  // This rank's shards in S, and the same values in float.
  const View3<S> lq = take_rows<S>(in.q, q_rows, "q"), lk = take_rows<S>(in.k, kv_rows, "k"),
                 lv = take_rows<S>(in.v, kv_rows, "v"), ldout = take_rows<S>(in.dout, q_rows, "dout");
  const auto wide = [](const View3<S>& x) { return take_rows<float>(x, all_rows(x.extent(0)), "wide"); };
  const std::size_t nq = q_rows.size(), nk = kv_rows.size();
  View3<S> o("o", nq, c.Hq, c.D), dq("dq", nq, c.Hq, c.D), dk("dk", nk, c.Hkv, c.D), dv("dv", nk, c.Hkv, c.D);
  View3<float> of("of", nq, c.Hq, c.D), dqf("dqf", nq, c.Hq, c.D), dkf("dkf", nk, c.Hkv, c.D),
      dvf("dvf", nk, c.Hkv, c.D);
  View2<float> lse("lse", nq, c.Hq), lsef("lsef", nq, c.Hq);
  poison(o), poison(dq), poison(dk), poison(dv), poison(lse);
  dist::DistOptions d;
  d.sharding = c.sharding;
  const dist::DistStats f16 =
      dist::attention(MPI_COMM_WORLD, TestSpace(), lq, kv::ragged(lk, lv, layout), o, lse, c.opt, d);
  const dist::DistStats f32 = dist::attention(MPI_COMM_WORLD, TestSpace(), wide(lq),
                                                   kv::ragged(wide(lk), wide(lv), layout), of, lsef, c.opt, d);
  EXPECT_TRUE(same_bits(values_of(o), rounded<S>(values_of(of)))) << "o: the float ring's, rounded once";
  auto h16 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lse);
  auto h32 = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), lsef);
  EXPECT_EQ(std::memcmp(h16.data(), h32.data(), h16.size() * sizeof(float)), 0) << "lse: the float ring's";
  EXPECT_EQ(f32.bytes_sent, 2 * f16.bytes_sent) << "K/V travel in 16 bits";
  // Against float64 on the stored values: o is a float result rounded once.
  View3<double> o_ref("o_ref", in.gq.back(), c.Hq, c.D);
  attention(TestSpace(), stored_as<S>(in.q), kv::ragged(stored_as<S>(in.k), stored_as<S>(in.v), in.global_layout()),
            o_ref, View2<double>(), c.opt);
  const double unit_roundoff = std::is_same<S, bf16>::value ? 0x1p-8 : 0x1p-11;
  auto href = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), o_ref);
  const std::vector<S> ov = values_of(o);
  for (std::size_t r = 0; r < nq; ++r)
    for (std::size_t x = 0; x < std::size_t(c.Hq) * c.D; ++x) {
      const double ref = href.data()[q_rows[r] * c.Hq * c.D + x], got = widen(ov[r * c.Hq * c.D + x]);
      ASSERT_LE(std::abs(got - ref), unit_roundoff * std::abs(ref) + 1e-5) << "o row " << q_rows[r];
    }
  // The backward: the float ring's on the widened q, o and dout, its gradients rounded once.
  const dist::DistStats b16 = dist::attention_backward(MPI_COMM_WORLD, TestSpace(), lq, kv::ragged(lk, lv, layout),
                                                            o, lse, ldout, dq, dk, dv, c.opt, {}, d);
  const dist::DistStats b32 =
      dist::attention_backward(MPI_COMM_WORLD, TestSpace(), wide(lq), kv::ragged(wide(lk), wide(lv), layout),
                                    wide(o), lse, wide(ldout), dqf, dkf, dvf, c.opt, {}, d);
  EXPECT_TRUE(same_bits(values_of(dq), rounded<S>(values_of(dqf)))) << "dq: the float ring's, rounded once";
  EXPECT_TRUE(same_bits(values_of(dk), rounded<S>(values_of(dkf)))) << "dk: the float ring's, rounded once";
  EXPECT_TRUE(same_bits(values_of(dv), rounded<S>(values_of(dvf)))) << "dv: the float ring's, rounded once";
  EXPECT_EQ(b32.bytes_sent - b16.bytes_sent, f16.bytes_sent) << "the backward's K/V travel in 16 bits";
}

TEST(RingRagged, SixteenBitsAreTheFloatRingRoundedOnce) {
  for (Sharding s : {Sharding::contiguous, Sharding::zigzag})
    for (bool causal : {false, true}) {
      Case c;
      c.sharding = s;
      c.opt.causal = causal;
      c.Hq = 4, c.Hkv = 2, c.D = 16;
      c.q_lengths = c.kv_lengths = lengths_in(pieces_of(s), {9, 0, 1, 17, 3});
      check16<bf16>(c);
      c.opt.softcap = causal ? 0.0 : 7.0;
      c.Hkv = 1;
      check16<fp16>(c);
    }
  Case other;
  other.q_lengths = lengths_in(pieces_of(Sharding::contiguous), {5, 2, 0, 7, 1});
  other.kv_lengths = lengths_in(pieces_of(Sharding::contiguous), {3, 0, 4, 9, 1});
  check16<bf16>(other);
}

// Deterministic mode: every sequence sharded on whole key chunks (any lengths: no piece rule), each
// rank with its own local indptr (ragged_local_indptr with the call's DistOptions).
template <class T>
struct RaggedRun {
  std::vector<std::int64_t> q_rows, kv_rows;  // the global rows this rank's rows stand for
  View3<T> o, dq, dk, dv;
  View2<accumulate_t<T>> lse;
};

// The deterministic ragged ring over `comm`, forward and backward, on this rank's rows of the
// global (double) inputs rounded to T.
template <class T>
RaggedRun<T> run_deterministic(MPI_Comm comm, const Case& c, const std::vector<std::int64_t>& gq,
                               const std::vector<std::int64_t>& gk, const View3<double>& q, const View3<double>& k,
                               const View3<double>& v, const View3<double>& dout, const dist::DistOptions& d) {
  const int rank = rank_of(comm), P = size_of(comm);
  RaggedRun<T> r;
  r.q_rows = dist::ragged_positions(gq, rank, P, d);
  r.kv_rows = dist::ragged_positions(gk, rank, P, d);
  const auto layout = make_ragged_layout<TestMemory>(indptr_view(dist::ragged_local_indptr(gq, rank, P, d)),
                                                     indptr_view(dist::ragged_local_indptr(gk, rank, P, d)));
  const View3<T> lq = take_rows<T>(q, r.q_rows, "q"), lk = take_rows<T>(k, r.kv_rows, "k"),
                 lv = take_rows<T>(v, r.kv_rows, "v"), ldout = take_rows<T>(dout, r.q_rows, "dout");
  const std::size_t nq = r.q_rows.size(), nk = r.kv_rows.size();
  r.o = View3<T>("o", nq, c.Hq, c.D), r.dq = View3<T>("dq", nq, c.Hq, c.D);
  r.dk = View3<T>("dk", nk, c.Hkv, c.D), r.dv = View3<T>("dv", nk, c.Hkv, c.D);
  r.lse = View2<accumulate_t<T>>("lse", nq, c.Hq);
  poison(r.o), poison(r.lse), poison(r.dq), poison(r.dk), poison(r.dv);
  dist::attention(comm, TestSpace(), lq, kv::ragged(lk, lv, layout), r.o, r.lse, c.opt, d);
  dist::attention_backward(comm, TestSpace(), lq, kv::ragged(lk, lv, layout), r.o, r.lse, ldout, r.dq, r.dk, r.dv,
                                c.opt, {}, d);
  return r;
}

// Whether every local row has the bits of the row it stands for in `alone` (one rank: global order).
template <class V>
bool same_bits_at(const V& local, const V& alone, const std::vector<std::int64_t>& rows) {
  auto hl = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), local);
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), alone);
  const std::size_t per_row = local.extent(0) ? local.size() / local.extent(0) : 0;
  for (std::size_t r = 0; r < rows.size(); ++r)
    if (std::memcmp(hl.data() + r * per_row, ha.data() + rows[r] * per_row, per_row * sizeof(typename V::value_type)) !=
        0)
      return false;
  return true;
}

// The deterministic ragged ring in T on every prefix communicator of this run and both shardings:
// the bits of one rank alone; in double, one rank alone against the one-process ragged attention.
template <class T>
void check_deterministic(const Case& c, std::int64_t chunk) {
  const std::uint64_t seed = shared_seed();
  SCOPED_TRACE(std::string(storage_name<T>()) + " " + c.describe() + " chunk=" + std::to_string(chunk) +
               " seed=" + std::to_string(seed));
  const std::vector<std::int64_t> gq = indptr_of(c.q_lengths), gk = indptr_of(c.kv_lengths);
  View3<double> q("q", gq.back(), c.Hq, c.D), k("k", gk.back(), c.Hkv, c.D), v("v", gk.back(), c.Hkv, c.D),
      dout("dout", gq.back(), c.Hq, c.D);
  fill_normal(q, seed), fill_normal(k, seed + 1), fill_normal(v, seed + 2), fill_normal(dout, seed + 3);
  dist::DistOptions d;
  d.deterministic = true;
  d.chunk = chunk;
  const RaggedRun<T> alone = run_deterministic<T>(MPI_COMM_SELF, c, gq, gk, q, k, v, dout, d);
  if (std::is_same<T, double>::value) {
    const auto global_layout = make_ragged_layout<TestMemory>(indptr_view(gq), indptr_view(gk));
    View3<double> o("o", gq.back(), c.Hq, c.D), dq("dq", gq.back(), c.Hq, c.D), dk("dk", gk.back(), c.Hkv, c.D),
        dv("dv", gk.back(), c.Hkv, c.D);
    View2<double> lse("lse", gq.back(), c.Hq);
    attention(TestSpace(), q, kv::ragged(k, v, global_layout), o, lse, c.opt);
    attention_backward(TestSpace(), q, kv::ragged(k, v, global_layout), o, lse, dout, dq, dk, dv, c.opt);
    expect_near(compare_rows(alone.o, o, alone.q_rows), kDoubleTol, true, "one rank: o");
    expect_near(compare_rows(alone.lse, lse, alone.q_rows), kDoubleTol, true, "one rank: lse");
    expect_near(compare_rows(alone.dq, dq, alone.q_rows), kDoubleTol, true, "one rank: dq");
    expect_near(compare_rows(alone.dk, dk, alone.kv_rows), kDoubleTol, true, "one rank: dk");
    expect_near(compare_rows(alone.dv, dv, alone.kv_rows), kDoubleTol, true, "one rank: dv");
  }
  Prefixes prefixes;
  for (MPI_Comm comm : prefixes.comms) {
    if (comm == MPI_COMM_NULL) continue;
    for (Sharding s : {Sharding::contiguous, Sharding::zigzag}) {
      dist::DistOptions ds = d;
      ds.sharding = s;
      const RaggedRun<T> r = run_deterministic<T>(comm, c, gq, gk, q, k, v, dout, ds);
      const std::string what =
          "P=" + std::to_string(size_of(comm)) + " " + dist::name(s) + " rank " + std::to_string(rank_of(comm));
      EXPECT_TRUE(same_bits_at(r.o, alone.o, r.q_rows)) << what << ": o";
      EXPECT_TRUE(same_bits_at(r.lse, alone.lse, r.q_rows)) << what << ": lse";
      EXPECT_TRUE(same_bits_at(r.dq, alone.dq, r.q_rows)) << what << ": dq";
      EXPECT_TRUE(same_bits_at(r.dk, alone.dk, r.kv_rows)) << what << ": dk";
      EXPECT_TRUE(same_bits_at(r.dv, alone.dv, r.kv_rows)) << what << ": dv";
    }
  }
}

TEST(RingRagged, DeterministicBitsOnEveryRankCount) {
  struct Mask {
    bool causal;
    std::int64_t left, right, shift;
    bool prefix;  // more keys than queries in some sequences
  };
  const Mask masks[] = {{false, -1, -1, 0, true}, {true, -1, -1, 0, false}, {true, 5, -1, 0, false},
                        {false, 3, 2, 0, false},  {true, -1, -1, -2, true}, {true, 9, -1, 0, true}};
  for (const Mask& m : masks) {
    Case c;
    c.opt.causal = m.causal;
    c.opt.window_left = m.left, c.opt.window_right = m.right;
    c.opt.diagonal_shift = m.shift;
    c.Hq = 4, c.Hkv = m.causal ? 2 : 1;
    // Lengths that divide by nothing in particular; an empty sequence; with a prefix, a sequence
    // with keys and no queries and one with queries and no keys (full mask only).
    c.q_lengths = {37, 0, 1, 70, 16};
    c.kv_lengths = m.prefix ? std::vector<std::int64_t>{45, 6, 1, 70, m.causal ? 20 : 0} : c.q_lengths;
    check_deterministic<double>(c, 8);
  }
  Case f;
  f.opt.causal = true;
  f.opt.softcap = 20.0;
  f.Hq = 4, f.Hkv = 2, f.D = 16;
  f.q_lengths = f.kv_lengths = {50, 3, 0, 33};
  check_deterministic<float>(f, 16);
  check_deterministic<bf16>(f, 16);
}

TEST(RingRagged, DeterministicLocalIndptrAndPositions) {
  // Sequence 0 of 10 positions on chunks of 4 over two ranks: contiguous, 8 + 2; zigzag, 4 pieces
  // [0, 4) [4, 8) [8, 10) and none, the third one rank 1's.
  const std::vector<std::int64_t> g{0, 10, 10, 13};
  dist::DistOptions d;
  d.deterministic = true;
  d.chunk = 4;
  EXPECT_EQ(dist::ragged_local_indptr(g, 0, 2, d), (std::vector<std::int64_t>{0, 8, 8, 11}));
  EXPECT_EQ(dist::ragged_local_indptr(g, 1, 2, d), (std::vector<std::int64_t>{0, 2, 2, 2}));
  EXPECT_EQ(dist::ragged_positions(g, 1, 2, d), (std::vector<std::int64_t>{8, 9}));
  d.sharding = Sharding::zigzag;
  EXPECT_EQ(dist::ragged_local_indptr(g, 0, 2, d), (std::vector<std::int64_t>{0, 4, 4, 7}));
  EXPECT_EQ(dist::ragged_positions(g, 0, 2, d), (std::vector<std::int64_t>{0, 1, 2, 3, 10, 11, 12}));
  EXPECT_EQ(dist::ragged_positions(g, 1, 2, d), (std::vector<std::int64_t>{4, 5, 6, 7, 8, 9}));
  // Without the deterministic mode, the equal pieces of ragged_local_indptr.
  d.deterministic = false;
  EXPECT_EQ(dist::ragged_local_indptr({0, 8, 12}, 1, 2, d), (std::vector<std::int64_t>{0, 4, 6}));
  EXPECT_THROW(dist::ragged_local_indptr(g, 0, 2, d), Error);
  EXPECT_THROW(dist::ragged_positions(g, 2, 2, d), Error);
  EXPECT_THROW(dist::ragged_local_indptr({0, 8, 12}, 2, 2, d), Error);  // rank out of range
  d.deterministic = true;
  d.chunk = -5;
  EXPECT_THROW(dist::ragged_positions(g, 0, 2, d), Error);  // as the call would refuse it
}

TEST(RingRagged, WithoutLse) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  const std::vector<std::int64_t> g = indptr_of(lengths_in(P, {4, 0, 3}));
  const auto global_layout = make_ragged_layout<TestMemory>(indptr_view(g), indptr_view(g));
  View3<double> q("q", g.back(), 2, 8), k("k", g.back(), 1, 8), v("v", g.back(), 1, 8), o("o", g.back(), 2, 8);
  View2<double> lse("lse", g.back(), 2);
  fill_normal(q, 7), fill_normal(k, 8), fill_normal(v, 9);
  Options causal;
  causal.causal = true;
  attention(TestSpace(), q, kv::ragged(k, v, global_layout), o, lse, causal);
  const std::vector<std::int64_t> rows = dist::ragged_positions(g, rank, P, Sharding::contiguous);
  const std::vector<std::int64_t> local = dist::ragged_local_indptr(g, P, Sharding::contiguous);
  const auto layout = make_ragged_layout<TestMemory>(indptr_view(local), indptr_view(local));
  View3<double> lo("o", rows.size(), 2, 8);
  dist::attention(MPI_COMM_WORLD, TestSpace(), take_rows<double>(q, rows, "q"),
                       kv::ragged(take_rows<double>(k, rows, "k"), take_rows<double>(v, rows, "v"), layout), lo,
                       View2<double>(), causal);
  expect_near(compare_rows(lo, o, rows), kDoubleTol, true, "o without lse");
}

TEST(RingRagged, LocalIndptrAndPositions) {
  // Two ranks, zigzag: sequence 0 of 8 cut into 4 pieces of 2, rank 0 holding pieces 0 and 3.
  const std::vector<std::int64_t> g{0, 8, 8, 12};
  EXPECT_EQ(dist::ragged_local_indptr(g, 2, Sharding::zigzag), (std::vector<std::int64_t>{0, 4, 4, 6}));
  EXPECT_EQ(dist::ragged_positions(g, 0, 2, Sharding::zigzag),
            (std::vector<std::int64_t>{0, 1, 6, 7, 8, 11}));
  EXPECT_EQ(dist::ragged_positions(g, 1, 2, Sharding::contiguous),
            (std::vector<std::int64_t>{4, 5, 6, 7, 10, 11}));
  EXPECT_THROW(dist::ragged_local_indptr({0, 6}, 2, Sharding::zigzag), Error);
}

// One rank's packed arrays for the local indptr q_local, kv_local (Hq = 2, Hkv = 1, D = 4).
struct LocalBatch {
  View3<double> q, k, v, o, dout, dq, dk, dv;
  View2<double> lse;
  RaggedLayout<TestMemory> layout;
  LocalBatch(const std::vector<std::int64_t>& q_local, const std::vector<std::int64_t>& kv_local)
      : q("q", q_local.back(), 2, 4),
        k("k", kv_local.back(), 1, 4),
        v("v", kv_local.back(), 1, 4),
        o("o", q_local.back(), 2, 4),
        dout("dout", q_local.back(), 2, 4),
        dq("dq", q_local.back(), 2, 4),
        dk("dk", kv_local.back(), 1, 4),
        dv("dv", kv_local.back(), 1, 4),
        lse("lse", q_local.back(), 2),
        layout(make_ragged_layout<TestMemory>(indptr_view(q_local), indptr_view(kv_local))) {
    fill_normal(q, 1), fill_normal(k, 2), fill_normal(v, 3), fill_normal(dout, 4);
  }
  dist::DistStats forward(const Options& opt, const dist::DistOptions& d) {
    return dist::attention(MPI_COMM_WORLD, TestSpace(), q, kv::ragged(k, v, layout), o, lse, opt, d);
  }
  dist::DistStats backward(const Options& opt, const dist::DistOptions& d) {
    return dist::attention_backward(MPI_COMM_WORLD, TestSpace(), q, kv::ragged(k, v, layout), o, lse, dout, dq, dk,
                                         dv, opt, {}, d);
  }
};

// In deterministic mode the progress callback counts sequences, empty ones too; the stats say
// whether buffers were staged.
TEST(RingRagged, DeterministicProgressCountsSequences) {
  const int rank = rank_of(MPI_COMM_WORLD), P = size_of(MPI_COMM_WORLD);
  const std::vector<std::int64_t> g{0, 20, 33, 33};
  dist::DistOptions d;
  d.deterministic = true;
  d.chunk = 4;
  std::vector<std::pair<int, int>> seen;
  d.progress = [&](int step, int steps) { seen.emplace_back(step, steps); };
  const std::vector<std::int64_t> local = dist::ragged_local_indptr(g, rank, P, d),
                                  rows = dist::ragged_positions(g, rank, P, d);
  LocalBatch b(local, local);
  d.staging = dist::Staging::host;
  EXPECT_TRUE(b.forward({}, d).staged);
  EXPECT_EQ(seen, (std::vector<std::pair<int, int>>{{1, 3}, {2, 3}, {3, 3}}));
  seen.clear();
  EXPECT_TRUE(b.backward({}, d).staged);
  EXPECT_EQ(seen, (std::vector<std::pair<int, int>>{{1, 3}, {2, 3}, {3, 3}}));
  EXPECT_EQ(rows.size(), static_cast<std::size_t>(local.back()));
}

dist::DistOptions zigzag() {
  dist::DistOptions d;
  d.sharding = Sharding::zigzag;
  return d;
}

TEST(DistErrors, RaggedZigzagNeedsEvenLocalLengths) {
  LocalBatch b({0, 4, 7}, {0, 4, 7});
  const std::string expected = "q_indptr: zigzag sharding holds two equal pieces of every sequence on each rank, so "
                               "local lengths must be even; sequence 1 has 3 queries and 3 keys here";
  expect_same_error([&] { b.forward({}, zigzag()); }, expected);
  expect_same_error([&] { b.backward({}, zigzag()); }, expected);
}

TEST(DistErrors, RaggedIndptrDiffersAcrossRanks) {
  if (size_of(MPI_COMM_WORLD) < 2) GTEST_SKIP() << "needs two ranks";
  const bool first = rank_of(MPI_COMM_WORLD) == 0;
  LocalBatch b(first ? std::vector<std::int64_t>{0, 2, 6} : std::vector<std::int64_t>{0, 4, 6}, {0, 2, 6});
  expect_same_error([&] { b.forward({}, {}); },
                    "q_indptr: expected the same offsets on every rank (each holds its share of every sequence of "
                    "the batch), offset 1 ranges from 2 to 4 over the ranks");
}

// Deterministic mode: shards on whole chunks of each sequence, or the same error on every rank.
TEST(DistErrors, RaggedDeterministicNeedsChunkAlignedShards) {
  if (size_of(MPI_COMM_WORLD) < 2) GTEST_SKIP() << "needs two ranks";
  const int P = size_of(MPI_COMM_WORLD);
  LocalBatch b({0, 2, 6}, {0, 2, 6});  // sequence 0: 2P positions, 2 per rank
  dist::DistOptions det;
  det.deterministic = true;
  det.chunk = 4;
  const std::string expected = "q_indptr: sequence 0 expected 4 query positions on rank 0 (a contiguous split of " +
                               std::to_string(2 * P) + " positions over " + std::to_string(P) + " ranks";
  expect_same_error([&] { b.forward({}, det); }, expected);
  expect_same_error([&] { b.backward({}, det); }, expected);
  BackwardOptions atomic;
  atomic.dq = DqStrategy::atomic;
  expect_same_error(
      [&] {
        dist::attention_backward(MPI_COMM_WORLD, TestSpace(), b.q, kv::ragged(b.k, b.v, b.layout), b.o, b.lse,
                                      b.dout, b.dq, b.dk, b.dv, {}, atomic, det);
      },
      "dq: the atomic strategy is not deterministic");
}

}  // namespace
}  // namespace test
}  // namespace kattn
