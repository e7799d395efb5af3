#include "kattn/distributed/options.hpp"

#include "kattn/errors.hpp"
#include <cstdint>

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
    case Scheme::grid:
      return "grid";
  }
  return "?";
}

Scheme scheme_named(const std::string& name, const char* argument) {
  for (Scheme s : {Scheme::ring, Scheme::ulysses, Scheme::hybrid, Scheme::sharded_kv, Scheme::grid})
    if (name == dist::name(s)) return s;
  if (name == "sharded_kv") return Scheme::sharded_kv;
  KATTN_REQUIRE(false, argument, ": expected ring, ulysses, hybrid, sharded-kv or grid, got '", name, "'");
  return Scheme::ring;
}

const char* name(Sharding s) { return s == Sharding::zigzag ? "zigzag" : "contiguous"; }

void validate(const DistOptions& d) {
  const int scheme = static_cast<int>(d.scheme);
  KATTN_REQUIRE(scheme >= static_cast<int>(Scheme::ring) && scheme <= static_cast<int>(Scheme::grid),
                "scheme: expected ring, ulysses, hybrid, sharded_kv or grid, got the value ", scheme);
  KATTN_REQUIRE(d.chunk >= 0, "chunk: expected keys per deterministic chunk >= 1 or 0 (", kDefaultChunk, "), got ",
                d.chunk);
  KATTN_REQUIRE(d.root >= -1, "root: expected a rank number or -1 (every rank), got ", d.root);
  KATTN_REQUIRE(d.ulysses_size >= 0, "ulysses_size: expected ranks per head-sharding group >= 1 or 0 (all), got ",
                d.ulysses_size);
  KATTN_REQUIRE(d.grid.rows >= 0 && d.grid.cols >= 0 && (d.grid.rows == 0) == (d.grid.cols == 0),
                "grid: expected rows and cols >= 1, or both 0 (chosen), got ", d.grid.rows, " x ", d.grid.cols);
}

DistOptions::GridShape grid_shape(int ranks, const DistOptions& d) {
  if (d.grid.rows == 0 && d.grid.cols == 0) {
    int rows = 1;
    for (int r = 1; std::int64_t(r) * r <= ranks; ++r)
      if (ranks % r == 0) rows = r;
    return {rows, ranks / rows};
  }
  KATTN_REQUIRE(d.grid.rows >= 1 && d.grid.cols >= 1 && std::int64_t(d.grid.rows) * d.grid.cols == ranks,
                "grid: expected rows x cols = the ", ranks, " ranks, got ", d.grid.rows, " x ", d.grid.cols);
  return d.grid;
}

}  // namespace dist
}  // namespace kattn
