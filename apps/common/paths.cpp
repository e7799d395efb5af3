#include "paths.hpp"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "kattn/errors.hpp"

namespace kattn {
namespace cli {

namespace fs = std::filesystem;

namespace {

// Runs a reader of `path` with the flag in its errors, after refusing what is no file.
template <class Read>
auto with_flag(const std::string& flag, const std::string& path, Read read) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  KATTN_REQUIRE(fs::exists(st), flag, " ", path, ": cannot open file (no such file)");
  KATTN_REQUIRE(!fs::is_directory(st), flag, " ", path, ": is a directory, expected an .npy file");
  try {
    return read(path);
  } catch (const Error& e) {
    const std::string what = std::string(e.what()).substr(7);  // without "kattn: "
    if (what.rfind(flag, 0) == 0) throw;
    throw Error(flag + " " + what);
  }
}

}  // namespace

io::NpyArray read_input(const std::string& flag, const std::string& path) {
  return with_flag(flag, path, [](const std::string& p) { return io::read_npy(p); });
}

io::NpyHeader read_input_header(const std::string& flag, const std::string& path) {
  return with_flag(flag, path, [](const std::string& p) { return io::read_npy_header(p); });
}

void check_output_file(const std::string& flag, const std::string& path) {
  KATTN_REQUIRE(!path.empty(), flag, ": expected a file name");
  std::error_code ec;
  KATTN_REQUIRE(!fs::is_directory(path, ec), flag, " ", path, ": is a directory, expected a file name");
  const fs::path parent = fs::path(path).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  KATTN_REQUIRE(fs::is_directory(dir, ec), flag, " ", path, ": no directory ", dir, " to write it in");
  KATTN_REQUIRE(::access(dir.c_str(), W_OK) == 0, flag, " ", path, ": directory ", dir, " is not writable");
  KATTN_REQUIRE(!fs::exists(path, ec) || ::access(path.c_str(), W_OK) == 0, flag, " ", path,
                ": the file exists and is not writable");
}

void make_output_dir(const std::string& flag, const std::string& dir) {
  KATTN_REQUIRE(!dir.empty(), flag, ": expected a directory name");
  std::error_code ec;
  if (!fs::exists(dir, ec)) fs::create_directories(dir, ec);
  KATTN_REQUIRE(fs::is_directory(dir, ec), flag, " ", dir, ": cannot create the directory",
                ec ? " (" + ec.message() + ")" : std::string(" (a file of that name exists)"));
  KATTN_REQUIRE(::access(dir.c_str(), W_OK) == 0, flag, " ", dir, ": directory is not writable");
}

}  // namespace cli
}  // namespace kattn
