// kattn grad: the gradients of sum(O * dO) with respect to q, k, v by the tiled backward pass,
// timed (with the forward beside it when O and LSE are computed here), optionally checked
// against the float64 textbook backward and written to .npy files.
#include <Kokkos_Core.hpp>
#include <cstdio>
#include <memory>
#include <type_traits>
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
#include "kattn/score_bias.hpp"
#include "paths.hpp"
#include "run_block_sparse.hpp"
#include "run_check.hpp"
#include "run_pipeline.hpp"
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
    "                 of a bool bias) write their gradients in float64 (dense inputs; --dist ring: each rank its rows)\n"
    "  --cpu-products: as for kattn run; bf16's backward multiplies as bf16 pairs on bf16-dot, else\n"
    "                 widens (JSON: cpu_products, what the backward ran)\n"
    "  --layout bnhd|bhnd, --json, --quiet, --progress: as for kattn run (the forward's progress line, then\n"
    "                 the backward's)\n"
    "       mpirun -np P kattn grad --dist ring|ulysses|hybrid|grid [--ulysses-size U] [--grid R,C] [--zigzag]\n"
    "                 [--deterministic] [--chunk KEYS] ...\n"
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

// The flags of `grad` besides the inputs and the variant, with every output path checked.
struct GradFlags : PipelineFlags {
  std::optional<std::string> dq, dk, dv, dsinks, dbias;
  BackwardOptions bopt;
};

struct Gradients {
  GradientSet grads;  // dsinks with --sinks, dbias with --dbias
  double forward_seconds = 0;  // 0 when o and lse were given
  BackwardInfo info;
  Timing timing;  // of the backward: its median is the time reported
};

// One input kind of `grad` (dense, with a block mask or not; ragged); the stages are
// grad_pipeline's. Its flops are the forward's: the backward counts 2.5 times as many.
using GradKind = PipelineKind<Gradients>;

