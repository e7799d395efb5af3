// kattn grad on a ragged batch (--random-ragged ... or --q/--k/--v with --q-indptr and
// --kv-indptr, as `kattn run` takes them; --do [total_q, Hq, D] or drawn): the split-KV forward,
// then kattn::attention_backward; --check against the float64 textbook backward run per sequence.
#pragma once

#include <optional>
#include <string>

#include "args.hpp"
#include "console.hpp"
#include "kattn/backward_options.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace cli {

struct GradPaths {
  std::optional<std::string> dq, dk, dv;
};

int grad_ragged(Args& args, const Options& opt, const BackwardOptions& bopt, bool check, const Console& console,
                const GradPaths& paths);

}  // namespace cli
}  // namespace kattn
