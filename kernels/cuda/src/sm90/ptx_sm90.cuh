// sm_90 / sm_90a PTX wrappers: mbarrier, TMA bulk tensor copies, wgmma fences,
// setmaxnreg. The including translation units are compiled for sm_90a only.
#pragma once

#include <cstdint>

namespace kattn::cuda::detail::sm90 {

// ---- mbarrier (PTX ISA 9.7.13.15). A barrier's phase completes when its pending arrival
// count and its pending transaction bytes both reach zero. try_wait.parity(P) returns true
// once the phase of parity P has completed; on a fresh barrier (phase 0 pending) waiting
// for parity 1 returns at once, the convention producers use for "buffer initially empty".
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t ok;
  asm volatile(
      "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(ok)
      : "r"(bar), "r"(parity)
      : "memory");
  return ok != 0;
}
// With KATTN_CUDA_TRAP_HANGS (CMake option of the same name, on in perf/gpu/pack.sh's build)
// a wait longer than about 10 s of SM clock traps, so a pipeline deadlock surfaces as a
// launch error instead of a hung process.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#if defined(KATTN_CUDA_TRAP_HANGS)
  const long long t0 = clock64();
  while (!mbar_try_wait(bar, parity)) {
    if (clock64() - t0 > 20000000000LL) __trap();
  }
#else
  while (!mbar_try_wait(bar, parity)) {
  }
#endif
}

// ---- TMA (PTX ISA 9.7.9.27 cp.async.bulk.tensor): a 4-d box at coordinates (c0 innermost)
// into shared memory; completion is signalled on `bar` as transaction bytes (the whole box,
// out-of-bounds elements zero-filled and counted too).
__device__ __forceinline__ void tma_load_4d(uint32_t dst, const void* tmap, uint32_t bar, int c0, int c1, int c2,
                                            int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5, %6}], "
      "[%2];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(tmap)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
__device__ __forceinline__ void prefetch_tmap(const void* tmap) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(tmap)) : "memory");
}

// ---- wgmma ordering (PTX ISA 9.7.15.6/7): fence before the first wgmma that reads
// registers written by ordinary instructions; commit closes a group; wait_group<N> returns
// when at most N groups of this warpgroup are pending.
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Compiler-level fence on a register operand of an asynchronous wgmma: the compiler may
// neither read it early nor reuse its register before this point (CUTLASS's
// warpgroup_fence_operand idea).
__device__ __forceinline__ void fence_operand(float& x) { asm volatile("" : "+f"(x)::"memory"); }
__device__ __forceinline__ void fence_operand(uint32_t& x) { asm volatile("" : "+r"(x)::"memory"); }

// ---- register reallocation between warpgroups (PTX ISA 9.7.17.x setmaxnreg, sm_90a).
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

__device__ __forceinline__ void fence_proxy_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// ---- shared-memory matrix descriptor (PTX ISA 9.7.15.5.1, "Matrix Descriptor Format"):
//   bits  0-13 start address >> 4, 16-29 leading-dimension byte offset >> 4,
//   32-45 stride-dimension byte offset >> 4, 49-51 base offset (0: atoms 1024-B aligned),
//   62-63 swizzle mode (1 = 128-byte swizzle).
// 128-byte swizzle atom: 8 rows of 128 bytes (1024 B, 1024-B aligned); 16-byte chunk c of
// row r sits at chunk c ^ (r % 8) (address bits [4,7) ^= bits [7,10)), the pattern TMA's
// CU_TENSOR_MAP_SWIZZLE_128B writes.
//   K-major operand (rows = M or N, 64 K-elements of 16 bits per 128-byte row): SBO = 1024
//   (next 8 rows), LBO unused (1); the k-th 16-element slice starts 32*k bytes into the
//   atom row (k < 4); K beyond 64 lives in the next 64-column region.
//   MN-major operand (B = V: rows = K = keys, 64 N-elements per 128-byte row): SBO = 1024
//   (next 8 keys), LBO = byte distance between 64-column regions (CUTLASS
//   make_gmma_desc<Major::MN>, SWIZZLE_128B: ((8,n),(8,k)) : ((1,LBO),(8,SBO)) in 16 B units).
__device__ __forceinline__ uint64_t make_desc_sw128(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  uint64_t d = 0;
  d |= uint64_t((smem_addr & 0x3FFFF) >> 4);
  d |= uint64_t((lbo_bytes >> 4) & 0x3FFF) << 16;
  d |= uint64_t((sbo_bytes >> 4) & 0x3FFF) << 32;
  d |= uint64_t(1) << 62;
  return d;
}

}  // namespace kattn::cuda::detail::sm90
