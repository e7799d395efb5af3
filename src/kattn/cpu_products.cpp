#include "kattn/cpu_products.hpp"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "kattn/detail/amx_gemm.hpp"
#include "kattn/detail/pair_gemm.hpp"
#include "kattn/errors.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define KATTN_X86 1
#else
#define KATTN_X86 0
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#define KATTN_LINUX_X86 1
#else
#define KATTN_LINUX_X86 0
#endif

namespace kattn {
namespace {

#if KATTN_X86
struct Regs {
  unsigned a = 0, b = 0, c = 0, d = 0;
};
Regs cpuid_regs(unsigned leaf, unsigned sub) {
  Regs r;
  if (!__get_cpuid_count(leaf, sub, &r.a, &r.b, &r.c, &r.d)) r = Regs{};
  return r;
}
bool cpuid_bit(unsigned x, int i) { return (x >> i) & 1u; }

// The register state the OS saves on a context switch (XCR0), or 0 without OSXSAVE.
std::uint64_t os_saved_state() {
  if (!cpuid_bit(cpuid_regs(1, 0).c, 27)) return 0;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (std::uint64_t(hi) << 32) | lo;
}

std::string cpu_brand() {
  if (cpuid_regs(0x80000000u, 0).a < 0x80000004u) return "unknown x86-64";
  char s[49] = {};
  for (unsigned i = 0; i < 3; ++i) {
    const Regs r = cpuid_regs(0x80000002u + i, 0);
    std::memcpy(s + 16 * i, &r, 16);
  }
  std::string text(s);
  const auto first = text.find_first_not_of(' ');
  return first == std::string::npos ? "unknown x86-64" : text.substr(first, text.find_last_not_of(' ') - first + 1);
}
#endif

// Features named in KATTN_CPU_DISABLE are hidden.
bool feature_disabled(const char* name) {
  const char* env = std::getenv("KATTN_CPU_DISABLE");
  if (!env) return false;
  std::stringstream list(env);
  for (std::string item; std::getline(list, item, ',');)
    if (item == name) return true;
  return false;
}

CpuFeatures read_cpu_features() {
  CpuFeatures f;
#if KATTN_X86
  f.model = cpu_brand();
  const Regs vendor = cpuid_regs(0, 0);
  char name[13] = {};
  std::memcpy(name, &vendor.b, 4);
  std::memcpy(name + 4, &vendor.d, 4);
  std::memcpy(name + 8, &vendor.c, 4);
  f.amd = std::string(name) == "AuthenticAMD";
  const std::uint64_t xcr0 = os_saved_state();
  const bool zmm_saved = (xcr0 & 0xe6) == 0xe6;  // SSE, AVX, opmask, the upper ZMM halves, ZMM16-31
  const Regs l7 = cpuid_regs(7, 0), l71 = cpuid_regs(7, 1);
  f.avx512 =
      zmm_saved && cpuid_bit(l7.b, 16) && cpuid_bit(l7.b, 30) && cpuid_bit(l7.b, 31) && !feature_disabled("avx512");
  f.avx512_bf16 = f.avx512 && cpuid_bit(l71.a, 5) && !feature_disabled("avx512_bf16");
  f.avx512_fp16 = f.avx512 && cpuid_bit(l7.d, 23) && !feature_disabled("avx512_fp16");
  const bool tiles_saved = (xcr0 & 0x60000) == 0x60000;  // XTILECFG and XTILEDATA
  f.amx_bf16 = tiles_saved && cpuid_bit(l7.d, 24) && cpuid_bit(l7.d, 22) && !feature_disabled("amx_bf16");
  f.amx_fp16 = tiles_saved && cpuid_bit(l7.d, 24) && cpuid_bit(l71.a, 21) && !feature_disabled("amx_fp16");
#else
  f.model = "not x86-64";
#endif
  return f;
}

// Asks Linux for the tile registers of this process (they are off until asked: the kernel's
// x86/xstate.rst): "" when given, else why not.
std::string request_tile_registers() {
#if KATTN_LINUX_X86
  constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  if (syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0) return "";
  return detail::concat("Linux refused the AMX tile registers (arch_prctl(ARCH_REQ_XCOMP_PERM): ",
                        std::strerror(errno), ")");
#else
  return "AMX needs Linux's permission request, which this build has not";
#endif
}

// What `automatic` means in this process: KATTN_CPU_PRODUCTS when set, else CpuProducts::automatic.
CpuProducts automatic_products() {
  static const CpuProducts chosen = [] {
    const char* env = std::getenv("KATTN_CPU_PRODUCTS");
    return env && *env ? parse_cpu_products(env, "KATTN_CPU_PRODUCTS") : CpuProducts::automatic;
  }();
  return chosen;
}

}  // namespace

const char* cpu_products_name(CpuProducts p) {
  switch (p) {
    case CpuProducts::automatic:
      return "auto";
    case CpuProducts::widened:
      return "widened";
    case CpuProducts::bf16_dot:
      return "bf16-dot";
    case CpuProducts::amx:
      return "amx";
  }
  return "unknown";
}

CpuProducts parse_cpu_products(const std::string& text, const char* what) {
  for (const CpuProducts p : {CpuProducts::automatic, CpuProducts::widened, CpuProducts::bf16_dot, CpuProducts::amx})
    if (text == cpu_products_name(p)) return p;
  throw Error(detail::concat(what, ": expected auto, widened, bf16-dot or amx, got '", text, "'"));
}

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = read_cpu_features();
  return features;
}

