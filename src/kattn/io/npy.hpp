// .npy reading and writing (NumPy format 1.0, 2.0 and 3.0; C order, little endian) for the
// `kattn` program and the tests. Anything else is refused with a kattn::Error naming the file.
// bfloat16 convention (NumPy has no bfloat16): a uint16 array ('<u2') holding the bf16 bit
// patterns, i.e. the upper halves of float32 values; every '<u2' array is read as such.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kattn {
namespace io {

enum class DType { f32, f64, f16, bf16, i32, i64, b1 };

const char* name(DType t);
std::size_t size_of(DType t);

struct NpyArray {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::vector<unsigned char> bytes;  // little-endian element data, C order

  std::int64_t size() const;
  bool is_floating() const { return dtype == DType::f32 || dtype == DType::f64; }
  bool is_16bit() const { return dtype == DType::f16 || dtype == DType::bf16; }
  bool is_integer() const { return dtype == DType::i32 || dtype == DType::i64; }
  // Elements converted to T (float/double from floating and 16-bit arrays, exactly; int64 from
  // integer or bool ones).
  template <class T>
  std::vector<T> values() const;
};

// Parses an .npy image; `what` names it in errors ("q.npy").
NpyArray parse_npy(const unsigned char* data, std::size_t size, const std::string& what);
NpyArray read_npy(const std::string& path);

void write_npy(const std::string& path, DType dtype, const std::vector<std::int64_t>& shape, const void* data);
// T: float, double, int32, int64, or kattn::fp16 / kattn::bf16 ('<f2' / '<u2', the bf16 convention).
template <class T>
void write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const std::vector<T>& values);

}  // namespace io
}  // namespace kattn
