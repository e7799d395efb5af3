// DecodeGraphLadder: CUDA graphs of the decode step, one per batch size of a ladder.
#include <kattn/cuda/decode.hpp>
#include <kattn/cuda/graphs.hpp>
#include <kattn/cuda/split_planner.hpp>

#include <algorithm>

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

DecodeParams DecodeGraphLadder::params_for(int padded) const {
  DecodeParams p;
  p.dtype = cfg_.dtype;
  p.batch = padded;
  p.heads_q = cfg_.heads_q;
  p.heads_kv = cfg_.heads_kv;
  p.head_dim = cfg_.head_dim;
  p.page_size = cfg_.page_size;
  p.scale = cfg_.scale;
  p.set_contiguous_strides();
  p.k_page_stride = cfg_.k_page_stride;
  p.k_token_stride = cfg_.k_token_stride;
  p.k_head_stride = cfg_.k_head_stride;
  p.v_page_stride = cfg_.v_page_stride;
  p.v_token_stride = cfg_.v_token_stride;
  p.v_head_stride = cfg_.v_head_stride;
  p.q = q_;
  p.k_cache = cfg_.k_cache;
  p.v_cache = cfg_.v_cache;
  p.kv_page_indptr = indptr_;
  p.kv_page_indices = indices_;
  p.kv_last_page_len = last_len_;
  p.o = o_;
  p.lse = lse_;
  p.num_splits = num_splits(padded);
  p.workspace = workspace_;
  p.workspace_bytes = workspace_bytes_;
  p.num_sms = cfg_.num_sms;
  return p;
}

cudaError_t DecodeGraphLadder::init(const DecodeGraphConfig& cfg, cudaStream_t stream) {
  release();
  if (cfg.max_batch <= 0 || cfg.max_pages < 0 || cfg.heads_q <= 0 || cfg.heads_kv <= 0) return cudaErrorInvalidValue;
  cfg_ = cfg;
  if (cfg_.num_sms <= 0) cfg_.num_sms = detail::device_sm_count();
  sizes_ = cfg.ladder;
  if (sizes_.empty())
    for (int s = 1;; s *= 2) {
      sizes_.push_back(s);
      if (s >= cfg.max_batch) break;
    }
  std::sort(sizes_.begin(), sizes_.end());
  sizes_.erase(std::unique(sizes_.begin(), sizes_.end()), sizes_.end());
  if (sizes_.front() <= 0 || sizes_.back() < cfg.max_batch) {
    release();
    return cudaErrorInvalidValue;
  }
  const int bp = sizes_.back();
  const size_t row = size_t(cfg.heads_q) * cfg.head_dim * elem_bytes(cfg.dtype);

  cudaError_t err = cudaSuccess;
  auto check = [&](cudaError_t e) {
    if (err == cudaSuccess) err = e;
    return err == cudaSuccess;
  };
  // Split plan and workspace per size.
  size_t ws = 0;
  for (int s : sizes_) {
    DecodeParams p = params_for(s);  // pointers still null: only shapes matter here
    p.num_splits = 0;
    p.max_seqlen_hint = cfg.max_seqlen;
    const int splits = decode_num_splits(p);
    splits_.push_back(splits);
    ws = std::max(ws, decode_workspace_bytes(p, splits));
  }
  workspace_bytes_ = ws;
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
