// --layout bnhd|bhnd: the order of the dims of dense q, k, v, o (and do, dq, dk, dv) in .npy files.
// bnhd = [B, N, H, D] (the default, kattn's own), bhnd = [B, H, N, D] (PyTorch's). Arrays are held
// in bnhd inside the program; files in the other layout are transposed on reading and writing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "args.hpp"

namespace kattn {
namespace cli {

enum class Layout { bnhd, bhnd };

// --layout (default bnhd).
Layout read_layout(Args& args);
const char* name(Layout layout);

// The file shape of a [B, N, H, D] array in `layout`, and N, H read back from a file shape.
std::vector<std::int64_t> file_shape(Layout layout, std::int64_t B, std::int64_t N, std::int64_t H, std::int64_t D);
void positions_and_heads(Layout layout, const std::vector<std::int64_t>& shape, std::int64_t& N, std::int64_t& H);

// Values of a file in `layout` (shape `shape`) in bnhd order, and back.
std::vector<double> to_bnhd(Layout layout, const std::vector<std::int64_t>& shape, std::vector<double> values);
std::vector<double> from_bnhd(Layout layout, std::int64_t B, std::int64_t N, std::int64_t H, std::int64_t D,
                              const std::vector<double>& values);

// "[2, 3, 4]" (brackets "()": "(2, 3, 4)"), for messages.
std::string shape_text(const std::vector<std::int64_t>& shape, const char* brackets = "[]");

// One line on standard error when q read in `layout` gives more than 128 heads and fewer
// positions than heads (no model has that many heads; the file is likely in the other layout).
void warn_if_transposed(const std::string& flag, const std::string& path, Layout layout,
                        const std::vector<std::int64_t>& shape);

}  // namespace cli
}  // namespace kattn
