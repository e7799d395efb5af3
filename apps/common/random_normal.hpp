// The programs' random inputs: one seeded stream of unit normal values, the same on every machine
// (std::mt19937_64 is specified; so is its use here, one draw per value in order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kattn {
namespace cli {

// n values of the unit normal distribution drawn from a std::mt19937_64 seeded with `seed`.
std::vector<double> random_normal(std::size_t n, std::uint64_t seed);

}  // namespace cli
}  // namespace kattn
