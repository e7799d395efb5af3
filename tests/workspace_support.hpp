// Checks of calls given a kattn::Workspace (Options::workspace), single-process and distributed.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>

#include "kattn/options.hpp"
#include "kattn/workspace.hpp"

namespace kattn {
namespace test {

// One call on problem `which` (0 or 1: the same shapes, other values) taking its buffers from ws
// (or none): the bytes of its outputs.
using WorkspaceRun = std::function<std::string(Workspace* ws, int which)>;

// opt taking its buffers from ws.
inline Options using_workspace(Options opt, Workspace* ws) {
  opt.workspace = ws;
  return opt;
}

// run on problem 0 without a workspace, then with one: problem 0, problem 1 (which leaves its own
// values in the buffers), problem 0 again. Problem 0 gives the same bits each time, and its
// repeated call allocates nothing, unless `timed`: how many buffers some calls hold at once
// depends on message timing (the distributed deterministic backward's key packages).
inline void expect_reused(const std::string& what, const WorkspaceRun& run, bool timed = false) {
  SCOPED_TRACE(what);
  const std::string fresh = run(nullptr, 0);
  Workspace ws;
  const std::string first = run(&ws, 0);
  run(&ws, 1);
  const std::int64_t allocated = ws.allocations();
  const std::uint64_t held = ws.bytes();
  const std::string again = run(&ws, 0);
  EXPECT_TRUE(first == fresh) << "the first call with a workspace differs from one without";
  EXPECT_TRUE(again == fresh) << "a repeated call with a workspace differs from one without";
  EXPECT_GT(allocated, 0) << "the call took nothing from the workspace";
  if (!timed) {
    EXPECT_EQ(ws.allocations(), allocated) << "the repeated call allocated";
    EXPECT_EQ(ws.bytes(), held);
  }
  EXPECT_EQ(ws.idle_bytes(), ws.bytes()) << "a buffer is still held";
  ws.release();
  EXPECT_EQ(ws.bytes(), 0u);
}

}  // namespace test
}  // namespace kattn