bool bf16_dot_on_hardware() { return detail::bf16_dot_compiled() && cpu_features().avx512_bf16; }

std::string amx_refusal() {
  static const std::string refusal = []() -> std::string {
    if (!cpu_features().amx_bf16) return "this CPU has no AMX-BF16 (or KATTN_CPU_DISABLE hides it)";
    if (!bf16_dot_on_hardware()) return "AMX runs beside AVX512_BF16, which this CPU or build lacks";
    if (!detail::amx_compiled()) return "this build has no AMX kernels (an x86-64 build for AVX-512 by GCC 11+ or Clang 12+)";
    return request_tile_registers();
  }();
  return refusal;
}

bool amx_on_hardware() { return amx_refusal().empty(); }

CpuProducts host_cpu_products(CpuProducts requested, bool bf16_queries_and_keys) {
  if (requested == CpuProducts::automatic) requested = automatic_products();
  if (!bf16_queries_and_keys || requested == CpuProducts::widened) return CpuProducts::widened;
  if (requested != CpuProducts::automatic) return requested;
  if (amx_on_hardware()) return CpuProducts::amx;
  // On Intel's cores vdpbf16ps issues on one port where the float FMA has two: the pair path ran
  // 0.72x the widened one on Emerald Rapids with AMX hidden (1.75x on Zen 4, perf/RESULTS.md).
  return bf16_dot_on_hardware() && cpu_features().amd ? CpuProducts::bf16_dot : CpuProducts::widened;
}

CpuProducts host_backward_cpu_products(CpuProducts requested, bool bf16_storage) {
  return host_cpu_products(requested, bf16_storage) == CpuProducts::bf16_dot ? CpuProducts::bf16_dot
                                                                               : CpuProducts::widened;
}

std::string cpu_products_text() {
  const CpuFeatures& f = cpu_features();
  std::string features;
  const auto add = [&](bool has, const char* name) {
    if (has) features += std::string(features.empty() ? "" : " ") + name;
  };
  add(f.avx512, "avx512");
  add(f.avx512_bf16, "avx512_bf16");
  add(f.avx512_fp16, "avx512_fp16");
  add(f.amx_bf16, "amx_bf16");
  add(f.amx_fp16, "amx_fp16");
  std::string text = "cpu: " + f.model + "\n";
  text += "cpu features: " + (features.empty() ? std::string("none of avx512, avx512_bf16, amx") : features) + "\n";
  text += std::string("cpu products: bf16 ") + cpu_products_name(host_cpu_products<bf16, bf16>(CpuProducts::automatic)) +
          (bf16_dot_on_hardware() ? "" : " (bf16-dot when asked for: emulated)") +
          (amx_on_hardware() ? "" : " (amx when asked for: on bf16 dot products)") + ", bf16 backward " +
          cpu_products_name(host_backward_cpu_products(CpuProducts::automatic, true)) +
          ", f16 widened\n";
  if (f.amx_bf16 && !amx_on_hardware()) text += "cpu notice: AMX not used: " + amx_refusal() + "\n";
  if (f.avx512_bf16 && !detail::bf16_dot_compiled())
    text += "cpu notice: the CPU has AVX512_BF16 but this build has no bf16 dot-product kernels\n";
  return text;
}

}  // namespace kattn
