#include "kattn/distributed/options.hpp"

#include "kattn/errors.hpp"

namespace kattn {
namespace dist {

const char* name(Scheme s) {
  switch (s) {
    case Scheme::ring:
      return "ring";
    case Scheme::ulysses:
      return "ulysses";
    case Scheme::hybrid:
      return "hybrid";
    case Scheme::sharded_kv:
      return "sharded-kv";
  }
  return "?";
}

Scheme scheme_named(const std::string& name, const char* argument) {
  for (Scheme s : {Scheme::ring, Scheme::ulysses, Scheme::hybrid, Scheme::sharded_kv})
    if (name == dist::name(s)) return s;
  if (name == "sharded_kv") return Scheme::sharded_kv;
  KATTN_REQUIRE(false, argument, ": expected ring, ulysses, hybrid or sharded-kv, got '", name, "'");
  return Scheme::ring;
}

const char* name(Sharding s) { return s == Sharding::zigzag ? "zigzag" : "contiguous"; }

void validate(const DistOptions& d) {
  const int scheme = static_cast<int>(d.scheme);
  KATTN_REQUIRE(scheme >= static_cast<int>(Scheme::ring) && scheme <= static_cast<int>(Scheme::sharded_kv),
                "scheme: expected ring, ulysses, hybrid or sharded_kv, got the value ", scheme);
  KATTN_REQUIRE(d.chunk >= 0, "chunk: expected keys per deterministic chunk >= 1 or 0 (", kDefaultChunk, "), got ",
                d.chunk);
  KATTN_REQUIRE(d.root >= -1, "root: expected a rank number or -1 (every rank), got ", d.root);
  KATTN_REQUIRE(d.ulysses_size >= 0, "ulysses_size: expected ranks per head-sharding group >= 1 or 0 (all), got ",
                d.ulysses_size);
}

}  // namespace dist
}  // namespace kattn
