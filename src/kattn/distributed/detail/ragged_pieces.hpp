// Ring attention over a ragged batch, seen as the dense ring sees one sequence. Internal.
//
// Every sequence is cut into equal pieces (ragged_layout.hpp), so piece c of every sequence can be
// taken together: rank r's rows reordered piece-major (piece after piece, each packing its share
// of every sequence in sequence order, Uq query and Uk key rows) form a dense sequence of P * units
// segments whose segment c is piece c. The dense ring's plan, transfers, folds and accumulators
// run on those rows unchanged (batch 1); only the attention of a (query piece, key piece) pair is
// a ragged call over the B sequences' parts, with one indptr for every piece.
//
// Under a mask, sequence b's part of pair (cq, ck) is its queries [cq m_b, (cq + 1) m_b) against
// its keys [ck n_b, (ck + 1) n_b) (m_b, n_b: its query and key piece lengths): the shard
// arithmetic of the dense ring (shard_math.hpp) per sequence, so a pair's shift differs between
// sequences of different lengths. pair_of groups consecutive sequences whose parts take the same
// options (every query sees every key; the same shift; nothing visible: left out) into one launch
// each: one for a causal mask over equal key and query lengths, whatever the lengths; a few for a
// window, a diagonal shift or a cached prefix (more keys than queries, the diagonal bottom-right
// aligned as in one process; a shift moves every sequence's diagonal by as many of its own
// positions). The ring's steps are the shifts at which some sequence's queries see keys of
// another rank (shifts, exact per sequence); each moves only the parts of the pieces that they see
// (needed), laid out at their offsets in whole pieces on arrival (landing).
//
// Rules checked here, after the problem is agreed: the same local indptr on every rank, even
// local lengths under zigzag. Not for the deterministic mode (ragged_sequences.hpp).
#pragma once

#include <mpi.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kattn/core/attention_params.hpp"
#include "kattn/core/storage.hpp"
#include "kattn/distributed/detail/agreement.hpp"
#include "kattn/distributed/detail/buffer_memory.hpp"
#include "kattn/distributed/collective.hpp"
#include "kattn/distributed/options.hpp"
#include "kattn/distributed/detail/pack.hpp"
#include "kattn/distributed/detail/shard_math.hpp"
#include "kattn/errors.hpp"
#include "kattn/options.hpp"
#include "kattn/ragged.hpp"

namespace kattn {
namespace dist {
namespace detail {

// One launch of a (query piece, key piece) pair: sequences [b0, b1) under the same options.
struct PieceRun {
  int b0 = 0, b1 = 0;
  Options opt;
};

// A pair's launches, the (query, key) pairs they see per head, and whether they give a partial to
// every query row (false: some sequence sees nothing of the pair, and its rows must be cleared).
struct PiecePair {
  std::vector<PieceRun> runs;
  double pairs = 0;
  bool covers_all = true;
};

template <class MemorySpace>
struct RaggedPieces {
  int units = 1;                  // pieces of each sequence a rank holds: 1 contiguous, 2 zigzag
  int pieces = 1;                 // pieces of each sequence over all ranks: P * units
  std::int64_t Uq = 0, Uk = 0;    // rows of one piece of every sequence together
  BatchLengths piece;             // one piece's queries and keys per sequence
  std::vector<std::int64_t> q_local, kv_local;    // the local indptr
  std::vector<std::int64_t> q_offsets, kv_offsets;  // one piece's indptr (the local one / units)
  Kokkos::View<std::int64_t*, MemorySpace> q_indptr, kv_indptr;  // the same on the device
  Kokkos::View<std::int64_t*, MemorySpace> q_rows, kv_rows;      // piece-major row r is local row rows[r]
  GlobalSplit split;              // the piece-major rows as the dense ring's shards
  std::vector<Segment> key_pieces;  // split's key segments by piece index (global / Uk)

  // Sequence b's part of query piece cq against key piece ck: the dense ring's shard options on
  // that sequence's own positions.
  Options part_options(const Options& opt, std::size_t b, std::int64_t cq, std::int64_t ck) const {
    const std::int64_t nq = piece.q_len[b], nk = piece.kv_len[b];
    return shard_options(opt, cq * nq, nq, pieces * nq, ck * nk, nk, pieces * nk);
  }

