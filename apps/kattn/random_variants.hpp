// The word `random` (and `standard` for ALiBi) in place of a file for --sinks, --alibi-slopes and
// --bias: score variants drawn for random inputs from the run's --seed, so that the flags alone
// reproduce a run, on every rank alike. Each variant draws from a stream of its own: adding one
// changes neither q, k, v nor the others.
#pragma once

#include <cstdint>
#include <vector>

#include "args.hpp"
#include "npy_rows.hpp"

namespace kattn {
namespace cli {

constexpr const char* kRandomWord = "random";

// What a variant is drawn for: the dims of --random B,NQ,NK,HQ,HKV,D, or the heads of
// --random-ragged HQ,HKV,D (dense false: B, Nq, Nk stay 0), and --seed. Peeked, not taken: the
// inputs are read later. Refused, naming `what`, for file inputs.
struct RandomProblem {
  std::int64_t B = 0, Nq = 0, Nk = 0, Hq = 0;
  std::uint64_t seed = 0;
  bool dense = false;
};
RandomProblem random_problem(const Args& args, const char* what);

// --sinks random: one unit-normal logit per query head.
std::vector<double> random_sinks(const RandomProblem& r);
// --alibi-slopes random: one slope per query head, uniform in [1/256, 1/2] (the range of the
// paper's slopes for 8 heads).
std::vector<double> random_slopes(const RandomProblem& r);
// --bias random: unit-normal values [B, Hq, Nq, Nk] in C order (stored as float32 by the caller);
// with `slice` (a BiasSlice's block of that shape), only its values, the same as the whole draw's.
std::vector<double> random_bias(const RandomProblem& r, const RowBlock* slice = nullptr);

}  // namespace cli
}  // namespace kattn
