#include "grad_ragged.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "batch_inputs.hpp"
#include "commands.hpp"
#include "dtype.hpp"
#include "grad_check.hpp"
#include "inputs.hpp"
#include "json.hpp"
#include "kattn/attention.hpp"
#include "kattn/errors.hpp"
#include "kattn/reference_backward.hpp"
#include "paths.hpp"
#include "run_check.hpp"

namespace kattn {
namespace cli {
namespace {

struct Grads {
  GradientSet grads;  // dsinks with --sinks
  double seconds = 0, forward_seconds = 0;  // seconds: the backward's median
  BackwardInfo info;
  Timing timing;
};

template <class T>
Grads run(const BatchInputs& in, const std::vector<double>& dout_values, const Options& opt,
          const BackwardOptions& bopt, const Timing& timing) {
  const Kokkos::DefaultExecutionSpace space;
  const std::int64_t tq = in.total_q(), tk = in.kv_rows();
  const auto q = to_view<Tensor3<T>>(in.q, "q", tq, in.Hq, in.D);
  const auto k = to_view<Tensor3<T>>(in.k, "k", tk, in.Hkv, in.D);
  const auto v = to_view<Tensor3<T>>(in.v, "v", tk, in.Hkv, in.D);
  const auto dout = to_view<Tensor3<T>>(dout_values, "do", tq, in.Hq, in.D);
  const auto q_indptr = index_view(in.q_indptr, "q_indptr"), kv_indptr = index_view(in.kv_indptr, "kv_indptr");
  Tensor3<T> o("o", tq, in.Hq, in.D);
  Tensor2<accumulate_t<T>> lse("lse", tq, in.Hq);  // float for 16-bit storage
  const auto layout = make_ragged_layout(q_indptr, kv_indptr);
  Options fwd = opt;
  fwd.splits = 1;
  space.fence();
  Grads g;
  auto t0 = std::chrono::steady_clock::now();
  attention(space, q, kv::ragged(k, v, layout), o, lse, fwd);
  space.fence();
  g.forward_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Tensor3<T> dq("dq", tq, in.Hq, in.D), dk("dk", tk, in.Hkv, in.D), dv("dv", tk, in.Hkv, in.D);
  poison(dq), poison(dk), poison(dv);
  space.fence();
  g.timing = timing;
  Options bwd = opt;
  const RepeatWorkspace kept(timing, bwd);
  time_calls(
      g.timing,
      [&] {
        g.info = attention_backward(space, q, kv::ragged(k, v, layout), o, lse, dout, dq, dk, dv, bwd, bopt);
        space.fence();
      },
      [] {});
  g.seconds = g.timing.median();
  g.grads = {from_view(dq), from_view(dk), from_view(dv), g.info.dsinks, {}};
  return g;
}

}  // namespace

RaggedDout ragged_dout_source(const std::optional<std::string>& do_file, const std::optional<std::string>& seed,
                              bool files, bool dtype_given, const BatchInputs& in) {
  RaggedDout src;
  if (do_file) {
    src.file = do_file;
    src.header = read_input_header("--do", *do_file);
    require_input_dtype("--do", *do_file, src.header.dtype);
    require_bf16_bits_asked("--do", *do_file, src.header.dtype, in.dtype, dtype_given);
    KATTN_REQUIRE(src.header.shape == std::vector<std::int64_t>({in.total_q(), in.Hq, in.D}), "--do ", *do_file,
                  ": expected shape [", in.total_q(), ", ", in.Hq, ", ", in.D, "] (the shape of q)");
  } else {
    KATTN_REQUIRE(!files,
                  "--do: give DO.npy [total_q, Hq, D] (the gradient of the loss with respect to o) with "
                  "--q/--k/--v");
    src.seed = seed ? static_cast<std::uint64_t>(parse_integer(*seed, "--seed", 0, INT64_MAX)) : 0;
  }
  return src;
}

std::vector<double> ragged_dout(const RaggedDout& src, const BatchInputs& in, const std::vector<std::int64_t>* rows) {
  const std::int64_t n = in.total_q();
  const RowBlock block{1, n, in.Hq * in.D, rows ? packed_runs(*rows) : std::vector<PositionRun>{PositionRun{0, 0, n}}};
  std::vector<double> dout =
      src.file ? read_rows(*src.file, src.header, block) : random_normal_rows(block, 3 * src.seed + 4);
  round_to(in.dtype, dout);
  return dout;
}

// Sequence by sequence, dense [1, N, H, D] each; dsinks summed over them.
GradientSet ragged_textbook_backward(const BatchInputs& in, const std::vector<double>& dout, const Options& opt) {
  GradientSet all{std::vector<double>(in.q.size()), std::vector<double>(in.k.size()),
                  std::vector<double>(in.v.size()), std::vector<double>(opt.sinks.size()), {}};
  const std::int64_t qrow = in.Hq * in.D, krow = in.Hkv * in.D;
  for (std::int64_t b = 0; b < in.batch(); ++b) {
    const std::int64_t q0 = in.q_indptr[b], nq = in.q_indptr[b + 1] - q0;
    const std::int64_t k0 = in.kv_indptr[b], nk = in.kv_indptr[b + 1] - k0;
    if (nq == 0 || nk == 0) continue;  // no query sees a key: every gradient is 0
    const auto part = [](const std::vector<double>& v, std::int64_t first, std::int64_t count, std::int64_t row) {
      return std::vector<double>(v.begin() + first * row, v.begin() + (first + count) * row);
    };
    using T4 = Tensor4<double>;
    const T4 q = to_view<T4>(part(in.q, q0, nq, qrow), "q", 1, nq, in.Hq, in.D);
    const T4 k = to_view<T4>(part(in.k, k0, nk, krow), "k", 1, nk, in.Hkv, in.D);
    const T4 v = to_view<T4>(part(in.v, k0, nk, krow), "v", 1, nk, in.Hkv, in.D);
    const T4 d = to_view<T4>(part(dout, q0, nq, qrow), "do", 1, nq, in.Hq, in.D);
    T4 dq("dq", 1, nq, in.Hq, in.D), dk("dk", 1, nk, in.Hkv, in.D), dv("dv", 1, nk, in.Hkv, in.D);
    const std::vector<double> dsinks = reference_backward(Kokkos::DefaultExecutionSpace(), q, k, v, d, dq, dk, dv, opt);
    for (std::size_t h = 0; h < dsinks.size(); ++h) all.dsinks[h] += dsinks[h];
    const std::vector<double> hq = from_view(dq), hk = from_view(dk), hv = from_view(dv);
    std::copy(hq.begin(), hq.end(), all.dq.begin() + q0 * qrow);
    std::copy(hk.begin(), hk.end(), all.dk.begin() + k0 * krow);
    std::copy(hv.begin(), hv.end(), all.dv.begin() + k0 * krow);
  }
  return all;
}

int grad_ragged(Args& args, const Options& opt, const BackwardOptions& bopt, const CheckSettings& check,
                const Timing& timing, const Console& console, const GradPaths& paths) {
  const auto do_file = args.value("--do");
  const auto seed = args.peek("--seed");
  const bool files = args.has("--q");
  const bool dtype_given = args.has("--dtype");
  const BatchInputs in = read_batch_inputs(args, nullptr);
  args.finish();
  KATTN_REQUIRE(!in.paged, "kattn grad: ragged batches only (--kv-indptr), not paged caches");
  const std::vector<double> dout = ragged_dout(ragged_dout_source(do_file, seed, files, dtype_given, in), in);
  const std::vector<double> unread;  // the check reads no o or lse
  const AttentionParams<double> inputs = host_params(in, unread, unread);
  if (check.enabled) gradient_check_samples(inputs, check, false);
  const auto run_in = [&](auto storage) { return run<decltype(storage)>(in, dout, opt, bopt, timing); };
  const Grads g = in.dtype == io::DType::f64    ? run_in(double{})
                  : in.dtype == io::DType::bf16 ? run_in(bf16{})
                  : in.dtype == io::DType::f16  ? run_in(fp16{})
                                                : run_in(float{});
  std::FILE* text = console.text();
  const char* dtype = dtype_name(in.dtype);
  std::fprintf(text,
               "kattn grad: dtype=%s ragged batch of %lld sequences, %lld queries, %lld keys, Hq=%lld Hkv=%lld "
               "D=%lld%s\n",
               dtype, (long long)in.batch(), (long long)in.total_q(), (long long)in.kv_rows(), (long long)in.Hq,
               (long long)in.Hkv, (long long)in.D, mask_summary(opt).c_str());
  std::fprintf(text, "time: backward %.6f s", g.seconds);
  if (g.timing.repeat > 0)
    std::fprintf(text, " (median of %d calls after a warm-up; min %.6f s, max %.6f s)", g.timing.repeat, g.timing.min(),
                 g.timing.max());
  std::fprintf(text, "; forward %.6f s; dq strategy %s\n", g.forward_seconds, name(g.info.dq));
  Json j;
  j.add("algo", "flash").add("dtype", dtype).add("layout", "ragged").add("batch", (long long)in.batch());
  j.add("shape", std::vector<long long>{in.batch(), in.total_q(), in.kv_rows(), in.Hq, in.Hkv, in.D});
  j.add("shape_is", "B,total_q,total_kv,Hq,Hkv,D").add("causal", opt.causal);
  j.add("seconds", g.seconds).add("forward_seconds", g.forward_seconds).add("dq_strategy", name(g.info.dq));
  if (paths.dq) write_array(*paths.dq, in.dtype, {in.total_q(), in.Hq, in.D}, g.grads.dq);
  if (paths.dk) write_array(*paths.dk, in.dtype, {in.kv_rows(), in.Hkv, in.D}, g.grads.dk);
  if (paths.dv) write_array(*paths.dv, in.dtype, {in.kv_rows(), in.Hkv, in.D}, g.grads.dv);
  if (g.timing.repeat > 0)
    j.add("repeat", g.timing.repeat).add("seconds_min", g.timing.min()).add("seconds_max", g.timing.max());
  if (!g.grads.dsinks.empty()) j.add("dsinks", g.grads.dsinks);
  int status = 0;
  if (check.enabled) {
    status = check_gradients(
        host_gradients(inputs, dout, g.grads), opt, check, in.dtype, false,
        [&] { return ragged_textbook_backward(in, dout, opt); },
        text, j);
  }
  console.notice(j);
  console.finish(j);
  return status;
}

}  // namespace cli
}  // namespace kattn
