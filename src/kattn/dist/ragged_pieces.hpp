// Ring attention over a ragged batch, seen as the dense ring sees one sequence. Internal.
//
// Every sequence is cut into equal pieces (ragged_layout.hpp), so piece c of every sequence can be
// taken together: rank r's rows reordered piece-major (piece after piece, each packing its share
// of every sequence in sequence order, Uq query and Uk key rows) form a dense sequence of P * units
// segments whose segment c is piece c. The dense ring's plan, transfers, folds and accumulators
// run on those rows unchanged (batch 1); only the attention of a (query piece, key piece) pair is
// a ragged call over the B sequences' parts, with one indptr for every piece. Under a causal mask
// that pair is whole (key piece before query piece), diagonal (the same piece: causal with no
// shift, each sequence's part being as long on both sides) or empty, whatever the lengths: one
// option set for every sequence of the call, which a per-sequence shift (windows, pieces of
// different lengths) would break. Hence the rules checked here, after the problem is agreed:
// the same local indptr on every rank, even local lengths under zigzag, keys equal to queries
// under a causal mask, no window and no diagonal shift, and not deterministic.
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "kattn/core/attention_params.hpp"
#include "kattn/core/storage.hpp"
#include "kattn/dist/agreement.hpp"
#include "kattn/dist/collective.hpp"
#include "kattn/dist/dist_options.hpp"
#include "kattn/dist/pack.hpp"
#include "kattn/errors.hpp"
#include "kattn/options.hpp"
#include "kattn/ragged.hpp"

namespace kattn {
namespace dist {
namespace detail {

template <class MemorySpace>
struct RaggedPieces {
  int units = 1;                  // pieces of each sequence a rank holds: 1 contiguous, 2 zigzag
  std::int64_t Uq = 0, Uk = 0;    // rows of one piece of every sequence together
  BatchLengths piece;             // one piece's queries and keys per sequence
  std::vector<std::int64_t> q_local, kv_local;  // the local indptr
  Kokkos::View<std::int64_t*, MemorySpace> q_indptr, kv_indptr;  // one piece's: the local ones / units
  Kokkos::View<std::int64_t*, MemorySpace> q_rows, kv_rows;      // piece-major row r is local row rows[r]
  GlobalSplit split;              // the piece-major rows as the dense ring's shards

