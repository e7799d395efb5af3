// Fuzz target: ragged and paged batch metadata (make_ragged_layout, make_paged_layout and the
// checks against k and v in ragged_params / paged_params) on any byte sequence. Metadata either
// is refused with a kattn::Error or, when accepted, must be safe to run: small accepted problems
// go through split-KV attention (the planner's split or the one the input asks for) and the
// textbook reference on the host, under the sanitizers, and must agree and stay finite.
//
// Input (little endian; missing bytes read as 0):
//   byte 0   flags: bit 0 paged, bit 1 int32 index arrays, bits 2-4 splits (0: planned), bit 5 causal
//   ragged:  q_indptr, kv_indptr
//   paged:   q_indptr, kv_page_indptr, kv_page_indices, kv_last_page_len, then page_size (one
//            value) and the cache's page count (one byte)
//   an array: one byte n (taken mod 17), then n values of 4 (int32) or 8 (int64) bytes.
#include <Kokkos_Core.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kattn/attention.hpp"
#include "kattn/errors.hpp"
#include "kattn/paged.hpp"
#include "kattn/ragged.hpp"
#include "kattn/reference.hpp"

namespace {

using Space = Kokkos::DefaultHostExecutionSpace;
using Mem = Kokkos::HostSpace;
constexpr int kHq = 2, kHkv = 1, kD = 4;

struct Reader {
  const std::uint8_t* data;
  std::size_t size, pos = 0;
  std::uint8_t byte() { return pos < size ? data[pos++] : 0; }
  std::int64_t value(int width) {
    std::uint64_t v = 0;
    for (int i = 0; i < width; ++i) v |= std::uint64_t(byte()) << (8 * i);
    if (width == 4) return static_cast<std::int32_t>(static_cast<std::uint32_t>(v));
    std::int64_t s;
    std::memcpy(&s, &v, 8);
    return s;
  }
  std::vector<std::int64_t> array(int width) {
    std::vector<std::int64_t> a(byte() % 17);
    for (auto& x : a) x = value(width);
    return a;
  }
};

template <class I>
Kokkos::View<I*, Mem> index_view(const std::vector<std::int64_t>& a) {
  Kokkos::View<I*, Mem> v("fuzz::index", a.size());
  for (std::size_t i = 0; i < a.size(); ++i) v(i) = static_cast<I>(a[i]);
  return v;
}

Kokkos::View<float***, Mem> rows(const char* label, std::int64_t n, int heads) {
  Kokkos::View<float***, Mem> v(std::string(label), n, heads, kD);
  for (std::size_t i = 0; i < v.span(); ++i) v.data()[i] = static_cast<float>((i * 7919) % 13) / 13.0f - 0.5f;
  return v;
}

// Split-KV against the reference on the same (accepted) problem: both finite, and close.
template <class Keys>
void run_and_compare(const Keys& keys, const kattn::Options& opt) {
  const auto& layout = keys.layout;
  const auto q = rows("fuzz::q", layout.total_q, kHq);
  Kokkos::View<float***, Mem> o("fuzz::o", layout.total_q, kHq, kD), o_ref("fuzz::o_ref", layout.total_q, kHq, kD);
  Kokkos::View<float**, Mem> lse("fuzz::lse", layout.total_q, kHq), lse_ref("fuzz::lse_ref", layout.total_q, kHq);
  kattn::attention(Space(), q, keys, o, lse, opt);
  kattn::Options ref_opt = opt;
  ref_opt.splits = 0;
  kattn::reference(Space(), q, keys.k, keys.v, o_ref, lse_ref, layout, ref_opt);
  Space().fence();
  for (std::size_t i = 0; i < o.span(); ++i) {
    const float a = o.data()[i], b = o_ref.data()[i];
    if (!std::isfinite(a) || !std::isfinite(b) || std::fabs(a - b) > 1e-4f) std::abort();
  }
  for (std::size_t i = 0; i < lse.span(); ++i) {
    const float a = lse.data()[i], b = lse_ref.data()[i];
    if (std::isnan(a) || std::isnan(b) || (a != b && std::fabs(a - b) > 1e-4f * (1 + std::fabs(b)))) std::abort();
  }
}

template <class I>
void ragged(Reader& in, const kattn::Options& opt) {
  const int w = sizeof(I);
  const auto qi = in.array(w), ki = in.array(w);
  const auto layout = kattn::make_ragged_layout<Mem>(index_view<I>(qi), index_view<I>(ki));
  if (layout.total_q > 64 || layout.total_kv > 4096) return;  // accepted; too large to run here
  const auto k = rows("fuzz::k", layout.total_kv, kHkv);
  run_and_compare(kattn::kv::ragged(k, k, layout), opt);
}

template <class I>
void paged(Reader& in, const kattn::Options& opt) {
  const int w = sizeof(I);
  const auto qi = in.array(w), pi = in.array(w), idx = in.array(w), last = in.array(w);
  const std::int64_t page_size = in.value(w);
  const int pages = in.byte() % 33;
  const auto layout = kattn::make_paged_layout<Mem>(index_view<I>(qi), index_view<I>(pi), index_view<I>(idx),
                                                    index_view<I>(last), page_size);
  if (layout.total_q > 64 || layout.page_size > 64) return;  // accepted; too large to run here
  Kokkos::View<float****, Mem> k("fuzz::k", pages, layout.page_size, kHkv, kD);
  for (std::size_t i = 0; i < k.span(); ++i) k.data()[i] = static_cast<float>((i * 104729) % 11) / 11.0f - 0.5f;
  run_and_compare(kattn::kv::paged(k, k, layout), opt);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // One host thread: libFuzzer runs one input at a time, and the machine may be shared.
  static char name[] = "fuzz_layout", threads[] = "--kokkos-num-threads=1";
  static char* argv[] = {name, threads, nullptr};
  int argc = 2;
  Kokkos::initialize(argc, argv);
  std::atexit([] { Kokkos::finalize(); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Reader in{data, size};
  const std::uint8_t flags = in.byte();
  kattn::Options opt;
  opt.splits = (flags >> 2) & 7;
  opt.causal = (flags >> 5) & 1;
  try {
    const bool int32 = flags & 2;
    if (flags & 1) {
      int32 ? paged<std::int32_t>(in, opt) : paged<std::int64_t>(in, opt);
    } else {
      int32 ? ragged<std::int32_t>(in, opt) : ragged<std::int64_t>(in, opt);
    }
  } catch (const kattn::Error& e) {
    // A refusal, the expected outcome for bad input: one printable line (the CLI prints it as is).
    for (const char* c = e.what(); *c; ++c)
      if (static_cast<unsigned char>(*c) < 0x20 || static_cast<unsigned char>(*c) >= 0x7f) std::abort();
  }
  return 0;
}
