// The files a command reads and writes, checked before any work starts: an input that is missing
// or a directory, an output whose directory is missing or not writable, is refused with one line
// naming the flag (exit 2), so a long run never fails at the end for a typo.
#pragma once

#include <string>

#include "kattn/io/npy.hpp"

namespace kattn {
namespace cli {

// io::read_npy with the flag in every error: "--q q.npy: is a directory, expected an .npy file".
io::NpyArray read_input(const std::string& flag, const std::string& path);
// The same checks and messages for the header alone (the rows are read later, in place).
io::NpyHeader read_input_header(const std::string& flag, const std::string& path);

// Throws unless `path` can be created or overwritten as a file.
void check_output_file(const std::string& flag, const std::string& path);

// Creates directory `dir` (and its parents) unless it exists; throws unless it is a writable directory.
void make_output_dir(const std::string& flag, const std::string& dir);

}  // namespace cli
}  // namespace kattn
