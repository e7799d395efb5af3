// kattn run: one attention computation, timed, optionally checked against the float64 textbook
// reference and written to .npy files. Dense inputs, ragged batches and paged KV caches.
#include <Kokkos_Core.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "args.hpp"
#include "batch_inputs.hpp"
#include "bias_tensor.hpp"
#include "commands.hpp"
#include "dist_commands.hpp"
#include "inputs.hpp"
#include "console.hpp"
#include "json.hpp"
#include "paths.hpp"
#include "progress_line.hpp"
#include "run_check.hpp"
#include "run_pipeline.hpp"
#include "timing.hpp"
#include "run_block_sparse.hpp"
#include "run_cascade.hpp"
#include "kattn/attention.hpp"
#include "kattn/errors.hpp"
#include "kattn/reference.hpp"

namespace kattn {
namespace cli {
namespace {

const char* kRunUsage =
    "usage: kattn run (--q Q.npy --k K.npy --v V.npy | --random B,NQ,NK,HQ,HKV,D [--seed N])\n"
    "                 [--algo naive|flash|splitkv] [--splits N] [--split-chunk N] [--block-q N] [--block-k N]\n"
    "                 [--causal] [--window LEFT,RIGHT] [--softcap C] [--scale S] [--sinks SINKS.npy|random]\n"
    "                 [--alibi-slopes SLOPES.npy|random|standard] [--bias BIAS.npy|random] [--layout bnhd|bhnd]\n"
    "                 [--dtype f32|f64|bf16|f16] [--out O.npy] [--lse LSE.npy] [--save-inputs DIR]\n"
    "                 [--check] [--check-rows N] [--repeat N [--no-workspace]] [--json] [--quiet] [--progress]\n"
    "                 [--cpu-products auto|widened|bf16-dot|amx]\n"
    "  --layout        dense q, k, v, o files as bnhd [B, N, H, D] (the default) or bhnd [B, H, N, D]\n"
    "                  (PyTorch's); lse is [B, H, N] in both\n"
    "  --sinks, --alibi-slopes: a 1-D float array of one value per query head. --bias: added to the\n"
    "                  scores, [B or 1, Hq or 1, Nq, Nk] whatever --layout says; float32/64, float16, bf16\n"
    "                  bits or bool (false masks the key); dense inputs, and --dist ring (each rank its rows)\n"
    "  random, standard: in place of a file, for --random/--random-ragged inputs, drawn from --seed:\n"
    "                  --sinks random (unit normal), --alibi-slopes random (uniform in [1/256, 1/2]) or\n"
    "                  standard (the paper's geometric slopes), --bias random (float32 unit normal)\n"
    "  --check         compare with the float64 textbook algorithm on the same rounded inputs: every row\n"
    "                  when its score matrix fits in 1 GiB, else a sample of rows each computed exactly\n"
    "                  (first and last, every masked edge, 64 in all); exit status 3 when it fails,\n"
    "                  also for non-finite outputs where the reference is finite. Outputs are written first.\n"
    "  --check-rows N  check a sample of about N rows (implies --check)\n"
    "  --dtype         storage of q, k, v, o (default: the files', f32 for random inputs); bf16 and f16\n"
    "                  compute in float and write lse in float32. --check's bound: o's relative error 1e-4\n"
    "                  (f32), 1e-10 (f64), 2^-7 (bf16), 2^-10 (f16): twice the rounding of o to the type.\n"
    "                  bf16 and f16 run flash or splitkv (dense, ragged, paged, cascade, --dist) and grad\n"
    "                  (dense, ragged, --dist), not block-sparse yet\n"
    "  --cpu-products  bf16 on a CPU: auto (the default: AMX tiles where the CPU has AMX-BF16, else bf16\n"
    "                  dot products on AMD CPUs with AVX512_BF16, P rounded to bf16 for P V; else widened),\n"
    "                  widened (exact float products), bf16-dot (emulated where the CPU lacks the\n"
    "                  instruction), amx (the tiles' layouts on bf16-dot where the CPU lacks AMX); the\n"
    "                  JSON's cpu_products says what ran, --version why AMX is not used (docs/storage.md)\n"
    "  16-bit files:   f16 as float16 (<f2), read and written as is; bf16 as uint16 (<u2) holding the bf16\n"
    "                  bit patterns (NumPy has no bfloat16), read only with --dtype bf16; float32/float64\n"
    "                  files are rounded on load. --out is written in the run's type, --lse in float32.\n"
    "                  NumPy:   x = (bits.astype(np.uint32) << 16).view(np.float32)    (bf16 bits to float32;\n"
    "                           for bits, save float32 and pass --dtype bf16: rounded to nearest even on load)\n"
    "                  PyTorch: t = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16)\n"
    "                           bits = t.view(torch.int16).numpy().view(np.uint16)\n"
    "  --repeat N      one warm-up call, then N timed calls: the median, with min and max; the\n"
    "                  calls share one kattn::Workspace (--no-workspace: each allocates its own)\n"
    "  --json          standard output holds one JSON document; all other text goes to standard error\n"
    "  --quiet         no progress line, no notices;  --progress: a progress line even when standard\n"
    "                  error is not a terminal (by default it shows on a terminal past 2 s)\n"
    "  output paths (--out, --lse, --save-inputs DIR, created if missing) are checked before any work\n"
    "  ragged batch:  --q Q.npy [total_q,Hq,D] --k K.npy --v V.npy [total_kv,Hkv,D] --q-indptr QI.npy --kv-indptr "
    "KI.npy\n"
    "  paged cache:   --k K.npy --v V.npy [pages,page_size,Hkv,D] --kv-page-indptr P.npy --kv-page-indices I.npy\n"
    "                 --kv-last-page-len L.npy, with --q [total_q,Hq,D] --q-indptr QI.npy (or --q [B,Nq,Hq,D])\n"
    "  random:        --random-ragged HQ,HKV,D --q-lens L,.. --kv-lens L,.. [--page-size P [--shuffle-pages]]\n"
    "                 --random B,NQ,NK,HQ,HKV,D --page-size P [--shuffle-pages]\n"
    "  ragged and paged outputs: o [total_q,Hq,D], lse [total_q,Hq]\n"
    "  block-sparse:  --block-mask MASK.npy --mask-block B (bool/uint8 [Nq/B,Nk/B] or [Hq,Nq/B,Nk/B]) or\n"
    "                 --pattern local:W,global:G,strided:S,dilated:W:D [--mask-block B (default 64)];\n"
    "                 dense inputs; --check uses the block mask expanded to an element mask\n"
    "  cascade:       --cascade with a ragged batch of suffixes and a shared prefix: --k-prefix KP.npy\n"
    "                 --v-prefix VP.npy [Np,Hkv,D] (with files), or --random-prefix NP (with --random-ragged);\n"
    "                 bf16/f16: the prefix in the run's type, o rounded once after the merge\n"
    "  --save-inputs DIR writes the inputs (random ones too) as DIR/q.npy, k.npy, v.npy and the index\n"
    "  arrays (q_indptr.npy, kv_indptr.npy or kv_page_indptr.npy, kv_page_indices.npy, kv_last_page_len.npy)\n"
    "       mpirun -np P kattn run --dist ring|ulysses|hybrid|grid|decode [--ulysses-size U] [--grid R,C]\n"
    "                 [--zigzag]\n"
    "                 [--deterministic] [--chunk KEYS] ...\n"
    "                 (ring: the sequence sharded over the ranks, K/V passed round; ulysses: the sequence\n"
    "                 sharded, an all-to-all gives each rank Hq/P heads of the whole sequence (Hq a\n"
    "                 multiple of P); hybrid: ulysses inside groups of U ranks, the ring across the P/U\n"
    "                 groups; grid: the ranks an R x C grid (R*C = P; default the most square), queries\n"
    "                 gathered along a column, K/V along a row, the results merged along the column;\n"
    "                 decode: the KV cache sharded, the queries replicated; rank 0 reads,\n"
    "                 scatters, gathers and writes); --dist ring also takes a ragged batch, every sequence\n"
    "                 sharded (its length a multiple of P, of 2P with --zigzag)\n";

// Queries per sequence up to which a run is decode-like (memory-bound: reading K and V is the
// cost), so the K+V read rate means something.
constexpr std::int64_t kDecodeQueries = 16;

RunFlags read_run_flags(Args& args) {
  RunFlags f;
  f.algo = args.value("--algo").value_or("flash");
  f.out = args.value("--out");
  f.lse = args.value("--lse");
  f.save_dir = args.value("--save-inputs");
  read_pipeline_flags(args, f);
  KATTN_REQUIRE(f.algo == "naive" || f.algo == "flash" || f.algo == "splitkv",
                "--algo: expected naive, flash or splitkv, got '", f.algo, "'");
  if (f.save_dir) make_output_dir("--save-inputs", *f.save_dir);  // first: --out may name a file in it
  if (f.out) check_output_file("--out", *f.out);
  if (f.lse) check_output_file("--lse", *f.lse);
  return f;
}

// --algo naive: the textbook algorithm over dense keys, and over ragged or paged ones.
template <class Q, class K, class V, class O, class Lse>
void textbook(const Q& q, const kv::Dense<K, V>& keys, const O& o, const Lse& lse, const Options& opt) {
  reference(Kokkos::DefaultExecutionSpace(), q, keys.k, keys.v, o, lse, opt);
}
template <class Q, class Keys, class O, class Lse>
void textbook(const Q& q, const Keys& keys, const O& o, const Lse& lse, const Options& opt) {
  reference(Kokkos::DefaultExecutionSpace(), q, keys.k, keys.v, o, lse, keys.layout, opt);
}

// The timed calls of `algo` over q and `keys` (a kv kind) into o and lse (filled with NaN):
// kattn::attention, or for naive the textbook (float or double only; cmd_run refuses naive for
// 16-bit storage).
template <class Q, class Keys, class O, class Lse>
Outputs call_attention(const RunFlags& f, double flops, Options opt, const Q& q, const Keys& keys, const O& o,
                       const Lse& lse) {
  const Kokkos::DefaultExecutionSpace space;
  if (f.algo == "flash") opt.splits = 1;
  space.fence();
  Outputs out;
  out.timing = timed_with_progress(f, flops, opt, [&] {
    if (f.algo != "naive")
      out.plan = attention(space, q, keys, o, lse, opt);
    else if constexpr (!is_16bit_v<typename O::non_const_value_type>)
      textbook(q, keys, o, lse, opt);
    space.fence();
  });
  out.o = from_view(o);
  out.lse = from_view(lse);
  return out;
}

template <class T>
Outputs call_dense(const RunFlags& f, double flops, const Options& opt, const DenseInputs& in) {
  const DenseViews<T> views = make_dense_views<T>(in);
  return call_attention(f, flops, opt, views.q, kv::dense(views.k, views.v), views.o, views.lse);
}

template <class T>
Outputs call_batch(const RunFlags& f, double flops, const Options& opt, const BatchInputs& in) {
  const BatchViews<T> b = make_batch_views<T>(in);
  if (!in.paged) return call_attention(f, flops, opt, b.q, kv::ragged(b.k, b.v, b.layout), b.o, b.lse);
  const auto k = to_view<Tensor4<T>>(in.k, "k", in.num_pages, in.page_size, in.Hkv, in.D);
  const auto v = to_view<Tensor4<T>>(in.v, "v", in.num_pages, in.page_size, in.Hkv, in.D);
  const auto layout = make_paged_layout(index_view(in.q_indptr, "q_indptr"),
                                        index_view(in.page_indptr, "kv_page_indptr"),
                                        index_view(in.page_indices, "kv_page_indices"),
                                        index_view(in.last_page_len, "kv_last_page_len"), in.page_size);
  return call_attention(f, flops, opt, b.q, kv::paged(k, v, layout), b.o, b.lse);
}

// --algo naive is the textbook algorithm, in float or double only.
void require_algo_for(const std::string& algo, io::DType dtype) {
  KATTN_REQUIRE(algo != "naive" || !is_16bit(dtype), "--algo naive: the textbook algorithm runs in f32 or f64; ",
                "with --dtype ", dtype_name(dtype), " use flash or splitkv (--check still compares with it in float64)");
}

void write_index(const std::string& path, const std::vector<std::int64_t>& values) {
  io::write_npy(path, io::DType::i64, {static_cast<std::int64_t>(values.size())}, values.data());
}

void save_inputs(const std::string& dir, const BatchInputs& in) {
  write_array(dir + "/q.npy", in.dtype, in.q_shape(), in.q);
  write_array(dir + "/k.npy", in.dtype, in.kv_shape(), in.k);
  write_array(dir + "/v.npy", in.dtype, in.kv_shape(), in.v);
  write_index(dir + "/q_indptr.npy", in.q_indptr);
  if (in.paged) {
    write_index(dir + "/kv_page_indptr.npy", in.page_indptr);
    write_index(dir + "/kv_page_indices.npy", in.page_indices);
    write_index(dir + "/kv_last_page_len.npy", in.last_page_len);
  } else {
    write_index(dir + "/kv_indptr.npy", in.kv_indptr);
  }
}

void save_inputs(const std::string& dir, const DenseInputs& in) {
  write_dense(dir + "/q.npy", in, in.Nq, in.Hq, in.q);
  write_dense(dir + "/k.npy", in, in.Nk, in.Hkv, in.k);
  write_dense(dir + "/v.npy", in, in.Nk, in.Hkv, in.v);
}

RunKind batch_kind(const RunFlags& f, const Options& opt, std::shared_ptr<const BatchInputs> in) {
  const std::vector<std::int64_t> kv_lens = in->kv_lens(), q_lens = in->q_lens();
  std::int64_t total_kv = 0, max_kv = 0, max_q = 0;
  for (std::int64_t n : kv_lens) total_kv += n, max_kv = std::max(max_kv, n);
  for (std::int64_t n : q_lens) max_q = std::max(max_q, n);
  RunKind kind;
  kind.algo = f.algo.c_str();
  kind.dtype = in->dtype;
  kind.heading = printed("algo=%s dtype=%s %s batch of %lld sequences, %lld queries, %lld keys (longest %lld), "
                         "Hq=%lld Hkv=%lld D=%lld%s%s",
                         f.algo.c_str(), dtype_name(in->dtype), in->paged ? "paged" : "ragged", (long long)in->batch(),
                         (long long)in->total_q(), (long long)total_kv, (long long)max_kv, (long long)in->Hq,
                         (long long)in->Hkv, (long long)in->D,
                         in->paged ? (", page size " + std::to_string(in->page_size)).c_str() : "",
                         mask_summary(opt).c_str());
  kind.flops = batch_attention_flops(*in, opt);
  kind.kv_bytes = 2.0 * total_kv * in->Hkv * in->D * io::size_of(in->dtype);
  kind.decode = max_q <= kDecodeQueries;
  kind.call = [&f, opt, in, flops = kind.flops] {
    return with_storage(in->dtype, [&](auto t) { return call_batch<decltype(t)>(f, flops, opt, *in); });
  };
  kind.describe = [in, total_kv, max_q, max_kv](Json& j) {
    j.add("layout", in->paged ? "paged" : "ragged").add("batch", (long long)in->batch());
    j.add("total_q", (long long)in->total_q()).add("total_kv", (long long)total_kv);
    j.add("max_q", (long long)max_q).add("max_kv", (long long)max_kv);
    // Ragged and paged: the totals over the batch stand where dense runs have Nq and Nk.
    j.add("shape", std::vector<long long>{in->batch(), in->total_q(), total_kv, in->Hq, in->Hkv, in->D});
    j.add("shape_is", "B,total_q,total_kv,Hq,Hkv,D");
    if (in->paged) j.add("page_size", (long long)in->page_size);
  };
  kind.write = batch_writer(f, in);
  kind.check = [&f, opt, in](const Outputs& out, Json& j) {
    return check_outputs(host_params(*in, out.o, out.lse), opt, f.check, in->dtype, f.console, j, "run");
  };
  return kind;
}

}  // namespace

std::function<void(const Outputs&)> batch_writer(const RunFlags& f, std::shared_ptr<const BatchInputs> in) {
  return [&f, in](const Outputs& out) {
    if (f.out) write_array(*f.out, in->dtype, in->q_shape(), out.o);
    if (f.lse) write_array(*f.lse, lse_dtype(in->dtype), in->lse_shape(), out.lse);
  };
}

RunKind dense_kind(const RunFlags& f, const Options& opt, const BiasTensor& bias,
                   std::shared_ptr<const DenseInputs> in) {
  RunKind kind;
  kind.algo = f.algo.c_str();
  kind.dtype = in->dtype;
  kind.heading = printed("algo=%s dtype=%s layout=%s%s%s", f.algo.c_str(), dtype_name(in->dtype), name(in->layout),
                         dense_heading(*in).c_str(), mask_summary(opt).c_str());
  kind.flops = attention_flops(*in, opt);
  kind.kv_bytes = 2.0 * in->B * in->Nk * in->Hkv * in->D * io::size_of(in->dtype);
  kind.decode = in->Nq <= kDecodeQueries;
  kind.call = [&f, opt, in, flops = kind.flops] {
    return with_storage(in->dtype, [&](auto t) { return call_dense<decltype(t)>(f, flops, opt, *in); });
  };
  kind.describe = [in](Json& j) {
    j.add("layout", "dense").add("dims", name(in->layout)).add("shape", in->shape()).add("shape_is", "B,Nq,Nk,Hq,Hkv,D");
  };
  kind.write = [&f, in](const Outputs& out) {
    if (f.out) write_dense(*f.out, *in, in->Nq, in->Hq, out.o);
    if (f.lse) write_array(*f.lse, lse_dtype(in->dtype), {in->B, in->Hq, in->Nq}, out.lse);
  };
  kind.check = [&f, &bias, opt, in](const Outputs& out, Json& j) {
    return check_outputs(host_params(*in, out.o, out.lse), bias.on_host(opt), f.check, in->dtype, f.console, j, "run");
  };
  return kind;
}

int run_pipeline(const RunFlags& f, const Options& opt, const RunKind& kind) {
  std::FILE* text = f.console.text();
  std::fprintf(text, "kattn run: %s\n%s", kind.heading.c_str(), kind.detail.c_str());
  std::fflush(text);
  const Outputs out = kind.call();
  const double seconds = out.timing.median();
  const double gflops = seconds > 0 ? kind.flops / seconds / 1e9 : 0.0;
  const double kv_gbs = seconds > 0 ? kind.kv_bytes / seconds / 1e9 : 0.0;
  std::fprintf(text, "time: %.6f s, %.2f GFLOP/s%s", seconds, gflops, kind.rate_note.c_str());
  if (kind.decode) std::fprintf(text, ", K+V read at %.2f GB/s", kv_gbs);
  print_repeat(text, out.timing);
  std::fprintf(text, "\n");
  if (f.algo == "splitkv")
    std::fprintf(text, "split: %d splits%s, %lld work units (%lld unsplit) for %d processors: %s\n", out.plan.splits,
                 out.plan.chunk > 0 ? (" of " + std::to_string(out.plan.chunk) + " keys").c_str() : "",
                 (long long)out.plan.units, (long long)out.plan.units_unsplit, out.plan.processors,
                 out.plan.reason.c_str());
  const char* dtype = dtype_name(kind.dtype);
  Json j;
  j.add("algo", kind.algo).add("dtype", dtype).add("causal", opt.causal);
  j.add("seconds", seconds).add("gflops", gflops).add("threads", host_threads());
  if (const char* products = forward_cpu_products(dtype, opt)) j.add("cpu_products", products);
  if (kind.decode) j.add("kv_gbs", kv_gbs);
  add_repeat(j, out.timing);
  if (f.algo == "splitkv")
    j.add("splits", out.plan.splits).add("chunk", (long long)out.plan.chunk).add("units", (long long)out.plan.units);
  kind.describe(j);
  return write_and_check(f, kind, out, j);
}

int cmd_run(Args& args) {
  if (args.help(kRunUsage)) return 0;
  if (auto mode = args.value("--dist")) return run_distributed(args, *mode);
  refuse_out_of_mode(args, {{"--zigzag", "--dist ring, ulysses, hybrid or grid"},
                            {"--ulysses-size", "--dist hybrid"},
                            {"--grid", "--dist grid"},
                            {"--deterministic", "--dist"},
                            {"--chunk", "--dist"},
                            {"--dq-strategy", "kattn grad"},
                            {"--dq-chunks", "kattn grad"}});
  if (!args.has("--page-size")) refuse_out_of_mode(args, {{"--shuffle-pages", "--page-size"}});
  if (!args.has("--random-ragged"))
    refuse_out_of_mode(args, {{"--q-lens", "--random-ragged"}, {"--kv-lens", "--random-ragged"}});
  KATTN_REQUIRE(!args.has("--save-inputs") || !(wants_block_sparse(args) || wants_cascade(args)),
                "--save-inputs: not supported with --block-mask, --pattern or --cascade");
  const RunFlags f = read_run_flags(args);
  BiasTensor bias;
  const Options opt = read_options(args, &bias);
  KATTN_REQUIRE(f.algo == "splitkv" || (opt.splits == 0 && opt.split_chunk == 0),
                "--splits: splitting the keys needs --algo splitkv");
  if (wants_block_sparse(args)) return run_pipeline(f, opt, block_sparse_kind(args, f, opt, bias));
  if (wants_cascade(args)) return run_pipeline(f, opt, cascade_kind(args, f, opt));
  if (wants_batch_inputs(args)) {
    KATTN_REQUIRE(!args.has("--layout"), "--layout: for dense inputs; ragged and paged arrays are [rows, H, D]");
    const auto in = std::make_shared<const BatchInputs>(read_batch_inputs(args, nullptr));
    args.finish();
    require_algo_for(f.algo, in->dtype);
    if (f.save_dir) save_inputs(*f.save_dir, *in);
    return run_pipeline(f, opt, batch_kind(f, opt, in));
  }
  const auto in = std::make_shared<const DenseInputs>(read_dense_inputs(args, "", nullptr, nullptr));
  args.finish();
  require_algo_for(f.algo, in->dtype);
  if (f.save_dir) save_inputs(*f.save_dir, *in);
  return run_pipeline(f, opt, dense_kind(f, opt, bias, in));
}

}  // namespace cli
}  // namespace kattn