  // The launches of query piece cq against key piece ck under the caller's options (pieces are
  // the dense ring's segments: cq = global row / Uq).
  PiecePair pair_of(const Options& opt, std::int64_t cq, std::int64_t ck) const {
    PiecePair pp;
    const int B = static_cast<int>(piece.q_len.size());
    bool open = false;
    bool open_whole = false;
    std::int64_t open_shift = 0;
    int next_start = 0;  // sequences before it belong to a run or were left out
    const auto close = [&] {
      if (open) next_start = pp.runs.back().b1;
      open = false;
    };
    for (int b = 0; b < B; ++b) {
      const std::int64_t nq = piece.q_len[b], nk = piece.kv_len[b];
      if (nq == 0) {  // no rows: any launch may take it
        if (open) pp.runs.back().b1 = b + 1;
        continue;
      }
      Options o = part_options(opt, b, cq, ck);
      const double seen = double(KeyWindow::from(o).visible_pairs(nq, nk));
      if (seen == 0 && nk > 0) {
        close();
        next_start = b + 1;
        pp.covers_all = false;
        continue;
      }
      pp.pairs += seen;
      const bool whole = seen == double(nq) * double(nk);
      if (whole) {  // no mask: then any lengths share the launch
        o.causal = false;
        o.window_left = o.window_right = -1;
        o.diagonal_shift = 0;
      }
      if (open && whole == open_whole && (whole || o.diagonal_shift == open_shift)) {
        pp.runs.back().b1 = b + 1;
        continue;
      }
      close();
      pp.runs.push_back(PieceRun{next_start, b + 1, o});
      open = true, open_whole = whole, open_shift = o.diagonal_shift;
    }
    if (open) pp.runs.back().b1 = B;  // trailing sequences without rows
    return pp;
  }

  // q (the dense ring's params of one query piece against one key piece, pointers and per-row
  // strides set) as the ragged params of run r: offsets stay those of the whole piece, so q_total
  // is the run's last offset. Returns the run's lengths.
  template <class Q, class T, class KV>
  BatchLengths use_run(AttentionParams<Q, T, KV>& q, const PieceRun& r) const {
    BatchLengths l;
    l.q_len.assign(piece.q_len.begin() + r.b0, piece.q_len.begin() + r.b1);
    l.kv_len.assign(piece.kv_len.begin() + r.b0, piece.kv_len.begin() + r.b1);
    q.batch = r.b1 - r.b0;
    q.q_indptr = q_indptr.data() + r.b0;
    q.kv_indptr = kv_indptr.data() + r.b0;
    q.q_len = l.max_q();
    q.kv_len = l.max_kv();
    q.q_total = q_offsets[r.b1];
    return l;
  }

  // The ring's shifts (ring_steps): t at which some rank receives keys that its queries see, exact
  // per sequence (its own diagonal, shift and window): each query piece's visible keys of its
  // sequence, as key pieces and their owners. A short sequence's window or shift reaches more of
  // its pieces than a long one's, so no single window in piece units stands for every sequence.
  std::vector<int> shifts(const Options& opt, const GlobalSplit& s) const {
    const int P = s.q_layout.ranks();
    std::vector<int> out{0};
    if (Uq == 0 || Uk == 0) return out;
    std::vector<int> q_owner(pieces), k_owner(pieces);
    for (const Segment& seg : s.q_layout.segments()) q_owner[seg.global / Uq] = seg.owner;
    for (const Segment& seg : s.kv_layout.segments()) k_owner[seg.global / Uk] = seg.owner;
    std::vector<bool> seen(P, false);
    int missing = P - 1;
    for (std::size_t b = 0; b < piece.q_len.size() && missing > 0; ++b) {
      const std::int64_t nq = piece.q_len[b], nk = piece.kv_len[b];
      if (nq == 0 || nk == 0) continue;
      for (int cq = 0; cq < pieces && missing > 0; ++cq) {
        const KeyRange r =
            visible_keys(shard_options(opt, cq * nq, nq, pieces * nq, 0, pieces * nk, pieces * nk), nq, pieces * nk);
        if (r.empty()) continue;
        for (std::int64_t ck = r.lo / nk; ck <= r.hi / nk && missing > 0; ++ck) {
          const int t = (q_owner[cq] - k_owner[ck] + P) % P;
          if (t != 0 && !seen[t]) seen[t] = true, --missing;
        }
      }
    }
    for (int t = 1; t < P; ++t)
      if (seen[t]) out.push_back(t);
    return out;
  }