// The forward over q and `keys` into o and lse (unless `forward` is false: they hold the given
// ones), then the timed backward calls, each with its progress line; the gradients as float64
// copies, dbias when `dbias` is allocated (the bias's shape).
template <class Q, class Keys, class O, class Lse>
Gradients backward_calls(const GradFlags& f, double flops, Options opt, BackwardOptions bopt, const Q& q,
                         const Keys& keys, const O& o, const Lse& lse, const Q& dout, bool forward,
                         const Tensor4<double>& dbias) {
  const Kokkos::DefaultExecutionSpace space;
  Gradients out;
  if (forward) {
    PipelineFlags once = f;  // the forward: one call whatever --repeat says
    once.timing = Timing{};
    Options fwd = opt;
    space.fence();
    out.forward_seconds = timed_with_progress(once, flops, fwd, [&] {
      attention(space, q, keys, o, lse, fwd);
      space.fence();
    }).median();
  }
  using KV = std::remove_const_t<std::remove_reference_t<decltype(keys.k)>>;
  const Q dq(Kokkos::view_alloc(Kokkos::WithoutInitializing, "dq"), q.layout());
  const KV dk(Kokkos::view_alloc(Kokkos::WithoutInitializing, "dk"), keys.k.layout());
  const KV dv(Kokkos::view_alloc(Kokkos::WithoutInitializing, "dv"), keys.v.layout());
  poison(dq);
  poison(dk);
  poison(dv);
  if (dbias.data()) {
    poison(dbias);
    bopt.dbias = score_bias_gradient(dbias);
  }
  space.fence();
  // The backward's progress line: its passes in pieces (Options::progress).
  out.timing = timed_with_progress(f, 2.5 * flops, opt, [&] {
    out.info = attention_backward(space, q, keys, o, lse, dout, dq, dk, dv, opt, bopt);
    space.fence();
  });
  out.grads = {from_view(dq), from_view(dk), from_view(dv), out.info.dsinks, {}};
  if (dbias.data()) out.grads.dbias = from_view(dbias);
  return out;
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
Gradients dense_calls(const GradFlags& f, double flops, const DenseInputs& in, const StoredValues& dout_values,
                      const GivenForward& given, Options opt, const BlockMask* mask, const BiasTensor* dbias_of) {
  DenseViews<T> d = make_dense_views<T>(in);  // o and lse (float for 16-bit storage) from the forward, or given
  const auto dout = to_view<Tensor4<T>>(dout_values, "do", in.B, in.Nq, in.Hq, in.D);
  if (given.given) {
    d.o = to_view<Tensor4<T>>(given.o, "o", in.B, in.Nq, in.Hq, in.D);
    d.lse = to_view<Tensor3<accumulate_t<T>>>(given.lse, "lse", in.B, in.Hq, in.Nq);
  }
  const Tensor4<double> dbias = dbias_of ? dbias_of->gradient_view() : Tensor4<double>();
  opt.block_mask = mask;
  return backward_calls(f, flops, opt, f.bopt, d.q, kv::dense(d.k, d.v), d.o, d.lse, dout, !given.given, dbias);
}

template <class T>
Gradients ragged_calls(const GradFlags& f, double flops, const BatchInputs& in, const StoredValues& dout_values,
                       Options opt) {
  const BatchViews<T> b = make_batch_views<T>(in);  // o and lse (float for 16-bit storage) from the forward
  const auto dout = to_view<Tensor3<T>>(dout_values, "do", in.total_q(), in.Hq, in.D);
  opt.splits = 1;
  return backward_calls(f, flops, opt, f.bopt, b.q, kv::ragged(b.k, b.v, b.layout), b.o, b.lse, dout, true,
                        Tensor4<double>());
}

GradKind dense_grad_kind(Args& args, const GradFlags& f, const Options& opt, const BiasTensor& bias) {
  auto dout = std::make_shared<StoredValues>();  // in the run's type, as q, k and v
  const auto in = std::make_shared<const DenseInputs>(read_dense_inputs(args, "--do", dout.get(), nullptr));
  KATTN_REQUIRE(dout->size() == in->q.size(),
                "--do: give DO.npy (the gradient of the loss with respect to o) with --q/--k/--v, or use --random");
  KATTN_REQUIRE(!is_16bit(in->dtype) || !wants_block_sparse(args), "--dtype ", dtype_name(in->dtype),
                ": block-sparse gradients take f32 or f64 for now");
  const auto given = std::make_shared<const GivenForward>(read_given_forward(args, *in));
  const std::shared_ptr<const BlockMask> mask =
      wants_block_sparse(args) ? std::make_shared<const BlockMask>(read_block_mask(args, *in)) : nullptr;
  args.finish();
  const BlockMask* m = mask.get();
  if (f.check.enabled) gradient_check_samples(host_params(*in, {}, {}, false), f.check, m != nullptr);  // refused now
  GradKind kind;
  kind.dtype = in->dtype;
  kind.heading = printed("dtype=%s layout=%s%s%s", dtype_name(in->dtype), name(in->layout), dense_heading(*in).c_str(),
                         mask_summary(opt).c_str());
  if (m) kind.detail = block_mask_detail(*m);
  kind.flops = attention_flops(*in, opt, m);  // of the kept pairs under a block mask
  const BiasTensor* dbias_of = f.dbias ? &bias : nullptr;
  kind.call = [&f, opt, in, dout, given, mask, dbias_of, flops = kind.flops] {
    return with_storage(in->dtype, [&](auto t) {
      return dense_calls<decltype(t)>(f, flops, *in, *dout, *given, opt, mask.get(), dbias_of);
    });
  };
  kind.describe = [in, mask](Json& j) {
    j.add("shape", in->shape());
    if (mask) j.add("mask_block", (long long)mask->block()).add("mask_density", mask->density());
  };
  kind.write = [&f, in](const Gradients& g) {
    if (f.dq) write_dense(*f.dq, *in, in->Nq, in->Hq, g.grads.dq);
    if (f.dk) write_dense(*f.dk, *in, in->Nk, in->Hkv, g.grads.dk);
    if (f.dv) write_dense(*f.dv, *in, in->Nk, in->Hkv, g.grads.dv);
  };
  kind.check = [&f, opt, &bias, in, dout, mask, dbias_of](const Gradients& g, Json& j) {
    const Options host = bias.on_host(opt);
    return check_gradients(
        host_gradients(host_params(*in, {}, {}), *dout, g.grads), host, f.check, in->dtype, mask != nullptr,
        [&] { return dense_textbook_backward(*in, *dout, mask ? host : opt, mask.get(), dbias_of); },
        f.console.text(), j);
  };
  return kind;
}

GradKind ragged_grad_kind(Args& args, const GradFlags& f, const Options& opt) {
  const auto do_file = args.value("--do");
  const auto seed = args.peek("--seed");
  const bool files = args.has("--q");
  const bool dtype_given = args.has("--dtype");
  const auto in = std::make_shared<const BatchInputs>(read_batch_inputs(args, nullptr));
  args.finish();
  KATTN_REQUIRE(!in->paged, "kattn grad: ragged batches only (--kv-indptr), not paged caches");
  const auto dout = std::make_shared<const StoredValues>(
      in->dtype, ragged_dout(ragged_dout_source(do_file, seed, files, dtype_given, *in), *in));
  if (f.check.enabled) gradient_check_samples(host_params(*in, {}, {}, false), f.check, false);
  GradKind kind;
  kind.dtype = in->dtype;
  kind.heading = printed("dtype=%s%s%s", dtype_name(in->dtype), ragged_heading(*in).c_str(), mask_summary(opt).c_str());
  kind.flops = batch_attention_flops(*in, opt);
  kind.call = [&f, opt, in, dout, flops = kind.flops] {
    return with_storage(in->dtype, [&](auto t) { return ragged_calls<decltype(t)>(f, flops, *in, *dout, opt); });
  };
  kind.describe = [in](Json& j) { describe_ragged(j, *in); };
  kind.write = [&f, in](const Gradients& g) {
    if (f.dq) write_array(*f.dq, in->dtype, in->q_shape(), g.grads.dq);
    if (f.dk) write_array(*f.dk, in->dtype, in->kv_shape(), g.grads.dk);
    if (f.dv) write_array(*f.dv, in->dtype, in->kv_shape(), g.grads.dv);
  };
  kind.check = [&f, opt, in, dout](const Gradients& g, Json& j) {
    return check_gradients(  // the check reads no o or lse
        host_gradients(host_params(*in, {}, {}), *dout, g.grads), opt, f.check, in->dtype, false,
        [&] { return ragged_textbook_backward(*in, *dout, opt); }, f.console.text(), j);
  };
  return kind;
}

// The stages after the inputs: the calls, the lines and the JSON, the files, --check.
int grad_pipeline(const GradFlags& f, const Options& opt, const BiasTensor& bias, const GradKind& kind) {
  const Gradients g = kind.call();
  const double seconds = g.timing.median();
  // FlashAttention-2's backward count (of the kept pairs under a block mask)
  const double flops = 2.5 * kind.flops;
  const double gflops = seconds > 0 ? flops / seconds / 1e9 : 0.0;
  const char* dtype = dtype_name(kind.dtype);
  std::FILE* text = f.console.text();
  std::fprintf(text, "kattn grad: %s\n%s", kind.heading.c_str(), kind.detail.c_str());
  std::fprintf(text, "dq strategy: %s (%s)", name(g.info.dq),
               g.info.deterministic ? "deterministic" : "not deterministic");
  if (g.info.dq == DqStrategy::key_chunks) std::fprintf(text, ", %d key chunks", g.info.chunks);
  std::fprintf(text, ", tiles %d x %d, workspace %.1f MB\n", g.info.block_q, g.info.block_k,
               double(g.info.workspace_bytes) / 1e6);
  std::fprintf(text, "time: backward %.6f s", seconds);
  print_repeat(text, g.timing);
  std::fprintf(text, ", %.2f GFLOP/s (2.5x the forward's flop count)", gflops);
  if (g.forward_seconds > 0)
    std::fprintf(text, "; forward %.6f s, backward/forward %.2f", g.forward_seconds, seconds / g.forward_seconds);
  std::fprintf(text, "\n");

  Json j;
  j.add("algo", "flash").add("dtype", dtype);
  kind.describe(j);
  j.add("causal", opt.causal);
  j.add("seconds", seconds).add("gflops", gflops).add("threads", host_threads());
  add_repeat(j, g.timing);
  if (g.forward_seconds > 0) j.add("forward_seconds", g.forward_seconds).add("ratio", seconds / g.forward_seconds);
  j.add("dq_strategy", name(g.info.dq)).add("deterministic", g.info.deterministic);
  if (g.info.dq == DqStrategy::key_chunks) j.add("chunks", g.info.chunks);
  j.add("workspace_bytes", static_cast<long long>(g.info.workspace_bytes));
  if (Kokkos::SpaceAccessibility<Kokkos::DefaultExecutionSpace, Kokkos::HostSpace>::accessible)
    j.add("cpu_products", cpu_products_name(g.info.cpu_products));
  if (!g.grads.dsinks.empty()) {
    j.add("dsinks", g.grads.dsinks);
    if (f.dsinks) write_array(*f.dsinks, io::DType::f64, {static_cast<std::int64_t>(g.grads.dsinks.size())}, g.grads.dsinks);
  }
  if (f.dbias) write_array(*f.dbias, io::DType::f64, bias.shape(), g.grads.dbias);
  return write_and_check(f, kind, g, j);
}

}  // namespace

