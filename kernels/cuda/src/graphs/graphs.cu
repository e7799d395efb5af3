// DecodeGraphLadder: CUDA graphs of the decode step, one per batch size of a ladder.
#include <kattn/cuda/decode.hpp>
#include <kattn/cuda/graphs.hpp>
#include <kattn/cuda/split_planner.hpp>

#include <algorithm>
#include <utility>

#include "../common/launch.hpp"

namespace kattn::cuda {

namespace {

// Inside the graph: sequences [actual, padded) become empty (0 pages). Reads the actual
// batch from device memory so one graph serves every batch size it pads.
__global__ void pad_batch_kernel(int32_t* indptr, int32_t* last_len, const int32_t* actual, int padded) {
  const int b = min(max(*actual, 0), padded);
  const int32_t end = indptr[b];
  for (int i = b + int(threadIdx.x); i < padded; i += int(blockDim.x)) {
    indptr[i + 1] = end;
    last_len[i] = 0;
  }
}

size_t elem_bytes(DType) { return 2; }

}  // namespace

DecodeGraphLadder::~DecodeGraphLadder() { release(); }

void DecodeGraphLadder::release() {
  for (void* e : execs_)
    if (e) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(e));
  for (void* g : graphs_)
    if (g) cudaGraphDestroy(static_cast<cudaGraph_t>(g));
  execs_.clear();
  graphs_.clear();
  void* bufs[] = {q_, indptr_, indices_, last_len_, actual_batch_, o_, lse_, workspace_};
  for (void* b : bufs)
    if (b) cudaFree(b);
  q_ = o_ = workspace_ = nullptr;
  indptr_ = indices_ = last_len_ = actual_batch_ = nullptr;
  lse_ = nullptr;
  sizes_.clear();
  splits_.clear();
}

int DecodeGraphLadder::padded_batch(int b) const {
  for (int s : sizes_)
    if (s >= b) return s;
  return -1;
}

int DecodeGraphLadder::num_splits(int padded) const {
  for (size_t i = 0; i < sizes_.size(); ++i)
    if (sizes_[i] == padded) return splits_[i];
  return 0;
}

namespace {

// The shapes and cache of one ladder size's decode step; the ladder's buffers are left null.
DecodeParams shape_params(const DecodeGraphConfig& cfg, int padded, int splits) {
  DecodeParams p;
  p.dtype = cfg.dtype;
  p.batch = padded;
  p.heads_q = cfg.heads_q;
  p.heads_kv = cfg.heads_kv;
  p.head_dim = cfg.head_dim;
  p.page_size = cfg.page_size;
  p.scale = cfg.scale;
  p.set_contiguous_strides();
  p.k_page_stride = cfg.k_page_stride;
  p.k_token_stride = cfg.k_token_stride;
  p.k_head_stride = cfg.k_head_stride;
  p.v_page_stride = cfg.v_page_stride;
  p.v_token_stride = cfg.v_token_stride;
  p.v_head_stride = cfg.v_head_stride;
  p.k_cache = cfg.k_cache;
  p.v_cache = cfg.v_cache;
  p.num_splits = splits;
  p.num_sms = cfg.num_sms;
  return p;
}

}  // namespace

DecodeGraphPlan plan_decode_graphs(const DecodeGraphConfig& cfg) {
  DecodeGraphPlan plan;
  if (cfg.max_batch <= 0 || cfg.max_pages < 0 || cfg.heads_q <= 0 || cfg.heads_kv <= 0) return plan;
  std::vector<int> sizes = cfg.ladder;
  if (sizes.empty())
    for (int s = 1;; s *= 2) {
      sizes.push_back(s);
      if (s >= cfg.max_batch) break;
    }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  if (sizes.front() <= 0 || sizes.back() < cfg.max_batch) return plan;
  for (int s : sizes) {
    DecodeParams p = shape_params(cfg, s, 0);  // 0 splits: the planner's choice for max_seqlen
    p.max_seqlen_hint = cfg.max_seqlen;
    const int splits = decode_num_splits(p);
    plan.splits.push_back(splits);
    plan.workspace_bytes = std::max(plan.workspace_bytes, decode_workspace_bytes(p, splits));
  }
  plan.sizes = std::move(sizes);
  return plan;
}

DecodeParams DecodeGraphLadder::params_for(int padded) const {
  DecodeParams p = shape_params(cfg_, padded, num_splits(padded));
  p.q = q_;
  p.kv_page_indptr = indptr_;
  p.kv_page_indices = indices_;
  p.kv_last_page_len = last_len_;
  p.o = o_;
  p.lse = lse_;
  p.workspace = workspace_;
  p.workspace_bytes = workspace_bytes_;
  return p;
}

