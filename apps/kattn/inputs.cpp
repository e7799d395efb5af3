#include "inputs.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>

#include "bias_tensor.hpp"
#include "kattn/core/alibi.hpp"
#include "kattn/block_mask.hpp"
#include "kattn/core/key_window.hpp"
#include "kattn/cpu_products.hpp"
#include "kattn/errors.hpp"
#include "kattn/memory.hpp"
#include "paths.hpp"
#include "random_variants.hpp"

namespace kattn {
namespace cli {

std::vector<double> random_normal_rows(const RowBlock& rows, std::uint64_t seed) {
  // The same stream as random_normal(outer * N * inner, seed), every value drawn in order (the
  // normal distribution's draws cannot be skipped), only the runs' values kept.
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(0.0, 1.0);
  std::vector<PositionRun> runs = rows.runs;
  std::sort(runs.begin(), runs.end(), [](const PositionRun& a, const PositionRun& b) { return a.global < b.global; });
  std::vector<double> out(static_cast<std::size_t>(rows.local_size()));
  // Empty rows draw nothing: return before looping over an outer count that may pass 2^32.
  if (rows.N == 0 || rows.inner == 0) return out;
  const std::int64_t n = rows.local_length();
  const auto skip = [&](std::int64_t count) {
    for (std::int64_t i = 0; i < count; ++i) dist(gen);
  };
  for (std::int64_t o = 0; o < rows.outer; ++o) {
    std::int64_t at = 0;  // the next position drawn
    for (const PositionRun& r : runs) {
      skip((r.global - at) * rows.inner);
      double* dst = out.data() + (o * n + r.local) * rows.inner;
      for (std::int64_t i = 0; i < r.length * rows.inner; ++i) dst[i] = dist(gen);
      at = r.global + r.length;
    }
    skip((rows.N - at) * rows.inner);
  }
  return out;
}

std::vector<std::int64_t> parse_lengths(const std::string& text, const char* flag, std::int64_t max) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = text.find(',', start);
    out.push_back(parse_integer(text.substr(start, comma - start), flag, 0, max));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

io::NpyHeader read_floating_header(const std::string& path, const std::string& flag, std::size_t rank,
                                   const std::string& dims) {
  io::NpyHeader a = read_input_header(flag, path);
  require_input_dtype(flag, path, a.dtype);
  KATTN_REQUIRE(a.shape.size() == rank, flag, " ", path, ": expected a rank-", rank, " array ", dims, ", got rank ",
                a.shape.size());
  return a;
}

namespace {

io::NpyHeader read_rank4_floating(const std::string& path, const std::string& flag, Layout layout) {
  const bool kv = flag == "--k" || flag == "--v", bnhd = layout == Layout::bnhd;
  return read_floating_header(
      path, flag, 4,
      kv ? (bnhd ? "[B, Nk, Hkv, D]" : "[B, Hkv, Nk, D]") : (bnhd ? "[B, Nq, Hq, D]" : "[B, Hq, Nq, D]"));
}

}  // namespace

void require_one_dtype(const std::string& flag, const std::string& path, io::DType dtype, io::DType first,
                       bool dtype_given) {
  KATTN_REQUIRE(dtype_given || dtype == first, flag, " ", path, ": ", io::name(dtype), " data, but q is ",
                io::name(first),
                "; give every input in one dtype, or say which to compute in with --dtype f32|f64|bf16|f16");
}

DenseInputs describe_dense_inputs(Args& args, const std::string& extra, DenseSource& source, const char* refuse16) {
  DenseInputs in;
  const auto random = args.integers("--random", 6);
  const auto seed = args.integer("--seed", 0, std::numeric_limits<std::int64_t>::max());
  const auto dtype = args.value("--dtype");
  in.layout = read_layout(args);
  const auto qf = args.value("--q"), kf = args.value("--k"), vf = args.value("--v");
  const auto ef = extra.empty() ? std::nullopt : args.value(extra);
  source = DenseSource{};
  if (random) {
    KATTN_REQUIRE(!qf && !kf && !vf && !ef, "--random: give either --random or input files, not both");
    const auto& r = *random;
    const char* names[6] = {"B", "NQ", "NK", "HQ", "HKV", "D"};
    for (int i = 0; i < 6; ++i)
      KATTN_REQUIRE(r[i] >= (i == 1 || i == 2 ? 0 : 1), "--random: ", names[i], " must be >= ",
                    (i == 1 || i == 2 ? 0 : 1), ", got ", r[i]);
    in.B = r[0], in.Nq = r[1], in.Nk = r[2], in.Hq = r[3], in.Hkv = r[4], in.D = r[5];
    // In double: the products of huge arguments must not wrap before they are refused.
    const double elems = double(in.B) * std::max(double(in.Nq) * double(in.Hq), double(in.Nk) * double(in.Hkv)) *
                         double(in.D);
    KATTN_REQUIRE(elems < 4e9, "--random: ", elems, " elements per array is more than this program will draw");
    in.dtype = run_dtype(dtype, io::DType::f32, "", refuse16);
    source.random = true;
    source.seed = static_cast<std::uint64_t>(seed.value_or(0));
    source.has_extra = !extra.empty();
    return in;
  }
  KATTN_REQUIRE(qf && kf && vf, "inputs: give --q Q.npy --k K.npy --v V.npy, or --random B,NQ,NK,HQ,HKV,D");
  KATTN_REQUIRE(!seed, "--seed: only meaningful with --random");
  const io::NpyHeader q = read_rank4_floating(*qf, "--q", in.layout);
  const io::NpyHeader k = read_rank4_floating(*kf, "--k", in.layout);
  const io::NpyHeader v = read_rank4_floating(*vf, "--v", in.layout);
  in.B = q.shape[0], in.D = q.shape[3];
  positions_and_heads(in.layout, q.shape, in.Nq, in.Hq);
  positions_and_heads(in.layout, k.shape, in.Nk, in.Hkv);
  warn_if_transposed("--q", *qf, in.layout, q.shape);
  // k against q first, then v against k: the message blames the array that differs.
  KATTN_REQUIRE(k.shape[0] == in.B, "--k ", *kf, ": expected batch ", in.B, " (from q), got ", k.shape[0]);
  KATTN_REQUIRE(k.shape[3] == in.D, "--k ", *kf, ": expected head dim ", in.D, " (from q), got ", k.shape[3]);
  KATTN_REQUIRE(v.shape[3] == in.D, "--v ", *vf, ": expected head dim ", in.D, " (from q and k), got ", v.shape[3]);
  KATTN_REQUIRE(k.shape == v.shape, "--v ", *vf, ": expected the shape of k ", shape_text(k.shape, "()"), ", got ",
                shape_text(v.shape, "()"));
  require_one_dtype("--k", *kf, k.dtype, q.dtype, dtype.has_value());
  require_one_dtype("--v", *vf, v.dtype, q.dtype, dtype.has_value());
  in.dtype = run_dtype(dtype, q.dtype, *qf, refuse16);
  require_bf16_bits_asked("--q", *qf, q.dtype, in.dtype, dtype.has_value());
  require_bf16_bits_asked("--k", *kf, k.dtype, in.dtype, dtype.has_value());
  require_bf16_bits_asked("--v", *vf, v.dtype, in.dtype, dtype.has_value());
  source.paths = {*qf, *kf, *vf, ""};
  source.headers = {q, k, v, io::NpyHeader{}};
  if (ef) {
    const io::NpyHeader e = read_rank4_floating(*ef, extra, in.layout);
    KATTN_REQUIRE(e.shape == q.shape, extra, " ", *ef, ": expected the shape of q ", shape_text(q.shape, "()"), ", got ",
                  shape_text(e.shape, "()"));
    require_one_dtype(extra, *ef, e.dtype, q.dtype, dtype.has_value());
    require_bf16_bits_asked(extra, *ef, e.dtype, in.dtype, dtype.has_value());
    source.paths[3] = *ef;
    source.headers[3] = e;
    source.has_extra = true;
  }
  return in;
}

std::vector<double> dense_rows(const DenseInputs& in, const DenseSource& source, DenseArray which,
                               const std::vector<PositionRun>& runs) {
  const int i = static_cast<int>(which);
  const bool kv = which == DenseArray::k || which == DenseArray::v;
  const std::int64_t N = kv ? in.Nk : in.Nq, H = kv ? in.Hkv : in.Hq;
  std::vector<double> values;
  if (source.random) {
    // Drawn in [B, N, H, D] order whatever the files' layout.
    values = random_normal_rows(RowBlock{in.B, N, H * in.D, runs}, 3 * source.seed + 1 + std::uint64_t(i));
  } else {
    // The file's own order: [B, N, H * D] or [B * H, N, D] with the sequence in the middle.
    const bool bnhd = in.layout == Layout::bnhd;
    const RowBlock rows{bnhd ? in.B : in.B * H, N, bnhd ? H * in.D : in.D, runs};
    values = read_rows(source.paths[i], source.headers[i], rows);
    values = to_bnhd(in.layout, file_shape(in.layout, in.B, rows.local_length(), H, in.D), std::move(values));
  }
  round_to(in.dtype, values);
  return values;
}

DenseInputs read_dense_inputs(Args& args, const std::string& extra, StoredValues* extra_values,
                              const char* refuse16) {
  DenseSource source;
  DenseInputs in = describe_dense_inputs(args, extra_values ? extra : "", source, refuse16);
  if (source.random) {
    // q, k, v in the run's type on the host, each drawn in float64 first, before any of them is drawn.
    const std::uint64_t nq = in.B * in.D * in.Nq * in.Hq, nk = in.B * in.D * in.Nk * in.Hkv;
    kattn::check_memory<Kokkos::HostSpace>(io::size_of(in.dtype) * (nq + 2 * nk) + 8 * std::max(nq, nk),
                                           "--random: the inputs", "q, k and v in the run's type, drawn in float64",
                                           "use smaller shapes");
  }
  const std::vector<PositionRun> all_q = {PositionRun{0, 0, in.Nq}}, all_k = {PositionRun{0, 0, in.Nk}};
  in.q = StoredValues(in.dtype, dense_rows(in, source, DenseArray::q, all_q));
  in.k = StoredValues(in.dtype, dense_rows(in, source, DenseArray::k, all_k));
  in.v = StoredValues(in.dtype, dense_rows(in, source, DenseArray::v, all_k));
  if (extra_values && source.has_extra)
    *extra_values = StoredValues(in.dtype, dense_rows(in, source, DenseArray::extra, all_q));
  return in;
}

Options read_options(Args& args, BiasTensor* bias) {
  Options opt;
  opt.causal = args.flag("--causal");
  if (auto w = args.integers("--window", 2)) {
    opt.window_left = (*w)[0];
    opt.window_right = (*w)[1];
  }
  if (auto c = args.number("--softcap")) opt.softcap = *c;
  if (auto s = args.number("--scale")) {
    KATTN_REQUIRE(*s != 0.0, "--scale: expected a non-zero scale, got 0");
    opt.scale = *s;
  }
  opt.block_q = static_cast<int>(args.integer("--block-q", 1, 1 << 20).value_or(0));
  opt.block_k = static_cast<int>(args.integer("--block-k", 1, 1 << 20).value_or(0));
  opt.splits = static_cast<int>(args.integer("--splits", 0, 1 << 24).value_or(0));
  opt.split_chunk = args.integer("--split-chunk", 1, std::int64_t(1) << 40).value_or(0);
  if (auto p = args.value("--cpu-products")) opt.cpu_products = parse_cpu_products(*p, "--cpu-products");
  if (auto v = args.value("--sinks"))
    opt.sinks = *v == kRandomWord ? random_sinks(random_problem(args, "--sinks random"))
                                  : read_per_head("--sinks", "logit", *v);
  if (auto v = args.value("--alibi-slopes")) {
    if (*v == kRandomWord)
      opt.alibi_slopes = random_slopes(random_problem(args, "--alibi-slopes random"));
    else if (*v == "standard")
      opt.alibi_slopes = alibi_standard_slopes(int(random_problem(args, "--alibi-slopes standard").Hq));
    else
      opt.alibi_slopes = read_per_head("--alibi-slopes", "slope", *v);
  }
  KATTN_REQUIRE(bias || !args.has("--bias"), "--bias: a bias tensor goes with kattn run and grad");
  if (bias) {
    bias->read(args);
    opt.bias = bias->device();
  }
  return opt;
}

std::vector<double> read_per_head(const char* flag, const char* what, const std::string& path) {
  const io::NpyArray a = read_input(flag, path);
  KATTN_REQUIRE(a.shape.size() == 1, flag, ": expected a 1-D array of one ", what, " per query head, got ",
                a.shape.size(), " dims in ", path);
  KATTN_REQUIRE(a.is_floating() || a.is_16bit(), flag, ": expected floating-point values, got ", io::name(a.dtype),
                " in ", path);
  return a.values<double>();
}

const char* forward_cpu_products(const char* dtype, const Options& opt) {
  if (!Kokkos::SpaceAccessibility<Kokkos::DefaultExecutionSpace, Kokkos::HostSpace>::accessible) return nullptr;
  return cpu_products_name(host_cpu_products(opt.cpu_products, std::string(dtype) == "bf16"));
}

std::string mask_summary(const Options& opt) {
  std::string s = opt.causal ? " causal" : "";
  if (opt.window_left >= 0 || opt.window_right >= 0)
    s += " window=" + std::to_string(opt.window_left) + "," + std::to_string(opt.window_right);
  if (opt.softcap > 0) {
    char c[32];
    std::snprintf(c, sizeof c, " softcap=%g", opt.softcap);
    s += c;
  }
  if (!opt.sinks.empty()) s += " sinks";
  if (!opt.alibi_slopes.empty()) s += " alibi";
  if (opt.bias.active()) s += " bias";
  return s;
}

StoredValues::StoredValues(io::DType dtype, const std::vector<double>& rounded)
    : dtype_(dtype), bytes_(encode_values(dtype, rounded.data(), rounded.size())) {}

std::vector<double> StoredValues::widened(std::size_t first, std::size_t count) const {
  count = std::min(count, size() - first);
  std::vector<double> out(count);
  io::decode_elements(dtype_, bytes_.data() + first * io::size_of(dtype_), count, out.data());
  return out;
}

namespace {

template <class T>
constexpr io::DType storage_dtype() {
  return std::is_same_v<T, double> ? io::DType::f64
         : std::is_same_v<T, bf16> ? io::DType::bf16
         : std::is_same_v<T, fp16> ? io::DType::f16
                                   : io::DType::f32;
}

// A view of the dims (n3 < 0: rank 3) whose host copy fill(T*) writes.
template <class View, class Fill>
View filled_view(const std::string& label, std::int64_t n0, std::int64_t n1, std::int64_t n2, std::int64_t n3,
                 Fill&& fill) {
  View view;
  if constexpr (View::rank == 4)
    view = View(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), n0, n1, n2, n3);
  else
    view = View(Kokkos::view_alloc(Kokkos::WithoutInitializing, label), n0, n1, n2);
  auto host = Kokkos::create_mirror_view(view);
  fill(host.data());
  Kokkos::deep_copy(view, host);
  return view;
}

}  // namespace

template <class View>
View to_view(const std::vector<double>& values, const std::string& label, std::int64_t n0, std::int64_t n1,
             std::int64_t n2, std::int64_t n3) {
  using T = typename View::non_const_value_type;
  return filled_view<View>(label, n0, n1, n2, n3, [&](T* h) {
    for (std::size_t i = 0; i < values.size(); ++i) h[i] = narrow<T>(values[i]);
  });
}

template <class View>
View to_view(const StoredValues& values, const std::string& label, std::int64_t n0, std::int64_t n1, std::int64_t n2,
             std::int64_t n3) {
  using T = typename View::non_const_value_type;
  return filled_view<View>(label, n0, n1, n2, n3, [&](T* h) {
    if (values.dtype() == storage_dtype<T>()) {
      // the type's own bits (an empty view has no data to copy to: memcpy takes no null pointer)
      if (values.size() > 0) std::memcpy(h, values.bytes(), values.size() * sizeof(T));
      return;
    }
    constexpr std::size_t piece = std::size_t(1) << 20;  // widened a piece at a time
    for (std::size_t at = 0; at < values.size(); at += piece) {
      const std::vector<double> wide = values.widened(at, piece);
      for (std::size_t i = 0; i < wide.size(); ++i) h[at + i] = narrow<T>(wide[i]);
    }
  });
}

template <class View>
std::vector<double> from_view(const View& view) {
  auto host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), view);
  std::vector<double> out(host.size());
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<double>(widen(host.data()[i]));
  return out;
}

