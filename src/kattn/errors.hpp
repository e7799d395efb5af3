// kattn::Error: every refusal of bad input, with a message that names the argument.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace kattn {

// Bad input from the caller (shape, dtype, metadata, option). The message names the argument,
// what was expected and what came: "k: expected head dim 128 (from q), got 64".
class Error : public std::invalid_argument {
 public:
  explicit Error(const std::string& what) : std::invalid_argument("kattn: " + what) {}
};

namespace detail {

template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

[[noreturn]] inline void internal_error(const char* cond, const char* file, int line) {
  throw std::logic_error(concat("kattn: internal error: ", cond, " failed at ", file, ":", line));
}

}  // namespace detail
}  // namespace kattn

// Refuse bad input: KATTN_REQUIRE(k.extent(3) == d, "k: expected head dim ", d, ", got ", k.extent(3)).
#define KATTN_REQUIRE(cond, ...)                               \
  do {                                                         \
    if (!(cond)) throw ::kattn::Error(::kattn::detail::concat(__VA_ARGS__)); \
  } while (0)

// Internal invariant (a bug in kattn if it fails), with the condition and file:line.
#define KATTN_ASSERT(cond)                                                   \
  do {                                                                       \
    if (!(cond)) ::kattn::detail::internal_error(#cond, __FILE__, __LINE__); \
  } while (0)
