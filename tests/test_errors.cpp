// Bad input: every malformed argument gives a kattn::Error whose message names it.
#include <gtest/gtest.h>

#include <string>

#include "kattn/errors.hpp"
#include "kattn/attention.hpp"
#include "kattn/reference.hpp"
#include "support.hpp"

namespace kattn {
namespace test {
namespace {

struct Views {
  View4<double> q{"q", 2, 8, 4, 16}, k{"k", 2, 9, 2, 16}, v{"v", 2, 9, 2, 16}, o{"o", 2, 8, 4, 16};
  View3<double> lse{"lse", 2, 4, 8};
};

void run(const Views& x, const Options& opt = {}) {
  attention(TestSpace(), x.q, kv::dense(x.k, x.v), x.o, x.lse, one_split(opt));
}

TEST(Errors, ShapeMismatchesNameTheArgument) {
  Views x;
  EXPECT_NO_THROW(run(x));
  {
    Views y;
    y.k = View4<double>("k", 3, 9, 2, 16);
    expect_error([&] { run(y); }, {"k:", "batch 2", "got 3"});
  }
  {
    Views y;
    y.k = View4<double>("k", 2, 9, 2, 8);
    expect_error([&] { run(y); }, {"k:", "head dim 16", "got 8"});
  }
  {
    Views y;
    y.k = View4<double>("k", 2, 9, 3, 16);
    y.v = View4<double>("v", 2, 9, 3, 16);
    expect_error([&] { run(y); }, {"q:", "multiple of the 3 KV heads", "got 4"});
  }
  {
    Views y;
    y.v = View4<double>("v", 2, 10, 2, 16);
    expect_error([&] { run(y); }, {"v:", "sequence length 9", "got 10"});
  }
  {
    Views y;
    y.v = View4<double>("v", 2, 9, 1, 16);
    expect_error([&] { run(y); }, {"v:", "KV heads 2", "got 1"});
  }
  {
    Views y;
    y.o = View4<double>("o", 2, 7, 4, 16);
    expect_error([&] { run(y); }, {"o:", "sequence length 8", "got 7"});
  }
  {
    Views y;
    y.lse = View3<double>("lse", 2, 8, 4);
    expect_error([&] { run(y); }, {"lse:", "heads 4", "got 8"});
  }
  {
    Views y;
    y.q = View4<double>("q", 2, 8, 4, 0);
    y.k = View4<double>("k", 2, 9, 2, 0);
    y.v = View4<double>("v", 2, 9, 2, 0);
    y.o = View4<double>("o", 2, 8, 4, 0);
    expect_error([&] { run(y); }, {"q:", "head dim of at least 1", "got 0"});
  }
  {
    Views y;
    y.k = View4<double>("k", 2, 9, 0, 16);
    y.v = View4<double>("v", 2, 9, 0, 16);
    expect_error([&] { run(y); }, {"k:", "at least one KV head"});
  }
}

TEST(Errors, NonContiguousHeadDimIsRefused) {
  Views x;
  View5<double> big("big", 2, 8, 4, 16, 2);
  auto q = Kokkos::subview(big, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL, Kokkos::ALL, 0);
  expect_error([&] { attention(TestSpace(), q, kv::dense(x.k, x.v), x.o, x.lse, one_split(Options{})); },
               {"q:", "contiguous", "stride 2"});
}

TEST(Errors, BadOptionsNameTheOption) {
  Views x;
  Options o;
  o.window_left = -2;
  expect_error([&] { run(x, o); }, {"window", "got -2"});
  o = Options{};
  o.window_right = -5;
  expect_error([&] { run(x, o); }, {"window", "got -5"});
  o = Options{};
  o.softcap = -1;
  expect_error([&] { run(x, o); }, {"softcap", "got -1"});
  o = Options{};
  o.softcap = std::numeric_limits<double>::infinity();
  expect_error([&] { run(x, o); }, {"softcap"});
  o = Options{};
  o.scale = std::nan("");
  expect_error([&] { run(x, o); }, {"scale"});
  o = Options{};
  o.block_q = -1;
  expect_error([&] { run(x, o); }, {"block_q", "got -1"});
  o = Options{};
  o.block_k = -3;
  expect_error([&] { run(x, o); }, {"block_k", "got -3"});
  o = Options{};
  o.block_q = 1 << 20;
  o.block_k = 1 << 20;
  expect_error([&] { run(x, o); }, {"block_q/block_k", "shrink"});
}

TEST(Errors, ReferenceValidatesToo) {
  Views y;
  y.k = View4<double>("k", 3, 9, 2, 16);
  expect_error([&] { reference(TestSpace(), y.q, y.k, y.v, y.o, y.lse); }, {"k:", "batch"});
}

}  // namespace
}  // namespace test
}  // namespace kattn