Kokkos::View<std::int64_t*> index_view(const std::vector<std::int64_t>& values, const char* label) {
  Kokkos::View<std::int64_t*> v(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), values.size());
  auto h = Kokkos::create_mirror_view(v);
  std::copy(values.begin(), values.end(), h.data());
  Kokkos::deep_copy(v, h);
  return v;
}

template <class View>
void poison(const View& view) {
  Kokkos::deep_copy(view, narrow<typename View::non_const_value_type>(std::numeric_limits<float>::quiet_NaN()));
}

#define KATTN_CLI_VIEW_FUNCTIONS(View)                                                                          \
  template View to_view<View>(const std::vector<double>&, const std::string&, std::int64_t, std::int64_t,     \
                              std::int64_t, std::int64_t);                                                     \
  template View to_view<View>(const StoredValues&, const std::string&, std::int64_t, std::int64_t, std::int64_t, \
                              std::int64_t);                                                                   \
  template std::vector<double> from_view<View>(const View&);                                                   \
  template void poison<View>(const View&);
KATTN_CLI_VIEW_FUNCTIONS(Tensor4<float>)
KATTN_CLI_VIEW_FUNCTIONS(Tensor4<double>)
KATTN_CLI_VIEW_FUNCTIONS(Tensor3<float>)
KATTN_CLI_VIEW_FUNCTIONS(Tensor3<double>)
KATTN_CLI_VIEW_FUNCTIONS(Tensor4<bf16>)
KATTN_CLI_VIEW_FUNCTIONS(Tensor4<fp16>)
KATTN_CLI_VIEW_FUNCTIONS(Tensor3<bf16>)
KATTN_CLI_VIEW_FUNCTIONS(Tensor3<fp16>)
template void poison<Tensor2<float>>(const Tensor2<float>&);
template void poison<Tensor2<double>>(const Tensor2<double>&);
template std::vector<double> from_view<Tensor2<float>>(const Tensor2<float>&);
template std::vector<double> from_view<Tensor2<double>>(const Tensor2<double>&);

