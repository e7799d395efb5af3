// The key window (core/key_window.hpp): the visible-pair count every FLOP count, progress line and
// distributed schedule uses equals the pairs its own visible() admits, for any mask and row range.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>

#include "kattn/core/key_window.hpp"
#include "kattn/options.hpp"

namespace kattn {
namespace {

TEST(KeyWindow, VisiblePairsCountWhatVisibleAdmits) {
  std::mt19937_64 rng(std::random_device{}());
  for (int trial = 0; trial < 2000; ++trial) {
    Options o;
    o.causal = rng() % 3 == 0;
    o.window_left = static_cast<int>(rng() % 12) - 1;
    o.window_right = static_cast<int>(rng() % 12) - 1;
    o.diagonal_shift = static_cast<std::int64_t>(rng() % 81) - 40;
    const std::int64_t q_len = rng() % 40, kv_len = rng() % 40;
    const std::int64_t begin = q_len ? std::int64_t(rng() % q_len) : 0;
    const std::int64_t end = begin + (q_len - begin ? std::int64_t(rng() % (q_len - begin + 1)) : 0);
    const KeyWindow w = KeyWindow::from(o);
    std::int64_t all = 0, range = 0;
    for (std::int64_t i = 0; i < q_len; ++i) {
      std::int64_t row = 0;
      for (std::int64_t j = 0; j < kv_len; ++j) row += w.visible(i, j, q_len, kv_len);
      EXPECT_EQ(w.keys_seen(i, q_len, kv_len), row);
      all += row;
      if (i >= begin && i < end) range += row;
    }
    const std::string what = "q_len " + std::to_string(q_len) + " kv_len " + std::to_string(kv_len) + " left " +
                             std::to_string(w.left) + " right " + std::to_string(w.right) + " shift " +
                             std::to_string(w.shift) + " rows [" + std::to_string(begin) + ", " +
                             std::to_string(end) + ")";
    EXPECT_EQ(w.visible_pairs(q_len, kv_len), all) << what;
    EXPECT_EQ(w.visible_pairs(q_len, kv_len, begin, end), range) << what;
  }
}

}  // namespace
}  // namespace kattn
