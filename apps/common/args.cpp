#include "args.hpp"

#include <cstdio>
#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "kattn/errors.hpp"

namespace kattn {
namespace cli {

bool Args::has(const std::string& name) const {
  for (const std::string& a : args_)
    if (a == name || a.rfind(name + "=", 0) == 0) return true;
  return false;
}

std::optional<std::string> Args::peek(const std::string& name) const {
  for (auto it = args_.begin(); it != args_.end(); ++it) {
    if (*it == name && it + 1 != args_.end()) return *(it + 1);
    if (it->rfind(name + "=", 0) == 0) return it->substr(name.size() + 1);
  }
  return std::nullopt;
}

bool Args::flag(const std::string& name) {
  for (auto it = args_.begin(); it != args_.end(); ++it) {
    if (*it == name) {
      args_.erase(it);
      return true;
    }
  }
  return false;
}

std::optional<std::string> Args::value(const std::string& name) {
  for (auto it = args_.begin(); it != args_.end(); ++it) {
    if (*it == name) {
      KATTN_REQUIRE(it + 1 != args_.end(), name, ": expected a value");
      std::string v = *(it + 1);
      args_.erase(it, it + 2);
      return v;
    }
    if (it->rfind(name + "=", 0) == 0) {
      std::string v = it->substr(name.size() + 1);
      args_.erase(it);
      return v;
    }
  }
  return std::nullopt;
}

std::int64_t parse_integer(const std::string& text, const std::string& what, std::int64_t min, std::int64_t max) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  KATTN_REQUIRE(!text.empty() && end && *end == '\0' && errno == 0, what, ": expected an integer, got '", text, "'");
  KATTN_REQUIRE(v >= min && v <= max, what, ": expected an integer in [", min, ", ", max, "], got ", v);
  return v;
}

double parse_number(const std::string& text, const std::string& what) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  KATTN_REQUIRE(!text.empty() && end && *end == '\0' && errno == 0 && std::isfinite(v), what,
                ": expected a finite number, got '", text, "'");
  return v;
}

std::optional<std::int64_t> Args::integer(const std::string& name, std::int64_t min, std::int64_t max) {
  auto v = value(name);
  if (!v) return std::nullopt;
  return parse_integer(*v, name, min, max);
}

std::optional<double> Args::number(const std::string& name) {
  auto v = value(name);
  if (!v) return std::nullopt;
  return parse_number(*v, name);
}

std::optional<std::vector<std::int64_t>> Args::integers(const std::string& name, std::size_t count) {
  auto v = value(name);
  if (!v) return std::nullopt;
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = v->find(',', start);
    out.push_back(parse_integer(v->substr(start, comma - start), name, INT64_MIN, INT64_MAX));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  KATTN_REQUIRE(out.size() == count, name, ": expected ", count, " comma-separated integers, got '", *v, "'");
  return out;
}

void refuse_out_of_mode(const Args& args, std::initializer_list<std::pair<const char*, const char*>> flags) {
  for (const auto& f : flags) KATTN_REQUIRE(!args.has(f.first), f.first, ": needs ", f.second);
}

void Args::finish() const {
  if (args_.empty()) return;
  KATTN_REQUIRE(false, "unknown or repeated argument '", args_.front(), "' for 'kattn ", command_,
                "' (see kattn ", command_, " --help)");
}

bool Args::help(const char* usage) {
  if (!flag("--help")) return false;
  std::fputs(usage, stdout);
  return true;
}

}  // namespace cli
}  // namespace kattn