  // q (the dense ring's params of one query piece against one key piece, pointers and per-row
  // strides set) into the ragged call over that pair's B parts; opt whole or, on the diagonal,
  // causal. Returns the pair's visible (query, key) pairs per head.
  template <class Q, class T, class KV>
  double pair_call(AttentionParams<Q, T, KV>& q, Options& opt, bool diagonal) const {
    q.batch = static_cast<int>(piece.q_len.size());
    q.q_indptr = q_indptr.data();
    q.kv_indptr = kv_indptr.data();
    q.q_len = piece.max_q();
    q.kv_len = piece.max_kv();
    q.q_total = Uq;
    opt.causal = diagonal;
    opt.diagonal_shift = 0;
    double pairs = 0;
    for (std::size_t b = 0; b < piece.q_len.size(); ++b) {
      const double nq = double(piece.q_len[b]), nk = double(piece.kv_len[b]);
      pairs += diagonal ? nq * (nq + 1) / 2 : nq * nk;
    }
    return pairs;
  }
};

namespace ragged_detail {

// Exact: the offsets' minimum and maximum over the ranks agree everywhere.
inline void require_same_everywhere(MPI_Comm comm, const std::vector<std::int64_t>& indptr, const char* argument) {
  const int n = static_cast<int>(indptr.size());
  std::vector<std::int64_t> lo(indptr.size()), hi(indptr.size());
  MPI_Allreduce(indptr.data(), lo.data(), n, MPI_INT64_T, MPI_MIN, comm);
  MPI_Allreduce(indptr.data(), hi.data(), n, MPI_INT64_T, MPI_MAX, comm);
  for (int i = 0; i < n; ++i)
    KATTN_REQUIRE(lo[i] == hi[i], argument, ": expected the same offsets on every rank (each holds its share of "
                  "every sequence of the batch), offset ", i, " ranges from ", lo[i], " to ", hi[i], " over the ranks");
}

// Piece-major row r -> local row: piece u of sequence b is local rows [local[b] + u * n, + n).
inline std::vector<std::int64_t> piece_major_rows(const std::vector<std::int64_t>& local, int units) {
  std::vector<std::int64_t> rows;
  rows.reserve(local.back());
  for (int u = 0; u < units; ++u)
    for (std::size_t b = 0; b + 1 < local.size(); ++b) {
      const std::int64_t n = (local[b + 1] - local[b]) / units;
      for (std::int64_t i = 0; i < n; ++i) rows.push_back(local[b] + u * n + i);
    }
  return rows;
}

inline std::vector<std::int64_t> offsets(const std::vector<std::int64_t>& lengths) {
  std::vector<std::int64_t> indptr(lengths.size() + 1, 0);
  for (std::size_t b = 0; b < lengths.size(); ++b) indptr[b + 1] = indptr[b] + lengths[b];
  return indptr;
}

inline std::vector<std::int64_t> divided(const std::vector<std::int64_t>& v, int units) {
  std::vector<std::int64_t> out(v);
  for (std::int64_t& x : out) x /= units;
  return out;
}

}  // namespace ragged_detail

// The pieces of a ragged batch with these local lengths (the layout's), after
// collective_agree (the same B everywhere): every rule of the header is checked here, throwing
// the same kattn::Error on every rank.
template <class MemorySpace>
RaggedPieces<MemorySpace> ragged_pieces(MPI_Comm comm, const BatchLengths& local, const Options& opt,
                                        const DistOptions& d) {
  using namespace ragged_detail;
  const std::vector<std::int64_t> q_local = offsets(local.q_len), kv_local = offsets(local.kv_len);
  require_same_everywhere(comm, q_local, "q_indptr");
  require_same_everywhere(comm, kv_local, "kv_indptr");
  // From here on every rank holds the same offsets, so every check below throws alike.
  KATTN_REQUIRE(!d.deterministic, "deterministic: not available for ragged batches (its fixed key chunks are "
                "positions of one sequence; a ragged batch's are cut per sequence)");
  KATTN_REQUIRE(opt.window_left < 0 && opt.window_right < 0, "window_left, window_right: a ragged batch's ring "
                "takes causal or full masks only (a window needs a shift per sequence), got ", opt.window_left, ", ",
                opt.window_right);
  KATTN_REQUIRE(opt.diagonal_shift == 0, "diagonal_shift: a ragged batch's ring takes none (it needs a shift per "
                "sequence), got ", opt.diagonal_shift);
  int P = 1;
  MPI_Comm_size(comm, &P);
  RaggedPieces<MemorySpace> rp;
  rp.units = d.sharding == Sharding::zigzag ? 2 : 1;
  rp.q_local = q_local, rp.kv_local = kv_local;
  const std::vector<std::int64_t>& q_len = local.q_len, &kv_len = local.kv_len;
  for (std::size_t b = 0; b < q_len.size(); ++b) {
    KATTN_REQUIRE(q_len[b] % rp.units == 0 && kv_len[b] % rp.units == 0, "q_indptr: zigzag sharding holds two "
                  "equal pieces of every sequence on each rank, so local lengths must be even; sequence ", b, " has ",
                  q_len[b], " queries and ", kv_len[b], " keys here");
    KATTN_REQUIRE(!opt.causal || q_len[b] == kv_len[b], "kv_indptr: a causal mask over a ragged batch's ring needs "
                  "each sequence's keys to be its queries (kv_indptr == q_indptr); sequence ", b, " has ", q_len[b],
                  " queries and ", kv_len[b], " keys here");
  }
  rp.Uq = q_local.back() / rp.units;
  rp.Uk = kv_local.back() / rp.units;
  rp.piece.q_len = divided(q_len, rp.units);
  rp.piece.kv_len = divided(kv_len, rp.units);
  rp.q_indptr = kattn::detail::device_index<MemorySpace>(divided(q_local, rp.units), "dist::ragged::q_indptr");
  rp.kv_indptr = kattn::detail::device_index<MemorySpace>(divided(kv_local, rp.units), "dist::ragged::kv_indptr");
  rp.q_rows = kattn::detail::device_index<MemorySpace>(piece_major_rows(q_local, rp.units), "dist::ragged::q_rows");
  rp.kv_rows = kattn::detail::device_index<MemorySpace>(piece_major_rows(kv_local, rp.units), "dist::ragged::kv_rows");
  GlobalSplit& s = rp.split;
  s.q_lens.assign(P, q_local.back());
  s.kv_lens.assign(P, kv_local.back());
  s.Nq = std::int64_t(P) * q_local.back();
  s.Nk = std::int64_t(P) * kv_local.back();
  // Aligned to a piece, every segment is one piece (the last unit is never short: it divides).
  s.q_layout = SequenceLayout(s.Nq, P, d.sharding, std::max<std::int64_t>(rp.Uq, 1));
  s.kv_layout = SequenceLayout(s.Nk, P, d.sharding, std::max<std::int64_t>(rp.Uk, 1));
  return rp;
}

// dst row r = src row rows[r] (gather) or dst row rows[r] = src row r (scatter), rows of
// heads x dim values: between the caller's packed order and the piece-major one. Src and Dst may
// differ: a 16-bit value widens to float exactly, a float one is rounded to 16 bits once.
template <class ExecSpace, class Src, class Dst>
struct PermuteRows {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Strided<const Src> src;
  Strided<Dst> dst;
  const std::int64_t* rows = nullptr;
  bool scatter = false;
  int heads = 0, dim = 0;
  KOKKOS_INLINE_FUNCTION void operator()(const Member& member) const {
    const std::int64_t r = member.league_rank();
    const std::int64_t from = scatter ? r : rows[r], to = scatter ? rows[r] : r;
    Kokkos::parallel_for(Kokkos::TeamThreadRange(member, heads), [&](const int h) {
      const Src* s = src.at(0, from, h);
      Dst* d = dst.at(0, to, h);
      Kokkos::parallel_for(Kokkos::ThreadVectorRange(member, dim),
                           [&](const int x) { d[x] = kattn::narrow<Dst>(kattn::widen(s[x])); });
    });
  }
};

template <class ExecSpace, class Src, class Dst, class Rows>
void permute_rows(const ExecSpace& space, const Rows& rows, bool scatter, Strided<const Src> src, Strided<Dst> dst,
                  int heads, int dim) {
  if (rows.extent(0) == 0 || heads == 0 || dim == 0) return;
  Kokkos::parallel_for("kattn::dist::ragged::permute_rows",
                       Kokkos::TeamPolicy<ExecSpace>(space, static_cast<int>(rows.extent(0)), Kokkos::AUTO),
                       PermuteRows<ExecSpace, Src, Dst>{src, dst, rows.data(), scatter, heads, dim});
}

// The caller's rows (row stride sj, head stride sh) into the dense piece-major array `dense`.
template <class ExecSpace, class Src, class Dst, class Rows>
void to_piece_major(const ExecSpace& space, const Rows& rows, const Src* caller, std::int64_t sj, std::int64_t sh,
                    Dst* dense, int heads, int dim) {
  permute_rows(space, rows, false, Strided<const Src>{caller, 0, sj, sh},
               Strided<Dst>{dense, 0, std::int64_t(heads) * dim, dim}, heads, dim);
}

// And back.
template <class ExecSpace, class Src, class Dst, class Rows>
void from_piece_major(const ExecSpace& space, const Rows& rows, const Src* dense, Dst* caller, std::int64_t sj,
                      std::int64_t sh, int heads, int dim) {
  permute_rows(space, rows, true, Strided<const Src>{dense, 0, std::int64_t(heads) * dim, dim},
               Strided<Dst>{caller, 0, sj, sh}, heads, dim);
}

// A flat array of n values for a piece-major copy (inside the caller's collective memory check).
template <class T, class ExecSpace>
Kokkos::View<T*, typename ExecSpace::memory_space> piece_major_array(const ExecSpace& space, const char* label,
                                                                     std::uint64_t n) {
  return Kokkos::View<T*, typename ExecSpace::memory_space>(
      Kokkos::view_alloc(space, Kokkos::WithoutInitializing, std::string(label)), n);
}

// A ragged call's params over the dense piece-major arrays q, o [nq][Hq][D], k, v [nk][Hkv][D], lse
// [nq][Hq] (null: none): one dense sequence of batch 1, what the dense ring takes. T: the type the
// ring computes in (q, o and lse here); KV: the storage K/V travel in (T, or 16 bits under float).
template <class T, class KV, class Params>
AttentionParams<T, T, KV> piece_major_params(const Params& p, std::int64_t nq, std::int64_t nk, const T* q,
                                             const KV* k, const KV* v, T* o, T* lse) {
  const int H = p.heads_q, Hkv = p.heads_kv, D = p.head_dim;
  AttentionParams<T, T, KV> pm;
  pm.batch = 1;
  pm.heads_q = H, pm.heads_kv = Hkv, pm.head_dim = D;
  pm.q_len = pm.q_total = nq;
  pm.kv_len = nk;
  pm.q = q, pm.o = o;
  pm.q_stride_batch = pm.o_stride_batch = nq * H * D;
  pm.q_stride_seq = pm.o_stride_seq = std::int64_t(H) * D;
  pm.q_stride_head = pm.o_stride_head = D;
  pm.k = k, pm.v = v;
  pm.k_stride_batch = pm.v_stride_batch = nk * Hkv * D;
  pm.k_stride_seq = pm.v_stride_seq = std::int64_t(Hkv) * D;
  pm.k_stride_head = pm.v_stride_head = D;
  pm.lse = lse;
  pm.lse_stride_batch = nq * H, pm.lse_stride_seq = H, pm.lse_stride_head = 1;
  return pm;
}

}  // namespace detail
}  // namespace dist
}  // namespace kattn
