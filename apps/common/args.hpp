// Command-line arguments of one subcommand: flags are taken by name, and whatever is left at
// the end is refused, so a typo is an error rather than a silently ignored option.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kattn {
namespace cli {

class Args {
 public:
  Args(std::string command, std::vector<std::string> args) : command_(std::move(command)), args_(std::move(args)) {}

  // Whether a flag was given (with or without a value), without taking it.
  bool has(const std::string& name) const;
  // The value of --name VALUE or --name=VALUE, without taking it.
  std::optional<std::string> peek(const std::string& name) const;
  // A boolean flag: present or not.
  bool flag(const std::string& name);
  // A flag with a value: --name VALUE or --name=VALUE.
  std::optional<std::string> value(const std::string& name);
  std::optional<std::int64_t> integer(const std::string& name, std::int64_t min, std::int64_t max);
  std::optional<double> number(const std::string& name);
  // Comma-separated integers, exactly `count` of them.
  std::optional<std::vector<std::int64_t>> integers(const std::string& name, std::size_t count);
  // Throws kattn::Error for anything not taken.
  void finish() const;
  // --help given: prints the command's usage on standard output and returns true.
  bool help(const char* usage);

  const std::string& command() const { return command_; }

 private:
  std::string command_;
  std::vector<std::string> args_;
};

// Refuses a flag given where it means nothing, saying what it needs: for each (flag, needs)
// given, "--zigzag: needs --dist ring".
void refuse_out_of_mode(const Args& args, std::initializer_list<std::pair<const char*, const char*>> flags);

std::int64_t parse_integer(const std::string& text, const std::string& what, std::int64_t min, std::int64_t max);
double parse_number(const std::string& text, const std::string& what);

}  // namespace cli
}  // namespace kattn
