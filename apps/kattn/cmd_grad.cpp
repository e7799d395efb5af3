// kattn grad: the gradients of sum(O * dO) with respect to q, k, v by the tiled backward pass,
// timed (with the forward beside it when O and LSE are computed here), optionally checked
// against the float64 textbook backward and written to .npy files.
#include <Kokkos_Core.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "args.hpp"
#include "batch_inputs.hpp"
#include "bias_tensor.hpp"
#include "commands.hpp"
#include "console.hpp"
#include "dist_commands.hpp"
#include "grad_check.hpp"
#include "grad_ragged.hpp"
#include "inputs.hpp"
#include "json.hpp"
#include "kattn/attention.hpp"
#include "kattn/errors.hpp"
#include "kattn/reference_backward.hpp"
#include "kattn/reference_masked.hpp"
#include "kattn/score_bias.hpp"
#include "paths.hpp"
#include "progress_line.hpp"
#include "run_block_sparse.hpp"
#include "run_check.hpp"
#include "timing.hpp"

namespace kattn {
namespace cli {
namespace {

const char* kGradUsage =
    "usage: kattn grad (--q Q.npy --k K.npy --v V.npy --do DO.npy | --random B,NQ,NK,HQ,HKV,D [--seed N])\n"
    "                  [--o O.npy --lse LSE.npy] [--block-q N] [--block-k N]\n"
    "                  [--causal] [--window LEFT,RIGHT] [--softcap C] [--scale S] [--dtype f32|f64|bf16|f16]\n"
    "                  [--sinks SINKS.npy|random [--dsinks DSINKS.npy]] [--alibi-slopes SLOPES.npy|random|standard]\n"
    "                  [--bias BIAS.npy|random [--dbias DBIAS.npy]]\n"
    "                  [--dq DQ.npy] [--dk DK.npy] [--dv DV.npy] [--deterministic]\n"
    "                  [--dq-strategy auto|key-chunks|query-pass|atomic] [--dq-chunks N]\n"
    "                  [--check] [--check-rows N] [--repeat N [--no-workspace]] [--json]\n"
    "                  [--block-mask MASK.npy --mask-block B | --pattern P [--mask-block B]]  (block-sparse)\n"
    "  ragged batch:  as for kattn run (--random-ragged HQ,HKV,D --q-lens .. --kv-lens .., or --q/--k/--v\n"
    "                 [total, H, D] with --q-indptr and --kv-indptr, and --do [total_q, Hq, D])\n"
    "  --sinks, --alibi-slopes, --bias: as for kattn run; --dsinks [Hq] and --dbias (the bias's shape, not\n"
    "                 of a bool bias) write their gradients in float64 (dense inputs)\n"
    "  --cpu-products: as for kattn run, for the forward pass (the backward widens 16-bit inputs)\n"
    "  --layout bnhd|bhnd, --json, --quiet, --progress: as for kattn run (the forward's progress line, then\n"
    "                 the backward's)\n"
    "       mpirun -np P kattn grad --dist ring|ulysses|hybrid [--ulysses-size U] [--zigzag] [--deterministic]\n"
    "                 [--chunk KEYS] ...\n"
    "Gradients of sum(O * dO) with respect to q, k, v. O and LSE are computed by the forward pass\n"
    "when not given. --check compares dq, dk, dv (and dsinks with --sinks, dbias with --dbias: not in a sampled\n"
    "check, nor dbias under a block mask) with the textbook backward in float64 and exits with status 3\n"
    "when the relative error exceeds 1e-4 (f32) / 1e-10 (f64) / 2^-7 (bf16) / 2^-10 (f16; 16-bit: dense\n"
    "or ragged inputs, gradients in the type, lse float32, files as for kattn run): every gradient when the\n"
    "textbook's two [B, Hq, Nq, Nk] arrays fit in 1 GiB, else (or with --check-rows N) N query rows of dq and N key\n"
    "rows of dk and dv (default 64: the first and last, every masked edge, the rest at random), each\n"
    "exact in float64; a key row needs a float64 pass over the queries that see it.\n"
    "--repeat N: one warm-up backward call, then N timed ones (median, min, max), sharing one\n"
    "kattn::Workspace (--no-workspace: each allocates its own scratch).\n";

struct Gradients {
  GradientSet grads;  // dsinks with --sinks, dbias with --dbias
  double seconds = 0;
  double forward_seconds = 0;  // 0 when o and lse were given
  BackwardInfo info;
  Timing timing;  // of the backward: seconds is its median
};

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// o and lse given as files (read and shape-checked), or none.
struct GivenForward {
  std::vector<double> o, lse;
  bool given = false;
};

GivenForward read_given_forward(Args& args, const DenseInputs& in) {
  GivenForward g;
  const auto of = args.value("--o"), lf = args.value("--lse");
  KATTN_REQUIRE(bool(of) == bool(lf), of ? "--lse" : "--o", ": give --o and --lse together (or neither: the forward ",
                "pass computes them)");
  if (!of) return g;
  const io::NpyArray o = read_input("--o", *of), lse = read_input("--lse", *lf);
  require_input_dtype("--o", *of, o.dtype);
  require_bf16_bits_asked("--o", *of, o.dtype, in.dtype, in.dtype == io::DType::bf16);
  KATTN_REQUIRE(lse.is_floating(), "--lse ", *lf, ": expected float32 or float64 data, got ", io::name(lse.dtype));
  const std::vector<std::int64_t> o_shape = file_shape(in.layout, in.B, in.Nq, in.Hq, in.D),
                                  lse_shape = {in.B, in.Hq, in.Nq};
  KATTN_REQUIRE(o.shape == o_shape, "--o ", *of, ": expected shape ", shape_text(o_shape, "()"), " (from q, ", name(in.layout),
                "), got ", shape_text(o.shape, "()"));
  KATTN_REQUIRE(lse.shape == lse_shape, "--lse ", *lf, ": expected shape ", shape_text(lse_shape, "()"),
                " [B, Hq, Nq] (from q), got ", shape_text(lse.shape, "()"));
  g.o = to_bnhd(in.layout, o.shape, o.values<double>());
  g.lse = lse.values<double>();
  round_to(in.dtype, g.o);
  round_to(lse_dtype(in.dtype), g.lse);  // lse: float for 16-bit runs
  g.given = true;
  return g;
}

template <class T>
Gradients run_backward(const DenseInputs& in, const std::vector<double>& dout_values, const GivenForward& given,
                       const Options& opt, BackwardOptions bopt, const BlockMask* mask, const Timing& timing,
                       const Console& console, double forward_flops, const BiasTensor* dbias_of) {
  const auto q = to_view<Tensor4<T>>(in.q, "q", in.B, in.Nq, in.Hq, in.D);
  const auto k = to_view<Tensor4<T>>(in.k, "k", in.B, in.Nk, in.Hkv, in.D);
  const auto v = to_view<Tensor4<T>>(in.v, "v", in.B, in.Nk, in.Hkv, in.D);
  const auto dout = to_view<Tensor4<T>>(dout_values, "do", in.B, in.Nq, in.Hq, in.D);
  Tensor4<T> o;
  Tensor3<accumulate_t<T>> lse;  // float for 16-bit storage
  const Kokkos::DefaultExecutionSpace space;
  Options masked = opt;
  masked.block_mask = mask;
  Gradients out;
  out.timing = timing;
  if (given.given) {
    o = to_view<Tensor4<T>>(given.o, "o", in.B, in.Nq, in.Hq, in.D);
    lse = to_view<Tensor3<accumulate_t<T>>>(given.lse, "lse", in.B, in.Hq, in.Nq);
  } else {
    o = Tensor4<T>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "o"), in.B, in.Nq, in.Hq, in.D);
    lse = Tensor3<accumulate_t<T>>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "lse"), in.B, in.Hq, in.Nq);
    std::optional<ProgressLine> line;
    Options fwd = masked;
    if (progress_wanted(console.progress, console.quiet, forward_flops)) {
      line.emplace(forward_flops, console.progress);
      fwd.progress = line->callback();
    }
    space.fence();
    const auto t0 = std::chrono::steady_clock::now();
    attention(space, q, kv::dense(k, v), o, lse, fwd);
    space.fence();
    out.forward_seconds = since(t0);
  }
  // The backward's progress line: its passes in pieces (Options::progress).
  std::optional<ProgressLine> line;
  const double backward_flops = 2.5 * forward_flops;
  if (progress_wanted(console.progress, console.quiet, backward_flops)) {
    line.emplace(backward_flops, console.progress);
    masked.progress = line->callback();
  }
  Tensor4<T> dq(Kokkos::view_alloc(Kokkos::WithoutInitializing, "dq"), in.B, in.Nq, in.Hq, in.D);
  Tensor4<T> dk(Kokkos::view_alloc(Kokkos::WithoutInitializing, "dk"), in.B, in.Nk, in.Hkv, in.D);
  Tensor4<T> dv(Kokkos::view_alloc(Kokkos::WithoutInitializing, "dv"), in.B, in.Nk, in.Hkv, in.D);
  poison(dq);
  poison(dk);
  poison(dv);
  Tensor4<double> dbias;  // the bias's shape, in float64 whatever the bias's type
  if (dbias_of) {
    const std::vector<std::int64_t> s = dbias_of->shape();
    dbias = Tensor4<double>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "dbias"), s[0], s[1], s[2], s[3]);
    poison(dbias);
    bopt.dbias = score_bias_gradient(dbias);
  }
  space.fence();
  const RepeatWorkspace kept(timing, masked);
  time_calls(
      out.timing,
      [&] {
        out.info = attention_backward(space, q, kv::dense(k, v), o, lse, dout, dq, dk, dv, masked, bopt);
        space.fence();
      },
      [&] {
        if (line) line->restart();
      });
  if (line) line->finish();
  out.seconds = out.timing.median();
  out.grads = {from_view(dq), from_view(dk), from_view(dv), out.info.dsinks, {}};
  if (dbias_of) out.grads.dbias = from_view(dbias);
  return out;
}