  // The keys of key segment ks (one piece of every sequence) that the query segments qsegs see:
  // per sequence the interval its queries there see of its part, as parts of ks (global, local
  // in the owner's piece-major array), in order, merged where they touch.
  std::vector<Segment> needed_of(const Options& opt, const std::vector<Segment>& qsegs, const Segment& ks) const {
    if (Uq == 0 || Uk == 0 || ks.length == 0) return {};
    const std::int64_t ck = ks.global / Uk;
    std::vector<KeyRange> seen;
    for (const Segment& qs : qsegs) {
      const std::int64_t cq = qs.global / Uq;
      for (std::size_t b = 0; b < piece.q_len.size(); ++b) {
        KeyRange r = visible_keys(part_options(opt, b, cq, ck), piece.q_len[b], piece.kv_len[b]);
        if (r.empty()) continue;
        r.lo += kv_offsets[b], r.hi += kv_offsets[b];
        seen.push_back(r);
      }
    }
    return parts_of(ks, std::move(seen));
  }
  // What `owner` sends `dest`: the parts of its key segments that dest's queries see.
  std::vector<Segment> needed(const Options& opt, const GlobalSplit& s, int dest, int owner) const {
    std::vector<Segment> out;
    const std::vector<Segment> qsegs = s.q_layout.segments_of(dest);
    for (const Segment& ks : s.kv_layout.segments_of(owner))
      for (const Segment& p : needed_of(opt, qsegs, ks)) out.push_back(p);
    return out;
  }
};

// Where a step's keys lie in the buffer they are received into ([batch][held][row]). The dense
// ring packs its pieces one after the other and folds each. A ragged batch's pieces are parts of
// whole key segments: each segment gets `Uk` rows, in order, every part at its offset there,
// and the fold runs on whole segments (the ragged call's offsets are a whole piece's), the rows
// no query sees left zero (`sparse`: the buffer must be cleared before the receive).
struct Landing {
  std::vector<Segment> keys;           // what the fold takes, in order
  std::vector<std::int64_t> keys_at;   // the first row of each
  std::vector<std::int64_t> pieces_at; // the first row of each received piece
  std::int64_t held = 0;
  bool sparse = false;
};

template <class MemorySpace>
Landing landing(const std::vector<Segment>& in, const RaggedPieces<MemorySpace>* ragged) {
  Landing l;
  if (!ragged) {
    for (const Segment& pc : in) {
      l.keys.push_back(pc), l.keys_at.push_back(l.held), l.pieces_at.push_back(l.held);
      l.held += pc.length;
    }
    return l;
  }
  std::int64_t received = 0;
  for (const Segment& pc : in) {
    if (l.keys.empty() || pc.global >= l.keys.back().global + l.keys.back().length) {
      const Segment& seg = ragged->key_pieces[pc.global / ragged->Uk];
      l.keys.push_back(seg), l.keys_at.push_back(l.held);
      l.held += seg.length;
    }
    l.pieces_at.push_back(l.keys_at.back() + (pc.global - l.keys.back().global));
    received += pc.length;
  }
  l.sparse = received < l.held;
  return l;
}

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
RaggedPieces<MemorySpace> ragged_pieces(MPI_Comm comm, const BatchLengths& local, const DistOptions& d) {
  using namespace ragged_detail;
  const std::vector<std::int64_t> q_local = kattn::detail::indptr_of(local.q_len),
                                  kv_local = kattn::detail::indptr_of(local.kv_len);
  require_same_everywhere(comm, q_local, "q_indptr");
  require_same_everywhere(comm, kv_local, "kv_indptr");
  // From here on every rank holds the same offsets, so every check below throws alike.
  int P = 1;
  MPI_Comm_size(comm, &P);
  RaggedPieces<MemorySpace> rp;
  rp.units = d.sharding == Sharding::zigzag ? 2 : 1;
  rp.pieces = P * rp.units;
  rp.q_local = q_local, rp.kv_local = kv_local;
  const std::vector<std::int64_t>& q_len = local.q_len, &kv_len = local.kv_len;
  for (std::size_t b = 0; b < q_len.size(); ++b) {
    KATTN_REQUIRE(q_len[b] % rp.units == 0 && kv_len[b] % rp.units == 0, "q_indptr: zigzag sharding holds two "
                  "equal pieces of every sequence on each rank, so local lengths must be even; sequence ", b, " has ",
                  q_len[b], " queries and ", kv_len[b], " keys here");
  }
  rp.Uq = q_local.back() / rp.units;
  rp.Uk = kv_local.back() / rp.units;
  rp.piece.q_len = divided(q_len, rp.units);
  rp.piece.kv_len = divided(kv_len, rp.units);
  rp.q_offsets = divided(q_local, rp.units);
  rp.kv_offsets = divided(kv_local, rp.units);
  rp.q_indptr = kattn::detail::device_index<MemorySpace>(rp.q_offsets, "dist::ragged::q_indptr");
  rp.kv_indptr = kattn::detail::device_index<MemorySpace>(rp.kv_offsets, "dist::ragged::kv_indptr");
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
  if (rp.Uk > 0) {
    rp.key_pieces.resize(s.kv_layout.segments().size());
    for (const Segment& seg : s.kv_layout.segments()) rp.key_pieces[seg.global / rp.Uk] = seg;
  }
  return rp;
}

// The launch of query rows [qg, qg + nq) of a dense sequence of Nq queries against its keys
// [kg, kg + nk) of Nk: one, or none when no pair is visible.
inline PiecePair dense_pair(const Options& opt, std::int64_t qg, std::int64_t nq, std::int64_t Nq, std::int64_t kg,
                            std::int64_t nk, std::int64_t Nk) {
  PiecePair pp;
  const Options o = shard_options(opt, qg, nq, Nq, kg, nk, Nk);
  pp.pairs = double(KeyWindow::from(o).visible_pairs(nq, nk));
  if (pp.pairs > 0) pp.runs.push_back(PieceRun{0, 0, o});
  return pp;
}

// The launches of the dense ring's shard pair, query rows [qg, qg + nq) against keys [kg, kg + nk)
// of the split's sequences: one under the shard's options (shard_math.hpp), or a ragged pair's.
// No run: nothing visible.
template <class MemorySpace>
PiecePair shard_pair(const Options& opt, const GlobalSplit& s, std::int64_t qg, std::int64_t nq, std::int64_t kg,
                     std::int64_t nk, const RaggedPieces<MemorySpace>* ragged) {
  if (ragged) return nq == 0 || nk == 0 ? PiecePair{} : ragged->pair_of(opt, qg / ragged->Uq, kg / ragged->Uk);
  return dense_pair(opt, qg, nq, s.Nq, kg, nk, s.Nk);
}

// The ring's steps for `rank` (ring_steps). A ragged batch's: the shifts at which some sequence's
// queries see keys of another rank, each moving only the parts of its pieces that they see.
template <class MemorySpace>
std::vector<RingStep> ring_plan(const Options& opt, const GlobalSplit& s, int rank,
                                const RaggedPieces<MemorySpace>* ragged) {
  if (!ragged) return ring_steps(opt, s.q_layout, s.kv_layout, rank);
  return ring_steps(ragged->shifts(opt, s), s.q_layout.ranks(), rank,
                    [&](int dest, int owner) { return ragged->needed(opt, s, dest, owner); });
}

// dst row r = src row rows[r] (gather) or dst row rows[r] = src row r (scatter), rows of
// heads x dim values: between the caller's packed order and the piece-major one. Src and Dst may
// differ: a 16-bit value widens to float exactly, a float one is rounded to 16 bits once.
template <class ExecSpace, class Src, class Dst>
struct PermuteRows {
  using Member = typename Kokkos::TeamPolicy<ExecSpace>::member_type;
  Operand<const Src> src;
  Operand<Dst> dst;
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
void permute_rows(const ExecSpace& space, const Rows& rows, bool scatter, Operand<const Src> src, Operand<Dst> dst,
                  int heads, int dim) {
  if (rows.extent(0) == 0 || heads == 0 || dim == 0) return;
  Kokkos::parallel_for("kattn::dist::ragged::permute_rows",
                       Kokkos::TeamPolicy<ExecSpace>(space, static_cast<int>(rows.extent(0)), Kokkos::AUTO),
                       PermuteRows<ExecSpace, Src, Dst>{src, dst, rows.data(), scatter, heads, dim});
}

// The caller's rows (a ragged operand: no batch axis) into the dense piece-major array `dense`.
template <class ExecSpace, class Src, class Dst, class Rows>
void to_piece_major(const ExecSpace& space, const Rows& rows, const Operand<Src>& caller, Dst* dense, int heads,
                    int dim) {
  permute_rows(space, rows, false, Operand<const std::remove_const_t<Src>>(caller), dense_operand(dense, 0, heads, dim),
               heads, dim);
}

// And back.
template <class ExecSpace, class Src, class Dst, class Rows>
void from_piece_major(const ExecSpace& space, const Rows& rows, const Src* dense, const Operand<Dst>& caller, int heads,
                      int dim) {
  permute_rows(space, rows, true, dense_operand(dense, 0, heads, dim), caller, heads, dim);
}

// A flat array of n values for a piece-major copy (inside the caller's collective memory check).
template <class T, class ExecSpace>
Kokkos::View<T*, typename ExecSpace::memory_space> piece_major_array(Workspace* ws, const ExecSpace& space,
                                                                     const char* label, std::uint64_t n) {
  return take_buffer<T, typename ExecSpace::memory_space>(ws, space, label, n);
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
  pm.q = dense_operand(q, nq, H, D), pm.o = dense_operand(o, nq, H, D);
  pm.k = dense_operand(k, nk, Hkv, D), pm.v = dense_operand(v, nk, Hkv, D);
  pm.lse = dense_operand(lse, nq, H, 1);
  return pm;
}

}  // namespace detail
}  // namespace dist
}  // namespace kattn
