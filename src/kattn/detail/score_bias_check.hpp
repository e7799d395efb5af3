// The checks of Options::bias (core/score_bias.hpp) against a call, written once for the forward,
// the backward and the references: the same error, naming the argument, wherever it is refused.
#pragma once

#include <cstdint>

#include "kattn/errors.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace detail {

// The bias s fits [batch or 1, heads or 1, q_len, kv_len]; `note` (may be empty) says where those
// lengths come from.
inline void require_bias_shape(const ScoreBias& s, std::int64_t batch, std::int64_t heads, std::int64_t q_len,
                               std::int64_t kv_len, const char* note) {
  if (!s.active()) return;
  KATTN_REQUIRE((s.batch == 1 || s.batch == batch) && (s.heads == 1 || s.heads == heads) && s.q_len == q_len &&
                    s.kv_len == kv_len,
                "bias: expected [", batch, " or 1, ", heads, " or 1, ", q_len, ", ", kv_len, "]", note, ", got [",
                s.batch, ", ", s.heads, ", ", s.q_len, ", ", s.kv_len, "]");
}

// The bias fits problem p (AttentionParams): [B or 1, Hq or 1, Nq, Nk]; for a ragged batch or a
// paged cache, Nq and Nk are its longest sequence's lengths, each sequence reading its own corner.
// In a cascade's prefix pass (p.requests active) the rows are the requests' queries: [requests or
// 1, Hq or 1, the longest request's queries, Nk].
template <class P>
void require_bias(const Options& opt, const P& p) {
  if (p.requests.active()) {
    require_bias_shape(opt.bias, p.requests.count, p.heads_q, p.requests.longest, p.kv_len,
                       " (the longest request's queries and the shared keys)");
    return;
  }
  const bool packed = p.q_indptr || p.kv_indptr || p.kv_page_indptr;
  require_bias_shape(opt.bias, p.batch, p.heads_q, p.q_len, p.kv_len,
                     packed ? " (the longest sequence's queries and keys)" : "");
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
