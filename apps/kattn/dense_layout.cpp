#include "dense_layout.hpp"

#include <cstdio>

#include "kattn/errors.hpp"

namespace kattn {
namespace cli {
namespace {

// [B, X, Y, D] -> [B, Y, X, D].
std::vector<double> swap_middle(const std::vector<double>& v, std::int64_t B, std::int64_t X, std::int64_t Y,
                                std::int64_t D) {
  std::vector<double> out(v.size());
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t x = 0; x < X; ++x)
      for (std::int64_t y = 0; y < Y; ++y)
        for (std::int64_t d = 0; d < D; ++d) out[((b * Y + y) * X + x) * D + d] = v[((b * X + x) * Y + y) * D + d];
  return out;
}

}  // namespace

std::string shape_text(const std::vector<std::int64_t>& shape, const char* brackets) {
  std::string s(1, brackets[0]);
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + brackets[1];
}

Layout read_layout(Args& args) {
  const std::string s = args.value("--layout").value_or("bnhd");
  KATTN_REQUIRE(s == "bnhd" || s == "bhnd", "--layout: expected bnhd ([B, N, H, D]) or bhnd ([B, H, N, D]), got '", s,
                "'");
  return s == "bnhd" ? Layout::bnhd : Layout::bhnd;
}

const char* name(Layout layout) { return layout == Layout::bnhd ? "bnhd" : "bhnd"; }

std::vector<std::int64_t> file_shape(Layout layout, std::int64_t B, std::int64_t N, std::int64_t H, std::int64_t D) {
  return layout == Layout::bnhd ? std::vector<std::int64_t>{B, N, H, D} : std::vector<std::int64_t>{B, H, N, D};
}

void positions_and_heads(Layout layout, const std::vector<std::int64_t>& shape, std::int64_t& N, std::int64_t& H) {
  N = layout == Layout::bnhd ? shape[1] : shape[2];
  H = layout == Layout::bnhd ? shape[2] : shape[1];
}

std::vector<double> to_bnhd(Layout layout, const std::vector<std::int64_t>& shape, std::vector<double> values) {
  if (layout == Layout::bnhd) return values;
  return swap_middle(values, shape[0], shape[1], shape[2], shape[3]);
}

std::vector<double> from_bnhd(Layout layout, std::int64_t B, std::int64_t N, std::int64_t H, std::int64_t D,
                              const std::vector<double>& values) {
  if (layout == Layout::bnhd) return values;
  return swap_middle(values, B, N, H, D);
}

void warn_if_transposed(const std::string& flag, const std::string& path, Layout layout,
                        const std::vector<std::int64_t>& shape) {
  std::int64_t N = 0, H = 0;
  positions_and_heads(layout, shape, N, H);
  if (!(H > 128 && N < H)) return;
  const Layout other = layout == Layout::bnhd ? Layout::bhnd : Layout::bnhd;
  std::fprintf(stderr,
               "kattn: warning: %s %s %s read as %s gives %lld heads of %lld positions; if the file is %s (%s), "
               "pass --layout %s\n",
               flag.c_str(), path.c_str(), shape_text(shape).c_str(), name(layout), (long long)H, (long long)N,
               other == Layout::bhnd ? "[B, H, N, D]" : "[B, N, H, D]",
               other == Layout::bhnd ? "PyTorch's layout" : "kattn's default", name(other));
}

}  // namespace cli
}  // namespace kattn
