// Fuzz target: the .npy reader (kattn::io::parse_npy) on any byte sequence. Every input must
// either parse into an array whose bytes match its shape and dtype, or be refused with a
// kattn::Error; anything else (a crash, a sanitizer report, another exception) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "kattn/errors.hpp"
#include "kattn/io/npy.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) { return 0; }

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const kattn::io::NpyArray a = kattn::io::parse_npy(data, size, "fuzz.npy");
    std::uint64_t n = 1;
    for (std::int64_t s : a.shape) {
      if (s < 0) std::abort();
      n *= static_cast<std::uint64_t>(s);
    }
    if (static_cast<std::uint64_t>(a.size()) != n || a.bytes.size() != n * kattn::io::size_of(a.dtype)) std::abort();
    // The conversions the CLI uses read every element.
    if (a.is_floating() || a.is_16bit()) {
      if (a.values<double>().size() != n) std::abort();
    } else if (a.values<std::int64_t>().size() != n) {
      std::abort();
    }
  } catch (const kattn::Error& e) {
    // A refusal, the expected outcome for bad input: one printable line (the CLI prints it as is).
    for (const char* c = e.what(); *c; ++c)
      if (static_cast<unsigned char>(*c) < 0x20 || static_cast<unsigned char>(*c) >= 0x7f) std::abort();
  }
  return 0;
}
