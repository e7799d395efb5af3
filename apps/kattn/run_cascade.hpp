// kattn run --cascade: requests that share a prefix (--k-prefix KP.npy --v-prefix VP.npy
// [Np, Hkv, D], or --random-prefix NP with random requests) each with their own suffix keys as a
// ragged batch; kattn::attention over kv::cascade attends the prefix once for all queries, then each suffix, and
// merges. --check compares with attention over prefix + suffix, row by row in float64. --dtype
// bf16|f16 (or float16 files) as for ragged runs: the prefix in the run's type, lse in float32.
// --sinks, --alibi-slopes and --bias (in opt) as for ragged runs over prefix + suffix: the bias is
// [B or 1, Hq or 1, max Nq, Np + max suffix], each request's queries over its prefix and suffix.
#pragma once

#include "args.hpp"

namespace kattn {
namespace cli {

inline bool wants_cascade(const Args& args) { return args.has("--cascade"); }

// cascade_kind (run_pipeline.hpp) reads the inputs and runs them.

}  // namespace cli
}  // namespace kattn
