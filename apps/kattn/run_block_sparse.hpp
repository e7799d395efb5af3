// `kattn run` with a block mask (--block-mask MASK.npy --mask-block B, or --pattern P).
#pragma once

#include <optional>
#include <string>

#include "args.hpp"
#include "bias_tensor.hpp"
#include "console.hpp"
#include "run_check.hpp"
#include "inputs.hpp"
#include "kattn/block_mask.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace cli {

// Whether the arguments ask for block-sparse attention.
inline bool wants_block_sparse(const Args& args) { return args.has("--block-mask") || args.has("--pattern"); }

// The mask from --block-mask MASK.npy (bool, uint8 or integer [Nq/B, Nk/B] or [Hq, Nq/B, Nk/B])
// with --mask-block B, or from --pattern P (--mask-block defaults to 64), for inputs `in`.
BlockMask read_block_mask(Args& args, const DenseInputs& in);

// Reads the dense inputs and the mask, runs `algo` (naive, flash or splitkv), reports; returns
// the exit status (3: --check failed). `bias`: opt's bias tensor, whose host copy the host
// references read.
int run_block_sparse(Args& args, const std::string& algo, const Options& opt, const BiasTensor& bias,
                     const CheckSettings& check,
                     const Console& console, const std::optional<std::string>& out_path,
                     const std::optional<std::string>& lse_path);

}  // namespace cli
}  // namespace kattn
