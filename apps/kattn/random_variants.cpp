#include "random_variants.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <limits>
#include <random>
#include <string>

#include "inputs.hpp"
#include "kattn/errors.hpp"
#include "kattn/memory.hpp"

namespace kattn {
namespace cli {
namespace {

// The variants' streams: the seed xor a tag of their own (q, k, v and dO draw from 3 seed + 1 ...
// 3 seed + 4, inputs.cpp).
constexpr std::uint64_t kSinksStream = 0x73696e6b0000, kSlopesStream = 0x616c69620000, kBiasStream = 0x626961730000;

}  // namespace

RandomProblem random_problem(const Args& args, const char* what) {
  // A copy takes the flags, so that the parser's own checks and messages apply.
  Args peek = args;
  RandomProblem r;
  // Negative dims count as 0 here: the inputs' own reading refuses them with its message.
  const auto dim = [](std::int64_t n) { return std::max<std::int64_t>(n, 0); };
  if (const auto dense = peek.integers("--random", 6)) {
    r.B = dim((*dense)[0]), r.Nq = dim((*dense)[1]), r.Nk = dim((*dense)[2]), r.Hq = dim((*dense)[3]);
    r.dense = true;
  } else if (const auto ragged = peek.integers("--random-ragged", 3)) {
    r.Hq = dim((*ragged)[0]);
  } else {
    KATTN_REQUIRE(false, what,
                  ": goes with random inputs (--random or --random-ragged), whose flags give the shape; "
                  "with input files give a .npy file");
  }
  r.seed = static_cast<std::uint64_t>(peek.integer("--seed", 0, std::numeric_limits<std::int64_t>::max()).value_or(0));
  return r;
}

std::vector<double> random_sinks(const RandomProblem& r) {
  return random_normal(static_cast<std::size_t>(r.Hq), r.seed ^ kSinksStream);
}

std::vector<double> random_slopes(const RandomProblem& r) {
  std::mt19937_64 gen(r.seed ^ kSlopesStream);
  std::uniform_real_distribution<double> slope(1.0 / 256, 0.5);
  std::vector<double> out(static_cast<std::size_t>(r.Hq));
  for (double& s : out) s = slope(gen);
  return out;
}

std::vector<double> random_bias(const RandomProblem& r, const RowBlock* slice) {
  // In double: the product of huge dims must not wrap before it is refused.
  const double n = double(r.B) * double(r.Hq) * double(r.Nq) * double(r.Nk);
  KATTN_REQUIRE(n < 4e9, "--bias random: ", n, " elements is more than this program will draw");
  const RowBlock rows = slice ? *slice : RowBlock{r.B * r.Hq, r.Nq, r.Nk, {{0, 0, r.Nq}}};
  kattn::check_memory<Kokkos::HostSpace>(12 * std::uint64_t(rows.local_size()), "--bias random",
                                         "a [B, Hq, Nq, Nk] bias drawn in float64, kept in float32",
                                         "use smaller shapes or a broadcast bias file");
  if (!slice) return random_normal(static_cast<std::size_t>(n), r.seed ^ kBiasStream);
  return random_normal_rows(rows, r.seed ^ kBiasStream);
}

}  // namespace cli
}  // namespace kattn
