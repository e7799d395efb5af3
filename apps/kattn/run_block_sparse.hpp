// `kattn run` with a block mask (--block-mask MASK.npy --mask-block B, or --pattern P).
#pragma once

#include "args.hpp"
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
// The heading's line on a mask (run and grad): "block mask: 4 x 4 blocks of 64, shared, 62.50% kept\n".
std::string block_mask_detail(const BlockMask& m);

}  // namespace cli
}  // namespace kattn