template <class T>
DenseViews<T> make_dense_views(const DenseInputs& in) {
  DenseViews<T> d;
  d.q = to_view<Tensor4<T>>(in.q, "q", in.B, in.Nq, in.Hq, in.D);
  d.k = to_view<Tensor4<T>>(in.k, "k", in.B, in.Nk, in.Hkv, in.D);
  d.v = to_view<Tensor4<T>>(in.v, "v", in.B, in.Nk, in.Hkv, in.D);
  d.o = Tensor4<T>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "o"), in.B, in.Nq, in.Hq, in.D);
  d.lse = Tensor3<accumulate_t<T>>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "lse"), in.B, in.Hq, in.Nq);
  poison(d.o);
  poison(d.lse);
  return d;
}
template DenseViews<float> make_dense_views<float>(const DenseInputs&);
template DenseViews<double> make_dense_views<double>(const DenseInputs&);
template DenseViews<bf16> make_dense_views<bf16>(const DenseInputs&);
template DenseViews<fp16> make_dense_views<fp16>(const DenseInputs&);

ErrorStats compare(const std::vector<double>& out, const std::vector<double>& ref) {
  KATTN_ASSERT(out.size() == ref.size());
  ErrorStats e;
  double diff2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!std::isfinite(out[i]) || !std::isfinite(ref[i])) {
      const bool same = (std::isnan(out[i]) && std::isnan(ref[i])) || out[i] == ref[i];
      if (same) {
        ++e.nonfinite_matched;
      } else if (e.nonfinite++ == 0) {
        e.first_nonfinite = static_cast<std::int64_t>(i);
      }
      continue;
    }
    const double d = std::abs(out[i] - ref[i]);
    e.max_abs = std::max(e.max_abs, d);
    diff2 += d * d;
    ref2 += ref[i] * ref[i];
  }
  e.rel = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
  return e;
}