cudaError_t DecodeGraphLadder::init(const DecodeGraphConfig& cfg, cudaStream_t stream) {
  release();
  cfg_ = cfg;
  if (cfg_.num_sms <= 0) cfg_.num_sms = detail::device_sm_count();
  DecodeGraphPlan plan = plan_decode_graphs(cfg_);
  if (plan.sizes.empty()) return cudaErrorInvalidValue;
  sizes_ = std::move(plan.sizes);
  splits_ = std::move(plan.splits);
  workspace_bytes_ = plan.workspace_bytes;
  const int bp = sizes_.back();
  const size_t row = size_t(cfg.heads_q) * cfg.head_dim * elem_bytes(cfg.dtype);

  cudaError_t err = cudaSuccess;
  auto check = [&](cudaError_t e) {
    if (err == cudaSuccess) err = e;
    return err == cudaSuccess;
  };
  const size_t ws = workspace_bytes_;
  check(cudaMalloc(&q_, row * bp));
  check(cudaMalloc(reinterpret_cast<void**>(&indptr_), sizeof(int32_t) * (bp + 1)));
  check(cudaMalloc(reinterpret_cast<void**>(&indices_), sizeof(int32_t) * std::max(cfg.max_pages, 1)));
  check(cudaMalloc(reinterpret_cast<void**>(&last_len_), sizeof(int32_t) * bp));
  check(cudaMalloc(reinterpret_cast<void**>(&actual_batch_), sizeof(int32_t)));
  check(cudaMalloc(&o_, row * bp));
  check(cudaMalloc(reinterpret_cast<void**>(&lse_), sizeof(float) * bp * cfg.heads_q));
  if (ws > 0) check(cudaMalloc(&workspace_, ws));
  if (err != cudaSuccess) {
    release();
    return err;
  }
  // Valid empty inputs, so that a replay before the first step() reads defined memory.
  check(cudaMemsetAsync(q_, 0, row * bp, stream));
  check(cudaMemsetAsync(indptr_, 0, sizeof(int32_t) * (bp + 1), stream));
  check(cudaMemsetAsync(last_len_, 0, sizeof(int32_t) * bp, stream));
  check(cudaMemsetAsync(actual_batch_, 0, sizeof(int32_t), stream));
  check(cudaStreamSynchronize(stream));

  cudaStream_t cs = nullptr;  // capture needs a stream other than the legacy default one
  check(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
  for (size_t i = 0; i < sizes_.size() && err == cudaSuccess; ++i) {
    const DecodeParams p = params_for(sizes_[i]);
    if (!check(decode_prepare(p))) break;  // attribute calls stay out of the capture
    if (!check(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal))) break;
    pad_batch_kernel<<<1, 256, 0, cs>>>(indptr_, last_len_, actual_batch_, sizes_[i]);
    cudaError_t launch = cudaGetLastError();
    if (launch == cudaSuccess) launch = decode(p, cs);
    cudaGraph_t graph = nullptr;
    const cudaError_t end = cudaStreamEndCapture(cs, &graph);
    graphs_.push_back(graph);
    if (!check(launch) || !check(end)) break;
    cudaGraphExec_t exec = nullptr;
    check(cudaGraphInstantiate(&exec, graph, 0));
    execs_.push_back(exec);
  }
  if (cs) cudaStreamDestroy(cs);
  if (err != cudaSuccess) release();
  return err;
}

cudaError_t DecodeGraphLadder::step(const DecodeStepInputs& in, void* o, float* lse, cudaStream_t stream) {
  const int bp = padded_batch(in.batch);
  if (bp < 0 || in.batch < 0 || in.nnz_pages < 0 || in.nnz_pages > std::max(cfg_.max_pages, 0) || execs_.empty())
    return cudaErrorInvalidValue;
  size_t idx = 0;
  while (sizes_[idx] != bp) ++idx;
  const size_t row = size_t(cfg_.heads_q) * cfg_.head_dim * elem_bytes(cfg_.dtype);
  const size_t b = size_t(in.batch);
  cudaError_t err = cudaSuccess;
  auto check = [&](cudaError_t e) {
    if (err == cudaSuccess) err = e;
  };
  if (b > 0) {
    check(cudaMemcpyAsync(q_, in.q, row * b, cudaMemcpyDefault, stream));
    check(cudaMemcpyAsync(last_len_, in.kv_last_page_len, sizeof(int32_t) * b, cudaMemcpyDefault, stream));
  }
  check(cudaMemcpyAsync(indptr_, in.kv_page_indptr, sizeof(int32_t) * (b + 1), cudaMemcpyDefault, stream));
  if (in.nnz_pages > 0)
    check(cudaMemcpyAsync(indices_, in.kv_page_indices, sizeof(int32_t) * in.nnz_pages, cudaMemcpyDefault, stream));
  const int32_t actual = in.batch;  // pageable source: copied before cudaMemcpyAsync returns
  check(cudaMemcpyAsync(actual_batch_, &actual, sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(execs_[idx]), stream));
  if (o && b > 0) check(cudaMemcpyAsync(o, o_, row * b, cudaMemcpyDefault, stream));
  if (lse && b > 0) check(cudaMemcpyAsync(lse, lse_, sizeof(float) * b * cfg_.heads_q, cudaMemcpyDefault, stream));
  return err;
}

}  // namespace kattn::cuda
