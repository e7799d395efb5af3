// kattn run --cascade: requests that share a prefix (--k-prefix KP.npy --v-prefix VP.npy
// [Np, Hkv, D], or --random-prefix NP with random requests) each with their own suffix keys as a
// ragged batch; kattn::attention over kv::cascade attends the prefix once for all queries, then each suffix, and
// merges. --check compares with attention over prefix + suffix, row by row in float64. --dtype
// bf16|f16 (or float16 files) as for ragged runs: the prefix in the run's type, lse in float32.
// --sinks, --alibi-slopes and --bias (in opt) as for ragged runs over prefix + suffix: the bias is
// [B or 1, Hq or 1, max Nq, Np + max suffix], each request's queries over its prefix and suffix.
#pragma once

#include <optional>
#include <string>

#include "args.hpp"
#include "console.hpp"
#include "kattn/options.hpp"
#include "run_check.hpp"

namespace kattn {
namespace cli {

inline bool wants_cascade(const Args& args) { return args.has("--cascade"); }

int run_cascade(Args& args, const std::string& algo, const Options& opt, const CheckSettings& check,
                const Console& console, const std::optional<std::string>& out_path,
                const std::optional<std::string>& lse_path);

}  // namespace cli
}  // namespace kattn
