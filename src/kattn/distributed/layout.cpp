#include "kattn/distributed/layout.hpp"

#include <algorithm>

#include "kattn/errors.hpp"

namespace kattn {
namespace dist {

SequenceLayout::SequenceLayout(std::int64_t length, int ranks, Sharding sharding, std::int64_t align)
    : length_(length), ranks_(ranks), sharding_(sharding), align_(align) {
  KATTN_REQUIRE(length >= 0, "layout: expected a sequence length >= 0, got ", length);
  KATTN_REQUIRE(ranks >= 1, "layout: expected at least one rank, got ", ranks);
  KATTN_REQUIRE(align >= 1, "layout: expected an alignment >= 1, got ", align);
  const int pieces = sharding == Sharding::zigzag ? 2 * ranks : ranks;
  // Whole units of `align` positions, spread as evenly as possible: the first `extra` pieces
  // get one unit more. The last unit may be short (the sequence end).
  const std::int64_t units = (length + align - 1) / align;
  const std::int64_t base = units / pieces, extra = units % pieces;
  std::vector<std::int64_t> local_fill(ranks, 0);
  std::int64_t start = 0;
  for (int g = 0; g < pieces; ++g) {
    const std::int64_t n_units = base + (g < extra ? 1 : 0);
    std::int64_t end = start + n_units * align;
    if (end > length) end = length;
    const int owner = g < ranks ? g : 2 * ranks - 1 - g;
    if (end > start) segments_.push_back(Segment{start, 0, end - start, owner});
    start = end;
  }
  // Local indices: a rank's segments in global order, packed.
  for (Segment& s : segments_) {
    s.local = local_fill[s.owner];
    local_fill[s.owner] += s.length;
  }
}

std::vector<Segment> SequenceLayout::segments_of(int rank) const {
  std::vector<Segment> out;
  for (const Segment& s : segments_)
    if (s.owner == rank) out.push_back(s);
  return out;
}

std::int64_t SequenceLayout::local_length(int rank) const {
  std::int64_t n = 0;
  for (const Segment& s : segments_)
    if (s.owner == rank) n += s.length;
  return n;
}

std::int64_t SequenceLayout::global_position(int rank, std::int64_t local) const {
  for (const Segment& s : segments_)
    if (s.owner == rank && local >= s.local && local < s.local + s.length) return s.global + (local - s.local);
  KATTN_REQUIRE(false, "layout: rank ", rank, " holds no local position ", local);
  return -1;
}

SequenceLayout SequenceLayout::split_each(int members) const {
  KATTN_REQUIRE(members >= 1, "layout: expected at least one member per rank, got ", members);
  SequenceLayout out = *this;
  out.ranks_ = ranks_ * members;
  out.members_ = members_ * members;
  out.segments_.clear();
  for (int r = 0; r < ranks_; ++r) {
    const SequenceLayout parts(local_length(r), members, Sharding::contiguous);
    for (const Segment& s : segments_of(r))
      for (const Segment& part : parts.segments()) {
        // The overlap of the part's local range with this segment's.
        const std::int64_t lo = std::max(s.local, part.global),
                           hi = std::min(s.local + s.length, part.global + part.length);
        if (hi > lo)
          out.segments_.push_back(
              Segment{s.global + (lo - s.local), lo - part.global, hi - lo, r * members + part.owner});
      }
  }
  std::sort(out.segments_.begin(), out.segments_.end(),
            [](const Segment& a, const Segment& b) { return a.global < b.global; });
  return out;
}

std::string SequenceLayout::describe() const {
  const std::string groups = members_ > 1 ? detail::concat(" (", ranks_ / members_, " groups of ", members_,
                                                           ", each group's share cut in ", members_, ")")
                                          : std::string();
  return detail::concat("a ", name(sharding_), " split of ", length_, " positions over ", ranks_, " ranks", groups,
                        align_ > 1 ? detail::concat(" in chunks of ", align_) : std::string());
}

SequenceLayout hybrid_layout(std::int64_t N, int P, const DistOptions& d) {
  const int U = ulysses_ranks(P, d);
  KATTN_REQUIRE(U <= P && P % U == 0, "ulysses_size: expected a divisor of the ", P, " ranks, got ", U);
  return SequenceLayout(N, P / U, d.sharding, shard_align(d)).split_each(U);
}

SequenceLayout layout_of(std::int64_t N, int P, const DistOptions& d) {
  switch (d.scheme) {
    case Scheme::hybrid:
      return hybrid_layout(N, P, d);
    case Scheme::sharded_kv:
      return SequenceLayout(N, P, Sharding::contiguous, shard_align(d));
    default:
      return sharded_layout(N, P, d);
  }
}

}  // namespace dist
}  // namespace kattn
