// The checks of Options::bias (core/score_bias.hpp) against a call, written once for the forward,
// the backward and the references: the same error, naming the argument, wherever it is refused.
#pragma once

#include <cstdint>

#include "kattn/errors.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace detail {

// The bias fits problem p (any params with batch, heads_q, q_len, kv_len and the ragged and paged
// pointers): [B or 1, Hq or 1, Nq, Nk]; for a ragged batch or a paged cache, Nq and Nk are its
// longest sequence's lengths, each sequence reading its own corner.
template <class P>
void require_bias(const Options& opt, const P& p) {
  const ScoreBias& s = opt.bias;
  if (!s.active()) return;
  const bool packed = p.q_indptr || p.kv_indptr || p.kv_page_indptr;
  KATTN_REQUIRE((s.batch == 1 || s.batch == p.batch) && (s.heads == 1 || s.heads == p.heads_q) &&
                    s.q_len == p.q_len && s.kv_len == p.kv_len,
                "bias: expected [", p.batch, " or 1, ", p.heads_q, " or 1, ", p.q_len, ", ", p.kv_len, "]",
                packed ? " (the longest sequence's queries and keys)" : "", ", got [", s.batch, ", ", s.heads, ", ",
                s.q_len, ", ", s.kv_len, "]");
}

// The bias's gradient destination (BackwardOptions::dbias) fits Options::bias: the same shape,
// broadcast dims included; a boolean mask has none.
inline void require_bias_gradient(const Options& opt, const ScoreBiasGradient& dbias) {
  if (!dbias.active()) return;
  const ScoreBias& s = opt.bias;
  KATTN_REQUIRE(s.active(), "dbias: the gradient of a bias, but the call has no bias (Options::bias)");
  KATTN_REQUIRE(s.type != BiasType::boolean, "dbias: a boolean bias (a mask) has no gradient");
  KATTN_REQUIRE(dbias.batch == s.batch && dbias.heads == s.heads && dbias.q_len == s.q_len && dbias.kv_len == s.kv_len,
                "dbias: expected the bias's shape [", s.batch, ", ", s.heads, ", ", s.q_len, ", ", s.kv_len, "], got [",
                dbias.batch, ", ", dbias.heads, ", ", dbias.q_len, ", ", dbias.kv_len, "]");
}

// Refuses a bias where a path cannot take one (`where` names it).
inline void refuse_bias(const Options& opt, const char* where) {
  KATTN_REQUIRE(!opt.bias.active(), "bias: not supported with ", where);
}

}  // namespace detail
}  // namespace kattn
