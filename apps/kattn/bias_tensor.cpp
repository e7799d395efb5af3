#include "bias_tensor.hpp"

#include <algorithm>
#include <optional>
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

RowBlock BiasSlice::block(const std::vector<std::int64_t>& s) const {
  if (heads.length > 0 && s[1] > 1) {  // heads x rows as one axis of s[1] s[2]
    RowBlock b{s[0], s[1] * s[2], s[3], {}};
    std::int64_t n = 0;
    for (const PositionRun& r : runs) n += r.length;
    for (std::int64_t h = 0; h < heads.length; ++h)
      for (const PositionRun& r : runs)
        b.runs.push_back({(heads.global + h) * s[2] + r.global, h * n + r.local, r.length});
    return b;
  }
  RowBlock b{1, s[axis], 1, runs};
  for (int d = 0; d < axis; ++d) b.outer *= s[d];
  for (int d = axis + 1; d < 4; ++d) b.inner *= s[d];
  return b;
}

std::vector<std::int64_t> BiasSlice::local_shape(std::vector<std::int64_t> s) const {
  if (heads.length > 0 && s[1] > 1) s[1] = heads.length;
  std::int64_t n = 0;
  for (const PositionRun& r : runs) n += r.length;
  s[axis] = n;
  return s;
}

void BiasTensor::read(Args& args, const BiasSlice* slice) {
  const auto value = args.value("--bias");
  if (!value) return;
  io::NpyArray a;
  if (*value == kRandomWord) {
    const RandomProblem r = random_problem(args, "--bias random");
    KATTN_REQUIRE(r.dense, "--bias random: draws a [B, Hq, Nq, Nk] bias for --random B,NQ,NK,HQ,HKV,D (dense inputs)");
    a.dtype = io::DType::f32;
    a.shape = {r.B, r.Hq, r.Nq, r.Nk};
    whole_shape_ = a.shape;
    const std::optional<RowBlock> block = slice ? std::optional<RowBlock>(slice->block(a.shape)) : std::nullopt;
    if (block) a.shape = slice->local_shape(a.shape);
    const std::vector<double> values = random_bias(r, block ? &*block : nullptr);
    a.bytes = encode_values(a.dtype, values.data(), values.size());
  } else {
    if (slice) {
      const io::NpyHeader h = read_input_header("--bias", *value);
      a.dtype = h.dtype, a.shape = h.shape;
    } else {
      a = read_input("--bias", *value);
    }
    KATTN_REQUIRE(a.shape.size() == 4, "--bias ", *value,
                  ": expected a rank-4 array [B or 1, Hq or 1, Nq, Nk], got rank ", a.shape.size());
    KATTN_REQUIRE(a.is_floating() || a.is_16bit() || a.dtype == io::DType::b1, "--bias ", *value,
                  ": expected float32, float64, float16, bf16 bits (<u2) or bool data, got ", io::name(a.dtype));
    whole_shape_ = a.shape;
    if (slice) {
      // The whole array against the whole problem, in the call's words (the call sees only the slice).
      const auto& s = whole_shape_;
      KATTN_REQUIRE((s[0] == 1 || s[0] == slice->B) && (s[1] == 1 || s[1] == slice->Hq) && s[2] == slice->Nq &&
                        s[3] == slice->Nk,
                    "bias: expected [", slice->B, " or 1, ", slice->Hq, " or 1, ", slice->Nq, ", ", slice->Nk,
                    "], got [", s[0], ", ", s[1], ", ", s[2], ", ", s[3], "]");
      a.bytes = read_row_bytes(*value, read_input_header("--bias", *value), slice->block(s));
      a.shape = slice->local_shape(s);
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
