// kattn::cuda — CUDA graphs for the decode step.
//
// DecodeGraphLadder captures one decode step (padding kernel + split-KV decode [+ merge])
// per batch size of a ladder (1, 2, 4, 8, ... up to max_batch) on static device buffers.
// step() copies the step's inputs into the buffers of the smallest captured size >= B,
// pads the batch with empty sequences (inside the graph) and replays it. Each size uses a
// fixed split count (planned for max_seqlen), so that replay runs exactly the kernels an
// eager decode() with that split count runs: the results are bitwise equal.
#pragma once

#include <kattn/cuda/params.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kattn::cuda {

struct DecodeGraphConfig {
  DType dtype = DType::kBF16;
  int heads_q = 0, heads_kv = 0, head_dim = 0, page_size = 0;
  float scale = 0.f;
  // The persistent paged cache (not copied): pointers and element strides.
  const void* k_cache = nullptr;
  const void* v_cache = nullptr;
  int64_t k_page_stride = 0, k_token_stride = 0, k_head_stride = 0;
  int64_t v_page_stride = 0, v_token_stride = 0, v_head_stride = 0;
  int max_batch = 0;   // largest batch step() accepts
  int max_pages = 0;   // capacity of the page-index buffer (nnz over the batch)
  int max_seqlen = 0;  // for the split plan
  std::vector<int> ladder;  // empty: 1, 2, 4, ... up to the first size >= max_batch
  int num_sms = 0;          // 0: current device's
};

// One step's inputs; all pointers may be device or host memory (copied with
// cudaMemcpyAsync, cudaMemcpyDefault). q is dense [B, Hq, D].
struct DecodeStepInputs {
  int batch = 0;
  const void* q = nullptr;
  const int32_t* kv_page_indptr = nullptr;  // [B + 1]
  const int32_t* kv_page_indices = nullptr;  // [indptr[B]] (nnz given below)
  int nnz_pages = 0;
  const int32_t* kv_last_page_len = nullptr;  // [B]
};

// The ladder's host-side plan for cfg: the captured batch sizes, ascending, with the split count
// each one's graph uses (planned for cfg.max_seqlen), and the workspace the largest needs. Empty
// sizes when cfg is invalid. No CUDA call when cfg.num_sms > 0.
struct DecodeGraphPlan {
  std::vector<int> sizes;
  std::vector<int> splits;
  size_t workspace_bytes = 0;
};
DecodeGraphPlan plan_decode_graphs(const DecodeGraphConfig& cfg);

class DecodeGraphLadder {
 public:
  DecodeGraphLadder() = default;
  ~DecodeGraphLadder();
  DecodeGraphLadder(const DecodeGraphLadder&) = delete;
  DecodeGraphLadder& operator=(const DecodeGraphLadder&) = delete;

  // Allocates the static buffers and captures one graph per ladder size on `stream`.
  cudaError_t init(const DecodeGraphConfig& cfg, cudaStream_t stream);

  // Copies the inputs in, replays the graph of padded_batch(in.batch), and copies the
  // first B rows of o ([B, Hq, D] dense, dtype) and lse ([B, Hq]) out when non-null.
  cudaError_t step(const DecodeStepInputs& in, void* o, float* lse, cudaStream_t stream);

  // Smallest captured batch size >= b, or -1.
  int padded_batch(int b) const;
  // Split count the graph of captured size `padded` uses.
  int num_splits(int padded) const;
  const std::vector<int>& ladder() const { return sizes_; }
  // The static output buffers (valid after step(), padded rows included).
  const void* static_o() const { return o_; }
  const float* static_lse() const { return lse_; }
  void release();

 private:
  DecodeParams params_for(int padded) const;

  DecodeGraphConfig cfg_{};
  std::vector<int> sizes_;
  std::vector<int> splits_;
  std::vector<void*> graphs_;       // cudaGraph_t
  std::vector<void*> execs_;        // cudaGraphExec_t
  void* q_ = nullptr;               // [max_batch_padded, Hq, D]
  int32_t* indptr_ = nullptr;       // [max_batch_padded + 1]
  int32_t* indices_ = nullptr;      // [max_pages]
  int32_t* last_len_ = nullptr;     // [max_batch_padded]
  int32_t* actual_batch_ = nullptr; // [1]
  void* o_ = nullptr;
  float* lse_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
};

}  // namespace kattn::cuda