DqStrategy parse_strategy(const std::string& s) {
  if (s == "auto") return DqStrategy::automatic;
  if (s == "key-chunks") return DqStrategy::key_chunks;
  if (s == "query-pass") return DqStrategy::query_pass;
  if (s == "atomic") return DqStrategy::atomic;
  KATTN_REQUIRE(false, "--dq-strategy: expected auto, key-chunks, query-pass or atomic, got '", s, "'");
  return DqStrategy::automatic;
}

}  // namespace

int cmd_grad(Args& args) {
  if (args.help(kGradUsage)) return 0;
  // --dist refuses bf16/f16 in rank 0's read_dense_inputs, so under mpirun the line is printed once.
  if (auto mode = args.value("--dist")) return grad_distributed(args, *mode);
  refuse_out_of_mode(args, {{"--zigzag", "--dist ring, ulysses or hybrid"},
                            {"--chunk", "--dist ring, ulysses or hybrid"},
                            {"--ulysses-size", "--dist hybrid"}});
  const auto dq_path = args.value("--dq"), dk_path = args.value("--dk"), dv_path = args.value("--dv");
  if (dq_path) check_output_file("--dq", *dq_path);
  if (dk_path) check_output_file("--dk", *dk_path);
  if (dv_path) check_output_file("--dv", *dv_path);
  const auto dsinks_path = args.value("--dsinks");
  if (dsinks_path) check_output_file("--dsinks", *dsinks_path);
  KATTN_REQUIRE(!dsinks_path || args.has("--sinks"), "--dsinks: the gradient of the sinks given with --sinks");
  const auto dbias_path = args.value("--dbias");
  if (dbias_path) check_output_file("--dbias", *dbias_path);
  KATTN_REQUIRE(!dbias_path || args.has("--bias"), "--dbias: the gradient of the bias given with --bias");
  const CheckSettings check = read_check_settings(args);
  const Timing timing = read_timing(args);
  const Console console = read_console(args);
  std::FILE* text = console.text();
  BackwardOptions bopt;
  bopt.deterministic = args.flag("--deterministic");
  if (auto s = args.value("--dq-strategy")) bopt.dq = parse_strategy(*s);
  bopt.dq_chunks = static_cast<int>(args.integer("--dq-chunks", 1, 1 << 20).value_or(0));
  BiasTensor bias;
  const Options opt = read_options(args, &bias);
  KATTN_REQUIRE(!dbias_path || !bias.boolean(), "--dbias: a bool --bias (a mask) has no gradient");
  KATTN_REQUIRE(opt.splits == 0, "--splits: not used by grad (see --dq-strategy and --dq-chunks)");
  KATTN_REQUIRE(!dsinks_path || !wants_batch_inputs(args), "--dsinks: dense inputs only for now (not ragged or paged batches)");
  if (wants_batch_inputs(args))
    return grad_ragged(args, opt, bopt, check, timing, console, {dq_path, dk_path, dv_path});
  std::vector<double> dout;
  const DenseInputs in = read_dense_inputs(args, "--do", &dout, nullptr);
  KATTN_REQUIRE(dout.size() == in.q.size(),
                "--do: give DO.npy (the gradient of the loss with respect to o) with --q/--k/--v, or use --random");
  KATTN_REQUIRE(!is_16bit(in.dtype) || !wants_block_sparse(args), "--dtype ", dtype_name(in.dtype),
                ": block-sparse gradients take f32 or f64 for now");
  const GivenForward given = read_given_forward(args, in);
  const std::optional<BlockMask> mask =
      wants_block_sparse(args) ? std::optional<BlockMask>(read_block_mask(args, in)) : std::nullopt;
  args.finish();

  const BlockMask* m = mask ? &*mask : nullptr;
  const std::vector<double> unread;  // the check reads no o or lse
  const AttentionParams<double> inputs = host_params(in, unread, unread);
  if (check.enabled) gradient_check_samples(inputs, check, m != nullptr);  // refused before the work
  const double forward_flops = attention_flops(in, opt, m);
  const auto run = [&](auto storage) {
    return run_backward<decltype(storage)>(in, dout, given, opt, bopt, m, timing, console, forward_flops,
                                           dbias_path ? &bias : nullptr);
  };
  const Gradients g = in.dtype == io::DType::f64    ? run(double{})
                      : in.dtype == io::DType::bf16 ? run(bf16{})
                      : in.dtype == io::DType::f16  ? run(fp16{})
                                                    : run(float{});
  // FlashAttention-2's backward count (of the kept pairs under a block mask)
  const double flops = 2.5 * forward_flops;
  const double gflops = g.seconds > 0 ? flops / g.seconds / 1e9 : 0.0;
  const char* dtype = dtype_name(in.dtype);
  std::fprintf(text, "kattn grad: dtype=%s layout=%s B=%lld Nq=%lld Nk=%lld Hq=%lld Hkv=%lld D=%lld%s\n", dtype,
               name(in.layout), (long long)in.B, (long long)in.Nq, (long long)in.Nk, (long long)in.Hq,
               (long long)in.Hkv, (long long)in.D, mask_summary(opt).c_str());
  if (m)
    std::fprintf(text, "block mask: %lld x %lld blocks of %lld, %s, %.2f%% kept\n", (long long)m->q_blocks(),
                 (long long)m->k_blocks(), (long long)m->block(), m->heads() == 1 ? "shared" : "per head",
                 100.0 * m->density());
  std::fprintf(text, "dq strategy: %s (%s)", name(g.info.dq),
               g.info.deterministic ? "deterministic" : "not deterministic");
  if (g.info.dq == DqStrategy::key_chunks) std::fprintf(text, ", %d key chunks", g.info.chunks);
  std::fprintf(text, ", tiles %d x %d, workspace %.1f MB\n", g.info.block_q, g.info.block_k,
               double(g.info.workspace_bytes) / 1e6);
  std::fprintf(text, "time: backward %.6f s, %.2f GFLOP/s (2.5x the forward's flop count)", g.seconds, gflops);
  if (g.timing.repeat > 0)
    std::fprintf(text, " (median of %d calls after a warm-up; min %.6f s, max %.6f s)", g.timing.repeat, g.timing.min(),
                 g.timing.max());
  if (g.forward_seconds > 0)
    std::fprintf(text, "; forward %.6f s, backward/forward %.2f", g.forward_seconds, g.seconds / g.forward_seconds);
  std::fprintf(text, "\n");

  Json j;
  j.add("algo", "flash").add("dtype", dtype).add("shape", in.shape()).add("causal", opt.causal);
  if (m) j.add("mask_block", (long long)m->block()).add("mask_density", m->density());
  j.add("seconds", g.seconds).add("gflops", gflops).add("threads", host_threads());
  if (g.timing.repeat > 0)
    j.add("repeat", g.timing.repeat).add("seconds_min", g.timing.min()).add("seconds_max", g.timing.max());
  if (g.forward_seconds > 0) j.add("forward_seconds", g.forward_seconds).add("ratio", g.seconds / g.forward_seconds);
  j.add("dq_strategy", name(g.info.dq)).add("deterministic", g.info.deterministic);
  if (g.info.dq == DqStrategy::key_chunks) j.add("chunks", g.info.chunks);
  j.add("workspace_bytes", static_cast<long long>(g.info.workspace_bytes));
  if (dq_path) write_dense(*dq_path, in, in.Nq, in.Hq, g.grads.dq);
  if (dk_path) write_dense(*dk_path, in, in.Nk, in.Hkv, g.grads.dk);
  if (dv_path) write_dense(*dv_path, in, in.Nk, in.Hkv, g.grads.dv);
  if (!g.info.dsinks.empty()) {
    j.add("dsinks", g.info.dsinks);
    if (dsinks_path) write_array(*dsinks_path, io::DType::f64, {in.Hq}, g.info.dsinks);
  }
  if (dbias_path) write_array(*dbias_path, io::DType::f64, bias.shape(), g.grads.dbias);
  int status = 0;
  if (check.enabled) {
    status = check_gradients(
        host_gradients(inputs, dout, g.grads), bias.on_host(opt), check, in.dtype, m != nullptr,
        [&] { return dense_textbook_backward(in, dout, m ? bias.on_host(opt) : opt, m, dbias_path ? &bias : nullptr); },
        text, j);
  }
  console.notice(j);
  console.finish(j);
  return status;
}

}  // namespace cli
}  // namespace kattn
