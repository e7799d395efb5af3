#include "random_normal.hpp"

#include <random>

namespace kattn {
namespace cli {

std::vector<double> random_normal(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  std::vector<double> out(n);
  for (auto& x : out) x = dist(gen);
  return out;
}

}  // namespace cli
}  // namespace kattn
