// The storage type a run computes in (--dtype f32|f64|bf16|f16), named by io::DType (bf16 as
// npy.hpp's '<u2' convention): parsing the flag, which input files a run takes, rounding values to
// the type. 16-bit storage reaches `kattn run` (dense, ragged, paged, cascade, and --dist),
// `kattn grad` (dense, ragged, and --dist) and `kattn scale` for now; block-sparse runs take f32 or
// f64.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "args.hpp"
#include "kattn/core/storage.hpp"
#include "kattn/io/npy.hpp"

namespace kattn {
namespace cli {

// Why a command refuses bf16/f16, for its message; nullptr where the command takes them.
constexpr const char* kFloatOnly =
    "this run takes f32 or f64 for now (bf16 and f16 reach kattn run over dense, ragged, paged or cascade inputs and "
    "kattn grad over dense or ragged ones, with or without --dist; not block-sparse)";

// "f32", "f64", "bf16", "f16"; also float32, float64, bfloat16, float16.
io::DType parse_dtype(const std::string& text);
bool is_16bit(io::DType t);
// The name --dtype takes: f32, f64, bf16, f16.
const char* dtype_name(io::DType t);
// The type lse is computed and written in: float32 for 16-bit runs.
io::DType lse_dtype(io::DType t);

// The type to compute in: --dtype when given, else that of q's file (or f32 for random inputs),
// refused when 16-bit and `refuse16` says why.
io::DType run_dtype(const std::optional<std::string>& flag, io::DType fallback, const std::string& q_path,
                    const char* refuse16);
// Refuses an input array that holds no floating values (float32, float64, float16 or bf16 bits);
// the caller checks rank and shape.
void require_input_dtype(const std::string& flag, const std::string& path, io::DType file);
// Refuses bf16 bits ('<u2') unless --dtype bf16 was given: a uint16 array read as bf16 by accident
// would be silent garbage.
void require_bf16_bits_asked(const std::string& flag, const std::string& path, io::DType file, io::DType run,
                             bool dtype_given);

// Calls run(T{}) with T the storage type of dtype (C++17's way to pass a type to a lambda).
template <class Run>
auto with_storage(io::DType dtype, Run&& run) {
  switch (dtype) {
    case io::DType::f64:
      return run(double{});
    case io::DType::bf16:
      return run(bf16{});
    case io::DType::f16:
      return run(fp16{});
    default:
      return run(float{});
  }
}

// Rounds every value to the type (float64: unchanged).
void round_to(io::DType dtype, std::vector<double>& values);

// The values stored as `dtype` (f32, f64, f16 or bf16 bits), little endian: the bytes of an .npy file.
std::vector<unsigned char> encode_values(io::DType dtype, const double* values, std::size_t n);

}  // namespace cli
}  // namespace kattn
