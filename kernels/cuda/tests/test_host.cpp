// Host-only checks (no device needed): the split planner's rule and the launchers'
// parameter validation (refused before any CUDA call, with a reason). How the library builds
// these params is tested on the library's side (tests/cuda_bridge).
#include <cstdint>
#include <kattn/cuda/decode.hpp>
#include <kattn/cuda/forward.hpp>
#include <kattn/cuda/split_planner.hpp>
#include <string>
#include <vector>

#include "common.hpp"

using namespace kattn::cuda;

int main() {
  kt::Tally t;
  // planner
  t.check(plan_num_splits(1, 8, 32768, 132) == 16, "planner: batch 1 x 8 KV heads x 32K on 132 SMs -> 16 splits");
  t.check(plan_num_splits(1, 8, 32768, 132, 2) == 32, "planner: the same with 2 CTAs per SM -> 32 splits");
  t.check(plan_num_splits(16, 8, 32768, 132, 2) == 2, "planner: batch 16 x 8 heads, 2 CTAs per SM -> 2 splits");
  t.check(plan_num_splits(64, 8, 32768, 132, 2) == 1, "planner: batch 64 x 8 heads fills 2 CTAs per SM -> 1 split");
  t.check(decode_ctas_per_sm(4) == 2 && decode_ctas_per_sm(8) == 1, "two CTAs per SM up to 4 packed heads, one at 8");
  t.check(plan_num_splits(1, 8, 131072, 132) == 16, "planner: 128K context -> 16 splits (one wave)");
  t.check(plan_num_splits(1, 8, 300, 132) == 1, "planner: short context -> 1 split");
  t.check(plan_num_splits(1, 8, 2048, 132) == 8, "planner: 2K keys -> 8 splits of 256");
  t.check(plan_num_splits(64, 8, 32768, 132) == 1, "planner: batch 64 x 8 heads fills the GPU -> 1 split");
  t.check(plan_num_splits(4, 8, 32768, 132) == 4, "planner: batch 4 x 8 heads -> 4 splits");
  t.check(plan_num_splits(1, 1, 1 << 20, 132) == kMaxSplits, "planner: capped at kMaxSplits");
  t.check(plan_num_splits(0, 8, 100, 132) == 1 && plan_num_splits(1, 8, 0, 132) == 1,
          "planner: degenerate inputs -> 1");

  // forward validation
  ForwardParams p;
  p.batch = 1;
  p.seqlen_q = p.seqlen_k = 128;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.head_dim = 96;
  p.set_contiguous_strides();
  alignas(16) static char dummy[64];
  p.q = p.k = p.v = dummy;
  p.o = dummy;
  const char* why = forward_check(p);
  t.check(why && std::string(why).find("head_dim") != std::string::npos,
          std::string("forward_check head_dim 96: ") + (why ? why : "null"));
  t.check(forward(p, nullptr) == cudaErrorInvalidValue, "forward refuses head_dim 96 with cudaErrorInvalidValue");
  p.head_dim = 128;
  p.set_contiguous_strides();
  p.heads_kv = 3;
  why = forward_check(p);
  t.check(why && std::string(why).find("heads_kv") != std::string::npos,
          std::string("forward_check Hq % Hkv: ") + (why ? why : "null"));
  p.heads_kv = 2;
  p.scale = -1.f;
  t.check(forward_check(p) != nullptr, "forward_check refuses a negative scale");
  p.scale = 0.f;
  p.q_seq_stride += 3;
  t.check(forward_check(p) != nullptr, "forward_check refuses a stride that is not a multiple of 8");
  p.set_contiguous_strides();
  t.check(forward_check(p) == nullptr, "forward_check accepts a valid bf16 D=128 GQA shape");
  p.q = dummy + 2;
  t.check(forward_check(p) != nullptr, "forward_check refuses a misaligned pointer");

  // decode validation
  DecodeParams d;
  d.batch = 2;
  d.heads_q = 8;
  d.heads_kv = 8;
  d.head_dim = 100;
  d.page_size = 16;
  why = decode_check(d);
  t.check(why && std::string(why).find("head_dim") != std::string::npos,
          std::string("decode_check head_dim 100: ") + (why ? why : "null"));
  d.head_dim = 128;
  d.page_size = 0;
  t.check(decode_check(d) != nullptr && decode(d, nullptr) == cudaErrorInvalidValue, "decode refuses page_size 0");
  d.page_size = 16;
  d.num_splits = 4;
  t.check(decode_workspace_bytes(d, 4) >= size_t(4) * 2 * 8 * 129 * 4,
          "decode workspace covers splits x B x Hq x (D + 1) floats");
  t.check(decode_workspace_bytes(d, 1) == 0, "one split needs no workspace");

  return t.finish();
}
