// Forward dispatcher: validation and the choice between the sm90 and sm80 kernels.
#include <kattn/cuda/forward.hpp>

#include "common/launch.hpp"
#include "common/validate.hpp"

namespace kattn::cuda {

const char* forward_check(const ForwardParams& p) {
  if (const char* r = detail::forward_common_check(p)) return r;
  switch (p.backend) {
    case ForwardBackend::kAuto:
      if (p.variant != 0) return "variant: only 0 with backend kAuto";
      return nullptr;
    case ForwardBackend::kSm80:
      return p.variant == 0 ? nullptr : "variant: the sm80 kernel has only variant 0";
    case ForwardBackend::kSm90: {
      const char* reason = nullptr;
      return forward_sm90_supported(p, &reason) ? nullptr : reason;
    }
  }
  return "backend: unknown value";
}

cudaError_t forward(const ForwardParams& p, cudaStream_t stream) {
  if (forward_check(p) != nullptr) return cudaErrorInvalidValue;
  if (p.backend == ForwardBackend::kSm80) return forward_sm80(p, stream);
  int major = 0, minor = 0;
  cudaError_t err = detail::device_cc(&major, &minor);
  if (err != cudaSuccess) return err;
  const bool hopper = major == 9 && minor == 0;  // sm_90a code runs on compute capability 9.0 only
  if (p.backend == ForwardBackend::kSm90) return hopper ? forward_sm90(p, stream) : cudaErrorNoKernelImageForDevice;
  if (hopper && forward_sm90_supported(p, nullptr)) {
    // A stride layout the TMA unit refuses (cudaErrorInvalidValue from the map encoder)
    // falls back to the sm80 kernel, which takes any 16-byte-aligned strides.
    err = forward_sm90(p, stream);
    if (err != cudaErrorInvalidValue && err != cudaErrorNotSupported) return err;
  }
  if (major < 8) return cudaErrorNoKernelImageForDevice;
  return forward_sm80(p, stream);
}

}  // namespace kattn::cuda
