// How a CPU multiplies 16-bit storage, chosen at run time from what the CPU has (Options::cpu_products).
//
// On a host execution space bf16 attention can run its tile products on the CPU's matrix units
// (AMX's TDPBF16PS: Intel since Sapphire Rapids, sixteen times the float FMA's work per
// instruction), on its bf16 dot-product instructions (AVX512_BF16's vdpbf16ps: Zen 4 and 5, Intel
// since Cooper Lake, twice the float FMA's work), or widen bf16 to float and use float FMAs. The
// bf16 products are exact and accumulate in float, as the float path does; the one difference is
// that the softmax weights P are rounded to bf16 for P V, as FlashAttention does on GPUs
// (docs/storage.md says what each path rounds). fp16 storage, float queries over a 16-bit cache, float and double
// always take float FMAs on CPUs; GPUs ignore the option.
#pragma once

#include <string>

namespace kattn {

enum class CpuProducts {
  automatic,  // the fastest this CPU has: AMX tiles, else bf16 dot products (AMD), else widened
  widened,    // exact: q, k, v widened to float, float FMAs, P kept in float
  bf16_dot,   // bf16 dot products; emulated bit for bit in portable code where the CPU lacks them
  amx,        // AMX tiles; where the CPU lacks them, the same tile layouts on bf16 dot products
};

// "auto", "widened", "bf16-dot", "amx"; parse_cpu_products throws kattn::Error naming `what` otherwise.
const char* cpu_products_name(CpuProducts p);
CpuProducts parse_cpu_products(const std::string& text, const char* what = "cpu_products");

// What this CPU offers, read once (cpuid; the OS's saved register state). KATTN_CPU_DISABLE, a
// comma-separated list of feature names below (e.g. "avx512_bf16"), hides features from kattn,
// as oneDNN's ONEDNN_MAX_CPU_ISA does, to run and compare the other paths on one machine.
struct CpuFeatures {
  std::string model;         // the CPU's brand string
  bool amd = false;          // AMD's cores: their vdpbf16ps outruns the widened float FMAs
  bool avx512 = false;       // AVX512F, BW and VL, with the OS saving their registers
  bool avx512_bf16 = false;  // vdpbf16ps, vcvtne2ps2bf16
  bool avx512_fp16 = false;  // reported only: no fp16 dot product with float accumulation
  bool amx_bf16 = false;     // TDPBF16PS, with the OS saving the tile registers
  bool amx_fp16 = false;     // reported only: fp16 takes float FMAs
};
const CpuFeatures& cpu_features();

// The products a call on a host execution space runs for queries stored as Q and keys and values
// as KV (float, double, bf16, fp16) when `requested`: never `automatic`. The environment variable
// KATTN_CPU_PRODUCTS (auto, widened, bf16-dot, amx), when set, says what `automatic` means in the
// process: a whole program run on the exact path, or on the emulated dot products, unchanged.
CpuProducts host_cpu_products(CpuProducts requested, bool bf16_queries_and_keys);
template <class Q, class KV>
CpuProducts host_cpu_products(CpuProducts requested);

// The products a bf16 backward on a host space runs when `requested`: bf16_dot where
// host_cpu_products gives it, else widened (AMX tiles take no part in the backward). A call whose
// q, k, v or dout holds a NaN or Inf widens (BackwardInfo::cpu_products says what ran).
CpuProducts host_backward_cpu_products(CpuProducts requested, bool bf16_storage);

// Whether bf16 dot products run on the instruction (else on its emulation): compiled in and the
// CPU has it.
bool bf16_dot_on_hardware();
// Whether the amx products run on the tiles (else on the pair products): compiled in, the CPU has
// AMX-BF16 and AVX512_BF16, and Linux gave the process the tile registers (asked once, with
// arch_prctl(ARCH_REQ_XCOMP_PERM), by the first call). amx_refusal(): why not, or "" when they do.
bool amx_on_hardware();
std::string amx_refusal();

// For `kattn --version` and logs: the CPU, its features, and what `automatic` runs for bf16 and fp16.
std::string cpu_products_text();

}  // namespace kattn

#include <type_traits>

#include "kattn/core/storage.hpp"

template <class Q, class KV>
kattn::CpuProducts kattn::host_cpu_products(CpuProducts requested) {
  return host_cpu_products(requested, std::is_same_v<Q, bf16> && std::is_same_v<KV, bf16>);
}
