// The collective checks every distributed entry point runs before its first transfer: the same
// problem (dtype, heads, head dim, options) on every rank, and local lengths that match the
// global split. Internal.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kattn/backward_options.hpp"
#include "kattn/backward_params.hpp"
#include "kattn/core/attention_params.hpp"
#include "kattn/detail/score_bias_check.hpp"
#include "kattn/distributed/collective.hpp"
#include "kattn/distributed/options.hpp"
#include "kattn/distributed/layout.hpp"
#include "kattn/errors.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace dist {
namespace detail {

// Which distributed call a rank is in (the scheme, the pass and the kv kind): every rank must be
// in the same one.
enum class DistCall : int {
  ring_forward = 0,
  ring_backward = 1,
  sharded_kv_forward = 2,
  ulysses_forward = 3,
  ulysses_backward = 4,
  hybrid_forward = 5,
  hybrid_backward = 6,
  ring_ragged_forward = 7,
  ring_ragged_backward = 8,
  grid_forward = 9,
  grid_ragged_forward = 10,
  grid_backward = 11,
  grid_ragged_backward = 12
};

// Which call this rank is in, as the first field every call agrees on.
inline Agreed call_field(DistCall call) {
  return Agreed::integer("call",
                         "distributed call (0 ring forward, 1 ring backward, 2 sharded-kv forward, 3 ulysses forward, "
                         "4 ulysses backward, 5 hybrid forward, 6 hybrid backward, 7 ring forward over a ragged "
                         "batch, 8 ring backward over a ragged batch, 9 grid forward, 10 grid forward over a "
                         "ragged batch, 11 grid backward, 12 grid backward over a ragged batch)",
                         static_cast<int>(call));
}

// The fields every distributed call agrees on first: the call itself, then the problem and options.
// The dtypes are those of the params: q's as computed (16-bit queries are widened to float first),
// k's as stored and sent.
template <class Q, class T, class KV>
std::vector<Agreed> problem_fields(DistCall call, const AttentionParams<Q, T, KV>& p, const Options& opt,
                                   const DistOptions& d) {
  std::vector<Agreed> f = {call_field(call),
                           Agreed::dtype<Q>("q"),
                           Agreed::dtype<KV>("k"),
                           Agreed::integer("q", "batch", p.batch),
                           Agreed::integer("q", "heads", p.heads_q),
                           Agreed::integer("k", "KV heads", p.heads_kv),
                           Agreed::integer("q", "head dim", p.head_dim)};
  for (const Agreed& a : option_fields(opt, d)) f.push_back(a);
  return f;
}

// The fields a backward agrees on: the problem's and the backward options.
template <class T>
std::vector<Agreed> backward_fields(DistCall call, const BackwardParams<T>& p, const Options& opt, const DistOptions& d,
                                    const BackwardOptions& bopt) {
  std::vector<Agreed> fields = problem_fields(call, p.fwd, opt, d);
  fields.push_back(Agreed::boolean("backward options", "deterministic", bopt.deterministic));
  fields.push_back(Agreed::integer("backward options", "dq strategy", static_cast<int>(bopt.dq)));
  fields.push_back(Agreed::integer("backward options", "dq_chunks", bopt.dq_chunks));
  fields.push_back(Agreed::integer("options", "block_q", opt.block_q));
  return fields;
}

// Collective: a rank passes the bias (Options::bias) of the scores it computes, p's query rows and
// heads over `keys`, [B or 1, p.heads_q or 1, p.q_len, keys], and its gradient (dbias, or none) the
// same shape. The ring: its query rows over every key of the sequence (keys = Nk, after the split);
// sharded_kv: every query row (they are replicated) over its own keys (keys = p.kv_len); ulysses:
// its Hq/P query heads over every query row and key (p those heads over Nq rows, keys = Nk);
// hybrid: its Hq/U query heads over its group's query rows and every key (head_sharded.cpp).
template <class P>
void require_sharded_bias(MPI_Comm comm, const P& p, std::int64_t keys, const Options& opt,
                          const ScoreBiasGradient& dbias = {}) {
  collective_check(comm, [&] {
    P whole = p;
    whole.kv_len = keys;
    kattn::detail::require_bias(opt, whole);
    kattn::detail::require_bias_gradient(opt, dbias);
  });
}

// After collective_agree, so that every rank throws alike: a block mask is not sharded.
inline void require_no_block_mask(const Options& opt) {
  KATTN_REQUIRE(opt.block_mask == nullptr, "block_mask: the distributed calls take none");
}

// Local lengths of every rank, their sums, and the layout they must follow.
struct GlobalSplit {
  std::vector<std::int64_t> q_lens, kv_lens;
  std::int64_t Nq = 0, Nk = 0;
  SequenceLayout q_layout, kv_layout;
};

// Throws the same kattn::Error on every rank when a rank's lengths (every rank's, lens[r]) are not
// those of the layout. `where` ("sequence 3 ") and `hint` (how to get them right) go into the message.
inline void require_layout(const std::vector<std::int64_t>& lens, const SequenceLayout& layout, const char* argument,
                           const char* what, const std::string& where = {}, const char* hint = "") {
  for (int r = 0; r < layout.ranks(); ++r)
    KATTN_REQUIRE(lens[r] == layout.local_length(r), argument, ": ", where, "expected ", layout.local_length(r), " ",
                  what, " on rank ", r, " (", layout.describe(), hint, "), got ", lens[r]);
}

// Every rank's local lengths, checked against `layout(N, P)` (the same kattn::Error on every rank).
template <class Layout>
GlobalSplit global_split(MPI_Comm comm, std::int64_t q_len, std::int64_t kv_len, const Layout& layout) {
  GlobalSplit s;
  s.q_lens = allgather(comm, q_len);
  s.kv_lens = allgather(comm, kv_len);
  for (std::size_t r = 0; r < s.q_lens.size(); ++r) s.Nq += s.q_lens[r], s.Nk += s.kv_lens[r];
  const int P = static_cast<int>(s.q_lens.size());
  s.q_layout = layout(s.Nq, P);
  s.kv_layout = layout(s.Nk, P);
  require_layout(s.q_lens, s.q_layout, "q", "query positions");
  require_layout(s.kv_lens, s.kv_layout, "k", "key positions");
  return s;
}

// The ring's and ulysses' split (sharded_layout).
inline GlobalSplit sharded_split(MPI_Comm comm, std::int64_t q_len, std::int64_t kv_len, const DistOptions& d) {
  return global_split(comm, q_len, kv_len, [&](std::int64_t N, int P) { return sharded_layout(N, P, d); });
}

// The first steps of a dense ring or grid call, on every rank alike: the call agreed (its fields),
// a block mask refused, the global split.
inline GlobalSplit enter_sharded_call(MPI_Comm comm, const std::vector<Agreed>& fields, const Options& opt,
                                      std::int64_t q_len, std::int64_t kv_len, const DistOptions& d) {
  collective_agree(comm, fields);
  require_no_block_mask(opt);
  return sharded_split(comm, q_len, kv_len, d);
}

}  // namespace detail
}  // namespace dist
}  // namespace kattn
