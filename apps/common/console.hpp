// How a command talks: human text on standard output, or on standard error under --json (standard
// output then holds the JSON document and nothing else); --quiet turns off the progress line and
// the threads notice, --progress forces the progress line where standard error is not a terminal.
#pragma once

#include <cstdio>

#include "args.hpp"
#include "json.hpp"
#include "threads_notice.hpp"

namespace kattn {
namespace cli {

struct Console {
  bool json = false, quiet = false, progress = false;

  std::FILE* text() const { return json ? stderr : stdout; }
  // The threads notice: a "notice" field under --json, else once on standard error unless --quiet.
  void notice(Json& j) const {
    const std::string n = threads_notice();
    if (n.empty()) return;
    if (json)
      j.add("notice", n.substr(7));  // without "kattn: "
    else if (!quiet)
      print_threads_notice_once();
  }
  // The JSON document, alone on standard output.
  void finish(const Json& j) const {
    if (json) std::printf("%s\n", j.str().c_str());
  }
};

inline Console read_console(Args& args) {
  Console c;
  c.json = args.flag("--json");
  c.quiet = args.flag("--quiet");
  c.progress = args.flag("--progress");
  return c;
}

}  // namespace cli
}  // namespace kattn
