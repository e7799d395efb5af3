// The front door, kattn::attention / attention_backward, over dense keys and values against the
// float64 textbook for every option variant and split choice, and its refusals. The ragged, paged
// and cascade kinds are checked in test_ragged, test_paged, test_cascade and test_backward, block
// masks in test_block_sparse.
#include <gtest/gtest.h>

#include <string>

#include "backward_support.hpp"
#include "kattn/attention.hpp"
#include "ragged_support.hpp"
#include "support.hpp"

namespace kattn {
namespace test {
namespace {

TEST(Attention, DenseMatchesTextbookForEveryVariantAndSplit) {
  for (const Shape& s : {Shape{2, 37, 53, 4, 2, 16}, Shape{1, 1, 300, 8, 2, 32}, Shape{1, 3, 3, 1, 1, 8}})
    for (const Options& base : option_variants())
      for (int splits : {0, 1, 4}) {
        Options opt = base;
        opt.splits = splits;
        Problem<double> p(s, fresh_seed());
        attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt);
        expect_close(p, reference_of(p, opt), kDoubleTol, "attention dense " + describe(s, opt));
      }
}

TEST(Attention, DenseBackwardMatchesTextbook) {
  for (const Options& opt : option_variants()) {
    GradProblem<double> p({2, 19, 23, 4, 2, 16}, fresh_seed());
    attention(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, opt);
    attention_backward(TestSpace(), p.q, kv::dense(p.k, p.v), p.o, p.lse, p.dout, p.dq, p.dk,
                       p.dv, opt);
    expect_gradients_close(p, textbook_gradients(p, opt), kGradDoubleTol,
                           "attention_backward dense " + describe(p.shape, opt));
  }
}

TEST(Attention, BlockMaskOnlyWithDenseKeys) {
  RaggedProblem<double> p({2, 3}, {4, 5}, 2, 1, 8, fresh_seed());
  const auto layout = make_ragged_layout<TestMemory>(host_index(p.q_indptr()), host_index(p.kv_indptr()));
  const BlockMask m = BlockMask::from_dense(4, 1, 2, 2, std::vector<std::uint8_t>(4, 1));
  Options opt;
  opt.block_mask = &m;
  try {
    attention(TestSpace(), p.q, kv::ragged(p.k, p.v, layout), p.o, p.lse, opt);
    ADD_FAILURE() << "a block mask with a ragged batch was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("block_mask:"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace test
}  // namespace kattn
