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

// Elements of `dtype` (little-endian bytes) converted to T, as NpyArray::values does.
template <class T>
void decode_elements(DType dtype, const unsigned char* bytes, std::size_t n, T* out);

// What an .npy header says, and where the element data starts in the file.
struct NpyHeader {
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
  std::uint64_t data_offset = 0;
  std::int64_t size() const;
};

// Parses the header at the start of an .npy image of `file_size` bytes, of which the first
// `available` are at `data`; checks that the file holds exactly the data the header announces.
NpyHeader parse_npy_header(const unsigned char* data, std::size_t available, std::uint64_t file_size,
                           const std::string& what);
// The header of an .npy file, reading only its first bytes (for positioned reads of its rows).
NpyHeader read_npy_header(const std::string& path);

// Parses an .npy image; `what` names it in errors ("q.npy").
NpyArray parse_npy(const unsigned char* data, std::size_t size, const std::string& what);
NpyArray read_npy(const std::string& path);

// The bytes before the element data of the .npy file write_npy writes (format 1.0, padded to 64).
std::string npy_prefix(DType dtype, const std::vector<std::int64_t>& shape);

void write_npy(const std::string& path, DType dtype, const std::vector<std::int64_t>& shape, const void* data);
// T: float, double, int32, int64, or kattn::fp16 / kattn::bf16 ('<f2' / '<u2', the bf16 convention).
template <class T>
void write_npy(const std::string& path, const std::vector<std::int64_t>& shape, const std::vector<T>& values);

}  // namespace io
}  // namespace kattn
