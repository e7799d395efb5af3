// The measurements of a distributed call made of inner calls (hybrid's rings, a ragged batch's
// sequences in deterministic mode): the inner calls' work, traffic and steps added up. Internal.
#pragma once

#include "kattn/distributed/options.hpp"

namespace kattn {
namespace dist {
namespace detail {

// Everything but the wall clock (the outer call's own) and staging (the outer call's to say).
inline void accumulate(DistStats& into, const DistStats& s) {
  into.compute_seconds += s.compute_seconds;
  into.compute_cpu_seconds += s.compute_cpu_seconds;
  into.comm_seconds += s.comm_seconds;
  into.bytes_sent += s.bytes_sent;
  into.messages_sent += s.messages_sent;
  into.flops += s.flops;
  into.steps += s.steps;
}

}  // namespace detail
}  // namespace dist
}  // namespace kattn