int cmd_grad(Args& args) {
  if (args.help(kGradUsage)) return 0;
  if (auto mode = args.value("--dist")) return grad_distributed(args, *mode);
  refuse_out_of_mode(args, {{"--zigzag", "--dist ring, ulysses or hybrid"},
                            {"--chunk", "--dist ring, ulysses or hybrid"},
                            {"--ulysses-size", "--dist hybrid"}});
  GradFlags f;
  f.dq = args.value("--dq"), f.dk = args.value("--dk"), f.dv = args.value("--dv");
  f.dsinks = args.value("--dsinks");
  f.dbias = args.value("--dbias");
  for (const auto& [flag, path] : {std::pair{"--dq", f.dq}, std::pair{"--dk", f.dk},
                                   std::pair{"--dv", f.dv}, std::pair{"--dsinks", f.dsinks},
                                   std::pair{"--dbias", f.dbias}})
    if (path) check_output_file(flag, *path);
  KATTN_REQUIRE(!f.dsinks || args.has("--sinks"), "--dsinks: the gradient of the sinks given with --sinks");
  KATTN_REQUIRE(!f.dbias || args.has("--bias"), "--dbias: the gradient of the bias given with --bias");
  read_pipeline_flags(args, f);
  f.bopt.deterministic = args.flag("--deterministic");
  if (auto s = args.value("--dq-strategy")) f.bopt.dq = parse_dq_strategy(*s);
  f.bopt.dq_chunks = static_cast<int>(args.integer("--dq-chunks", 1, 1 << 20).value_or(0));
  BiasTensor bias;
  const Options opt = read_options(args, &bias);
  KATTN_REQUIRE(!f.dbias || !bias.boolean(), "--dbias: a bool --bias (a mask) has no gradient");
  KATTN_REQUIRE(opt.splits == 0, "--splits: not used by grad (see --dq-strategy and --dq-chunks)");
  KATTN_REQUIRE(!f.dsinks || !wants_batch_inputs(args), "--dsinks: dense inputs only for now (not ragged or paged batches)");
  return grad_pipeline(f, opt, bias,
                       wants_batch_inputs(args) ? ragged_grad_kind(args, f, opt) : dense_grad_kind(args, f, opt, bias));
}

}  // namespace cli
}  // namespace kattn
