#include "bias_tensor.hpp"

#include <algorithm>
#include <string>

#include "dtype.hpp"
#include "kattn/errors.hpp"
#include "kattn/io/npy.hpp"
#include "kattn/score_bias.hpp"
#include "npy_rows.hpp"
#include "paths.hpp"
#include "random_variants.hpp"

namespace kattn {
namespace cli {
namespace {

// The ScoreBias of `bytes` read as elements of B (not copied: score_bias reads only the shape and
// the pointer). Space: where the bytes are.
template <class B, class Space>
ScoreBias typed_bias(const unsigned char* bytes, const std::vector<std::int64_t>& s) {
  const Kokkos::View<const B****, Kokkos::LayoutRight, Space, Kokkos::MemoryUnmanaged> v(
      reinterpret_cast<const B*>(bytes), s[0], s[1], s[2], s[3]);
  return score_bias(v);
}

template <class Space>
ScoreBias typed_bias(io::DType dtype, const unsigned char* bytes, const std::vector<std::int64_t>& s) {
  if (dtype == io::DType::b1) return typed_bias<bool, Space>(bytes, s);
  return with_storage(dtype, [&](auto t) { return typed_bias<decltype(t), Space>(bytes, s); });
}

}  // namespace

void BiasTensor::read(Args& args, const BiasRows* rows) {
  const auto value = args.value("--bias");
  if (!value) return;
  io::NpyArray a;
  if (*value == kRandomWord) {
    const RandomProblem r = random_problem(args, "--bias random");
    KATTN_REQUIRE(r.dense, "--bias random: draws a [B, Hq, Nq, Nk] bias for --random B,NQ,NK,HQ,HKV,D (dense inputs)");
    a.dtype = io::DType::f32;
    a.shape = {r.B, r.Hq, rows ? RowBlock{1, r.Nq, 1, rows->runs}.local_length() : r.Nq, r.Nk};
    const std::vector<double> values = random_bias(r, rows ? &rows->runs : nullptr);
    a.bytes = encode_values(a.dtype, values.data(), values.size());
  } else {
    if (rows) {
      const io::NpyHeader h = read_input_header("--bias", *value);
      a.dtype = h.dtype, a.shape = h.shape;
    } else {
      a = read_input("--bias", *value);
    }
    KATTN_REQUIRE(a.shape.size() == 4, "--bias ", *value,
                  ": expected a rank-4 array [B or 1, Hq or 1, Nq, Nk], got rank ", a.shape.size());
    KATTN_REQUIRE(a.is_floating() || a.is_16bit() || a.dtype == io::DType::b1, "--bias ", *value,
                  ": expected float32, float64, float16, bf16 bits (<u2) or bool data, got ", io::name(a.dtype));
    if (rows) {
      // The whole array against the whole problem, in the call's words (the call sees only the rows).
      const auto& s = a.shape;
      KATTN_REQUIRE((s[0] == 1 || s[0] == rows->B) && (s[1] == 1 || s[1] == rows->Hq) && s[2] == rows->Nq &&
                        s[3] == rows->Nk,
                    "bias: expected [", rows->B, " or 1, ", rows->Hq, " or 1, ", rows->Nq, ", ", rows->Nk, "], got [",
                    s[0], ", ", s[1], ", ", s[2], ", ", s[3], "]");
      a.bytes = read_row_bytes(*value, read_input_header("--bias", *value), RowBlock{s[0] * s[1], s[2], s[3], rows->runs});
      a.shape[2] = RowBlock{1, s[2], 1, rows->runs}.local_length();
    }
    // uint8 and int8 files read as bool too: every byte made 0 or 1, a bool's only values.
    if (a.dtype == io::DType::b1)
      std::transform(a.bytes.begin(), a.bytes.end(), a.bytes.begin(), [](unsigned char x) { return x != 0; });
  }
  // At least one byte: a bias of no elements is still given, its shape checked by the call.
  bytes_ = Kokkos::View<unsigned char*>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "bias"),
                                        std::max<std::size_t>(a.bytes.size(), 1));
  host_bytes_ = Kokkos::create_mirror_view(bytes_);
  std::copy(a.bytes.begin(), a.bytes.end(), host_bytes_.data());
  Kokkos::deep_copy(bytes_, host_bytes_);
  device_ = typed_bias<Kokkos::DefaultExecutionSpace::memory_space>(a.dtype, bytes_.data(), a.shape);
  host_ = typed_bias<Kokkos::HostSpace>(a.dtype, host_bytes_.data(), a.shape);
}

Options BiasTensor::on_host(Options opt) const {
  if (active()) opt.bias = host_;
  return opt;
}

}  // namespace cli
}  // namespace kattn
