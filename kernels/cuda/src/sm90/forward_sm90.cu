// sm90 forward: support check, TMA tensor maps and dispatch over head dims
// (compiled for sm_90a only; the kernels live in fwd_sm90_d{64,128,256}.cu).
#include <cudaTypedefs.h>

#include <kattn/cuda/forward.hpp>

#include <mutex>

#include "../common/validate.hpp"
#include "tma_host.hpp"

namespace kattn::cuda {

namespace detail::sm90 {

int sm90_block_n(const ForwardParams& p) {
  if (p.head_dim == 64) return 128;
  if (p.head_dim == 256) return 64;
  return p.variant == 1 ? 176 : 128;
}

namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &q) ==
            cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
  });
  return fn;
}

bool encode(PFN_cuTensorMapEncodeTiled_v12000 fn, CUtensorMap* m, const ForwardParams& p, const void* ptr, int heads,
            int seqlen, int64_t hs, int64_t ss, int64_t bs, int rows) {
  // A size-1 dimension's stride is never used for addressing; keep it a valid value.
  auto stride = [](int64_t s, int dim) { return cuuint64_t(dim == 1 && s == 0 ? 16 : s * 2); };
  const cuuint64_t dims[4] = {cuuint64_t(p.head_dim), cuuint64_t(heads), cuuint64_t(seqlen), cuuint64_t(p.batch)};
  const cuuint64_t strides[3] = {stride(hs, heads), stride(ss, seqlen), stride(bs, p.batch)};
  const cuuint32_t box[4] = {64, 1, cuuint32_t(rows), 1};
  const cuuint32_t elem[4] = {1, 1, 1, 1};
  const CUtensorMapDataType dt =
      p.dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
  return fn(m, dt, 4, const_cast<void*>(ptr), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace

cudaError_t make_tensor_maps(const ForwardParams& p, int block_m, int block_n, TensorMaps* out) {
  PFN_cuTensorMapEncodeTiled_v12000 fn = encode_fn();
  if (fn == nullptr) return cudaErrorNotSupported;
  const bool ok =
      encode(fn, &out->q, p, p.q, p.heads_q, p.seqlen_q, p.q_head_stride, p.q_seq_stride, p.q_batch_stride, block_m) &&
      encode(fn, &out->k, p, p.k, p.heads_kv, p.seqlen_k, p.k_head_stride, p.k_seq_stride, p.k_batch_stride,
             block_n) &&
      encode(fn, &out->v, p, p.v, p.heads_kv, p.seqlen_k, p.v_head_stride, p.v_seq_stride, p.v_batch_stride,
             block_n);
  return ok ? cudaSuccess : cudaErrorInvalidValue;
}

}  // namespace detail::sm90

bool forward_sm90_supported(const ForwardParams& p, const char** reason) {
  const char* r = detail::forward_common_check(p);
  if (r == nullptr) {
    if (p.variant < 0 || p.variant > 2)
      r = "variant: the sm90 kernel has variants 0, 1 (D=128 bf16, kBlockN 176) and 2 (bf16, no ping-pong)";
    else if (p.variant == 1 && (p.head_dim != 128 || p.dtype != DType::kBF16))
      r = "variant: 1 exists for head_dim 128 and bf16 only";
    else if (p.variant == 2 && p.dtype != DType::kBF16)
      r = "variant: 2 exists for bf16 only";
    else if (p.seqlen_k == 0 && p.batch > 0 && p.seqlen_q > 0 && p.heads_q > 0)
      r = "seqlen_k: the sm90 kernel needs at least one key (TMA maps cannot be empty); use sm80";
  }
  if (reason) *reason = r;
  return r == nullptr;
}

cudaError_t forward_sm90(const ForwardParams& p, cudaStream_t stream) {
  if (!forward_sm90_supported(p, nullptr)) return cudaErrorInvalidValue;
  if (p.batch == 0 || p.seqlen_q == 0 || p.heads_q == 0) return cudaSuccess;
  detail::sm90::TensorMaps tm;
  cudaError_t err = detail::sm90::make_tensor_maps(p, 128, detail::sm90::sm90_block_n(p), &tm);
  if (err != cudaSuccess) return err;
  switch (p.head_dim) {
    case 64:
      return detail::sm90::launch_fwd_sm90_d64(p, tm, stream);
    case 128:
      return detail::sm90::launch_fwd_sm90_d128(p, tm, stream);
    case 256:
      return detail::sm90::launch_fwd_sm90_d256(p, tm, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace kattn::cuda
