// Placeholder until the sm90 kernel lands: the dispatcher falls back to sm80.
#include <kattn/cuda/forward.hpp>

namespace kattn::cuda {

bool forward_sm90_supported(const ForwardParams&, const char** reason) {
  if (reason) *reason = "backend: the sm90 kernel is not built yet";
  return false;
}

cudaError_t forward_sm90(const ForwardParams&, cudaStream_t) { return cudaErrorNotSupported; }

}  // namespace kattn::cuda