double visible_pairs(std::int64_t q_len, std::int64_t kv_len, std::int64_t Hq, const Options& opt,
                     const BlockMask* mask) {
  const KeyWindow w = KeyWindow::from(opt);
  if (!mask) return double(w.visible_pairs(q_len, kv_len)) * double(Hq);
  const std::int64_t B = mask->block();  // the kept blocks' pairs the window keeps
  double pairs = 0;
  for (int h = 0; h < mask->heads(); ++h)
    for (std::int64_t r = 0; r < mask->q_blocks(); ++r)
      for (std::int64_t e = mask->indptr()[h * mask->q_blocks() + r]; e < mask->indptr()[h * mask->q_blocks() + r + 1];
           ++e) {
        const std::int64_t c = mask->indices()[e];
        for (std::int64_t i = r * B; i < std::min((r + 1) * B, q_len); ++i) {
          int begin = 0, end = 0;
          w.tile_keys(i, c * B, static_cast<int>(std::min(B, kv_len - c * B)), q_len, kv_len, begin, end);
          pairs += double(end - begin);
        }
      }
  return mask->heads() == 1 ? pairs * double(Hq) : pairs;
}

double attention_flops(const DenseInputs& in, const Options& opt, const BlockMask* mask) {
  return 4.0 * double(in.D) * double(in.B) * visible_pairs(in.Nq, in.Nk, in.Hq, opt, mask);
}
void write_dense(const std::string& path, const DenseInputs& in, std::int64_t N, std::int64_t H,
                 const std::vector<double>& values) {
  write_array(path, in.dtype, file_shape(in.layout, in.B, N, H, in.D), from_bnhd(in.layout, in.B, N, H, in.D, values));
}

void write_dense(const std::string& path, const DenseInputs& in, std::int64_t N, std::int64_t H,
                 const StoredValues& values) {
  if (in.layout != Layout::bnhd) return write_dense(path, in, N, H, values.widened());
  write_array(path, in.dtype, file_shape(in.layout, in.B, N, H, in.D), values);
}

void write_array(const std::string& path, io::DType dtype, const std::vector<std::int64_t>& shape,
                 const std::vector<double>& values) {
  io::write_npy(path, dtype, shape, encode_values(dtype, values.data(), values.size()).data());
}

void write_array(const std::string& path, io::DType dtype, const std::vector<std::int64_t>& shape,
                 const StoredValues& values) {
  if (dtype != values.dtype()) return write_array(path, dtype, shape, values.widened());
  io::write_npy(path, dtype, shape, values.bytes());
}

}  // namespace cli
}  // namespace kattn
