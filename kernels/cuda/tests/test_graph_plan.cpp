// Host-only checks of the decode graph ladder (no device needed): the sizes it captures, the split
// count and workspace of each, and init() on a machine without a GPU refusing with an error
// instead of reading the split plan before it exists.
#include <kattn/cuda/decode.hpp>
#include <kattn/cuda/graphs.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "common.hpp"

using namespace kattn::cuda;

namespace {

DecodeGraphConfig long_context_config() {
  DecodeGraphConfig c;
  c.heads_q = 32;
  c.heads_kv = 8;
  c.head_dim = 128;
  c.page_size = 16;
  c.max_batch = 5;
  c.max_pages = 4096;
  c.max_seqlen = 32768;
  c.num_sms = 132;  // fixed, so that planning asks no device
  return c;
}

// What decode() plans for one batch size of the ladder.
int expected_splits(const DecodeGraphConfig& c, int batch) {
  DecodeParams p;
  p.dtype = c.dtype;
  p.batch = batch;
  p.heads_q = c.heads_q;
  p.heads_kv = c.heads_kv;
  p.head_dim = c.head_dim;
  p.page_size = c.page_size;
  p.max_seqlen_hint = c.max_seqlen;
  p.num_sms = c.num_sms;
  return decode_num_splits(p);
}

}  // namespace

int main() {
  kt::Tally t;
  const DecodeGraphConfig c = long_context_config();

  const DecodeGraphPlan plan = plan_decode_graphs(c);
  t.check(plan.sizes == std::vector<int>{1, 2, 4, 8}, "default ladder: powers of two up to the first >= max_batch 5");
  bool splits_ok = plan.splits.size() == plan.sizes.size();
  for (size_t i = 0; splits_ok && i < plan.sizes.size(); ++i)
    splits_ok = plan.splits[i] == expected_splits(c, plan.sizes[i]);
  t.check(splits_ok, "each size's split count is decode()'s plan for that batch at max_seqlen");
  t.check(plan.splits.front() > 1 && std::is_sorted(plan.splits.rbegin(), plan.splits.rend()),
          "batch 1 at 32K keys splits, larger batches split no more");
  t.check(plan.workspace_bytes >= size_t(plan.splits.front()) * 32 * 129 * sizeof(float),
          "workspace covers the batch-1 graph's splits x Hq x (D + 1) floats");

  DecodeGraphConfig custom = c;
  custom.ladder = {8, 2, 2, 6};
  t.check(plan_decode_graphs(custom).sizes == std::vector<int>{2, 6, 8}, "a given ladder is sorted and deduplicated");
  custom.ladder = {1, 4};
  t.check(plan_decode_graphs(custom).sizes.empty(), "a ladder below max_batch is refused");
  custom.ladder = {0, 8};
  t.check(plan_decode_graphs(custom).sizes.empty(), "a ladder size <= 0 is refused");
  DecodeGraphConfig bad = c;
  bad.heads_kv = 0;
  t.check(plan_decode_graphs(bad).sizes.empty(), "heads_kv 0 is refused");

  // init() plans before it allocates: without a device it returns the allocation's error; with
  // one it captures the planned ladder.
  int devices = 0;
  const bool have_device = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  DecodeGraphLadder ladder;
  if (have_device) {
    // The captured steps read the cache: init() refuses a config without one (decode()'s checks).
    DecodeGraphConfig with_cache = c;
    const size_t cache_bytes = size_t(c.max_pages) * c.page_size * c.heads_kv * c.head_dim * 2;
    void *k = nullptr, *v = nullptr;
    const bool allocated = cudaMalloc(&k, cache_bytes) == cudaSuccess && cudaMalloc(&v, cache_bytes) == cudaSuccess;
    with_cache.k_cache = k;
    with_cache.v_cache = v;
    with_cache.k_head_stride = with_cache.v_head_stride = c.head_dim;
    with_cache.k_token_stride = with_cache.v_token_stride = int64_t(c.heads_kv) * c.head_dim;
    with_cache.k_page_stride = with_cache.v_page_stride = with_cache.k_token_stride * c.page_size;
    const cudaError_t e = allocated ? ladder.init(with_cache, nullptr) : cudaErrorMemoryAllocation;
    t.check(e == cudaSuccess && ladder.ladder() == plan.sizes && ladder.num_splits(1) == plan.splits.front(),
            std::string("init captures the planned ladder: ") + cudaGetErrorString(e));
    ladder.release();
    cudaFree(k);
    cudaFree(v);
  } else {
    const cudaError_t e = ladder.init(c, nullptr);
    t.check(e != cudaSuccess && ladder.ladder().empty(),
            std::string("init without a device returns an error and holds nothing: ") + cudaGetErrorString(e));
  }
  t.check(ladder.init(bad, nullptr) == cudaErrorInvalidValue, "init refuses an invalid config");
  return t.finish();
}
