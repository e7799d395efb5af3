#include "dtype.hpp"

#include <cstring>

#include "kattn/core/storage.hpp"
#include "kattn/errors.hpp"

namespace kattn {
namespace cli {

io::DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "float32") return io::DType::f32;
  if (s == "f64" || s == "float64") return io::DType::f64;
  if (s == "bf16" || s == "bfloat16") return io::DType::bf16;
  if (s == "f16" || s == "float16") return io::DType::f16;
  KATTN_REQUIRE(false, "--dtype: expected f32, f64, bf16 or f16, got '", s, "'");
  return io::DType::f32;
}

bool is_16bit(io::DType t) { return t == io::DType::bf16 || t == io::DType::f16; }

const char* dtype_name(io::DType t) {
  switch (t) {
    case io::DType::f32:
      return storage_name<float>();
    case io::DType::f64:
      return storage_name<double>();
    case io::DType::bf16:
      return storage_name<bf16>();
    case io::DType::f16:
      return storage_name<fp16>();
    default:
      return io::name(t);
  }
}

io::DType lse_dtype(io::DType t) { return is_16bit(t) ? io::DType::f32 : t; }

io::DType run_dtype(const std::optional<std::string>& flag, io::DType fallback, const std::string& q_path,
                    const char* refuse16) {
  const io::DType t = flag ? parse_dtype(*flag) : fallback;
  if (refuse16 && is_16bit(t)) {
    KATTN_REQUIRE(!flag, "--dtype ", *flag, ": ", refuse16);
    KATTN_REQUIRE(false, "--q ", q_path, ": ", io::name(t), " data, but ", refuse16,
                  ", or give --dtype f32 to compute on its values widened");
  }
  return t;
}

void require_input_dtype(const std::string& flag, const std::string& path, io::DType file) {
  KATTN_REQUIRE(file == io::DType::f32 || file == io::DType::f64 || is_16bit(file), flag, " ", path,
                ": expected float32, float64, float16 or bf16 bits as uint16 (<u2) data, got ", io::name(file));
}

void require_bf16_bits_asked(const std::string& flag, const std::string& path, io::DType file, io::DType run,
                             bool dtype_given) {
  KATTN_REQUIRE(file != io::DType::bf16 || (dtype_given && run == io::DType::bf16), flag, " ", path,
                ": uint16 data (<u2) is read as bf16 bit patterns, only with --dtype bf16");
}

void round_to(io::DType dtype, std::vector<double>& values) {
  switch (dtype) {
    case io::DType::f32:
      for (auto& x : values) x = static_cast<float>(x);
      break;
    case io::DType::bf16:
      for (auto& x : values) x = widen(narrow<bf16>(x));
      break;
    case io::DType::f16:
      for (auto& x : values) x = widen(narrow<fp16>(x));
      break;
    default:
      break;
  }
}

namespace {
template <class S>
void store(const double* values, std::size_t n, unsigned char* out) {
  for (std::size_t i = 0; i < n; ++i) {
    const S x = narrow<S>(values[i]);
    std::memcpy(out + i * sizeof(S), &x, sizeof(S));
  }
}
}  // namespace

std::vector<unsigned char> encode_values(io::DType dtype, const double* values, std::size_t n) {
  std::vector<unsigned char> out(n * io::size_of(dtype));
  switch (dtype) {
    case io::DType::f64:
      store<double>(values, n, out.data());
      break;
    case io::DType::bf16:
      store<bf16>(values, n, out.data());
      break;
    case io::DType::f16:
      store<fp16>(values, n, out.data());
      break;
    default:
      store<float>(values, n, out.data());
  }
  return out;
}

}  // namespace cli
}  // namespace kattn
