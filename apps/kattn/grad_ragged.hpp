// What `kattn grad` on a ragged batch shares with `grad --dist ring` (cmd_grad.cpp's ragged kind
// and the distributed grad, dist_shard.cpp): where dO comes from (--do [total_q, Hq, D] or drawn), the float64
// textbook backward run per sequence, and --dq-strategy.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "batch_inputs.hpp"
#include "grad_check.hpp"
#include "kattn/backward_options.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace cli {

// Where dO of a ragged batch comes from: --do DO.npy [total_q, Hq, D] (its header checked against
// q), or drawn from the seed when the inputs are drawn.
struct RaggedDout {
  std::optional<std::string> file;
  io::NpyHeader header;
  std::uint64_t seed = 0;
};
RaggedDout ragged_dout_source(const std::optional<std::string>& do_file, const std::optional<std::string>& seed,
                              bool files, bool dtype_given, const BatchInputs& in);
// Its rows `rows` (packed indices; every row when null), rounded to the batch's type.
std::vector<double> ragged_dout(const RaggedDout& src, const BatchInputs& in,
                                const std::vector<std::int64_t>* rows = nullptr);

// The float64 textbook backward of a ragged batch, sequence by sequence, in packed order (dsinks
// summed over the sequences).
GradientSet ragged_textbook_backward(const BatchInputs& in, const StoredValues& dout, const Options& opt);

// --dq-strategy auto|key-chunks|query-pass|atomic (grad and grad --dist).
DqStrategy parse_dq_strategy(const std::string& s);

}  // namespace cli
}  // namespace kattn
