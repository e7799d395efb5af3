// Test helper: writes an .npy file from the command line, so that the CLI contract tests can hand
// `kattn run` index arrays with any (also bad) values.
//   npy_write OUT.npy i32|i64|f32|f64|f16|bf16|b1 SHAPE VALUES     SHAPE "2,3"; VALUES "0,1,5" or "random",
//   "random:nan=K" (element K NaN) or "random:scale=X" (every value times X); b1 (bool) is true
//   where the value is > 0 (random: about half)
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "kattn/core/storage.hpp"
#include "kattn/io/npy.hpp"

namespace {
// Values rounded to a 16-bit storage type (f16 as '<f2', bf16 as '<u2' bits).
template <class S>
std::vector<S> narrowed(const std::vector<double>& v) {
  std::vector<S> out;
  for (double x : v) out.push_back(kattn::narrow<S>(x));
  return out;
}

std::vector<std::int64_t> ints(const std::string& s) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (start <= s.size() && !s.empty()) {
    const std::size_t comma = s.find(',', start);
    out.push_back(std::stoll(s.substr(start, comma - start)));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: npy_write OUT.npy i32|i64|f32|f64|f16|bf16|b1 SHAPE VALUES|random\n");
    return 2;
  }
  const std::string path = argv[1], type = argv[2], values = argv[4];
  const std::vector<std::int64_t> shape = ints(argv[3]);
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  std::vector<double> v;
  if (values.rfind("random", 0) == 0) {
    std::mt19937_64 gen(42);
    std::normal_distribution<double> dist;
    const double scale = values.rfind("random:scale=", 0) == 0 ? std::stod(values.substr(13)) : 1.0;
    for (std::int64_t i = 0; i < n; ++i) v.push_back(scale * dist(gen));
    if (values.rfind("random:nan=", 0) == 0) v.at(std::stoll(values.substr(11))) = std::nan("");
  } else {
    for (std::int64_t x : ints(values)) v.push_back(static_cast<double>(x));
  }
  if (static_cast<std::int64_t>(v.size()) != n) {
    std::fprintf(stderr, "npy_write: %zu values for %lld elements\n", v.size(), (long long)n);
    return 2;
  }
  using kattn::io::DType;
  if (type == "i32") {
    std::vector<std::int32_t> d(v.begin(), v.end());
    kattn::io::write_npy(path, DType::i32, shape, d.data());
  } else if (type == "i64") {
    std::vector<std::int64_t> d(v.begin(), v.end());
    kattn::io::write_npy(path, DType::i64, shape, d.data());
  } else if (type == "b1") {
    std::vector<unsigned char> d;
    for (double x : v) d.push_back(x > 0);
    kattn::io::write_npy(path, DType::b1, shape, d.data());
  } else if (type == "f16") {
    kattn::io::write_npy(path, shape, narrowed<kattn::fp16>(v));
  } else if (type == "bf16") {
    kattn::io::write_npy(path, shape, narrowed<kattn::bf16>(v));
  } else if (type == "f32") {
    std::vector<float> d(v.begin(), v.end());
    kattn::io::write_npy(path, DType::f32, shape, d.data());
  } else {
    kattn::io::write_npy(path, DType::f64, shape, v.data());
  }
  return 0;
}
