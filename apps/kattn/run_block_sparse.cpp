// kattn run --block-mask MASK.npy | --pattern P [--mask-block B]: block-sparse attention on dense
// inputs (flash: the tiled forward; splitkv: split-KV), timed, checked against the float64
// textbook algorithm with the block mask expanded to an element mask, written to .npy files.
#include "run_block_sparse.hpp"

#include <Kokkos_Core.hpp>

#include <memory>
#include <string>

#include "batch_inputs.hpp"
#include "bias_tensor.hpp"
#include "json.hpp"
#include "kattn/attention.hpp"
#include "kattn/errors.hpp"
#include "kattn/io/npy.hpp"
#include "kattn/reference_masked.hpp"
#include "paths.hpp"
#include "run_pipeline.hpp"

namespace kattn {
namespace cli {

BlockMask read_block_mask(Args& args, const DenseInputs& in) {
  const auto file = args.value("--block-mask");
  const auto pattern = args.value("--pattern");
  KATTN_REQUIRE(!(file && pattern), "--pattern: give --block-mask or --pattern, not both");
  const auto block = args.integer("--mask-block", 1, 1 << 30);
  if (pattern) {
    const std::int64_t B = block.value_or(64);
    return make_block_mask(parse_block_pattern(*pattern), B, in.Nq, in.Nk);
  }
  KATTN_REQUIRE(block.has_value(), "--mask-block: required with --block-mask (positions per mask block)");
  const std::int64_t B = *block;
  const io::NpyArray a = read_input("--block-mask", *file);
  KATTN_REQUIRE(a.dtype == io::DType::b1 || a.is_integer(), "--block-mask: expected a bool, uint8 or integer array, got ",
                io::name(a.dtype));
  const std::int64_t qb = (in.Nq + B - 1) / B, kb = (in.Nk + B - 1) / B;
  KATTN_REQUIRE((a.shape.size() == 2 || a.shape.size() == 3) && a.shape[a.shape.size() - 2] == qb &&
                    a.shape.back() == kb,
                "--block-mask: expected shape [", qb, ", ", kb, "] or [heads, ", qb, ", ", kb, "] (", in.Nq,
                " queries and ", in.Nk, " keys in blocks of ", B, "), got ", shape_text(a.shape));
  const int heads = a.shape.size() == 3 ? static_cast<int>(a.shape[0]) : 1;
  KATTN_REQUIRE(heads == 1 || heads == in.Hq, "--block-mask: expected 1 or ", in.Hq, " heads (the query heads), got ",
                heads);
  return BlockMask::from_dense(B, heads, qb, kb, a.values<std::int64_t>());
}

std::string block_mask_detail(const BlockMask& m) {
  return printed("block mask: %lld x %lld blocks of %lld, %s, %.2f%% kept\n", (long long)m.q_blocks(),
                 (long long)m.k_blocks(), (long long)m.block(), m.heads() == 1 ? "shared" : "per head",
                 100.0 * m.density());
}

namespace {

// Block-sparse attention of `algo` on the inputs in T, timed as `f` says (as_algo: in place of
// f.algo, for the check's reference). naive is the host oracle with the block mask expanded.
template <class T>
Outputs run_sparse(const RunFlags& f, const std::string& algo, double flops, const DenseInputs& in, const BlockMask& m,
                   const Options& opt, const BiasTensor& bias) {
  const DenseViews<T> views = make_dense_views<T>(in);
  const auto q = views.q, k = views.k, v = views.v;
  const auto o = views.o;
  const auto lse = views.lse;
  const Kokkos::DefaultExecutionSpace space;
  space.fence();
  Outputs r;
  Options masked = opt;
  masked.block_mask = &m;
  if (algo == "flash") masked.splits = 1;
  r.timing = timed_with_progress(f, flops, masked, [&] {
    if (algo == "naive") {
      // Host oracle (host views; the element mask is the block mask expanded).
      auto ho = Kokkos::create_mirror_view(o);
      auto hl = Kokkos::create_mirror_view(lse);
      reference_masked(Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), q),
                       Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), k),
                       Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v), ho, hl,
                       expand_block_mask(m, in.Nq, in.Nk), bias.on_host(opt));
      Kokkos::deep_copy(o, ho);
      Kokkos::deep_copy(lse, hl);
    } else {
      r.plan = attention(space, q, kv::dense(k, v), o, lse, masked);
    }
    space.fence();
  });
  r.o = from_view(o);
  r.lse = from_view(lse);
  return r;
}

}  // namespace

RunKind block_sparse_kind(Args& args, const RunFlags& f, const Options& opt, const BiasTensor& bias) {
  KATTN_REQUIRE(!wants_batch_inputs(args), "--block-mask: block-sparse attention takes dense inputs ",
                "(--q/--k/--v [B,N,H,D] or --random), not ragged or paged batches");
  KATTN_REQUIRE(f.check.rows == 0, "--check-rows: block-sparse runs check every row (--check)");
  const auto in = std::make_shared<const DenseInputs>(read_dense_inputs(args));
  const auto m = std::make_shared<const BlockMask>(read_block_mask(args, *in));
  args.finish();
  RunKind kind = dense_kind(f, opt, bias, in);
  kind.decode = false;
  kind.detail = block_mask_detail(*m);
  kind.rate_note = " (kept pairs only)";
  kind.flops = attention_flops(*in, opt, m.get());
  const auto run = [opt, m, &bias, flops = kind.flops](const RunFlags& fl, const std::string& algo,
                                                      const DenseInputs& x) {
    return x.dtype == io::DType::f32 ? run_sparse<float>(fl, algo, flops, x, *m, opt, bias)
                                     : run_sparse<double>(fl, algo, flops, x, *m, opt, bias);
  };
  kind.call = [run, &f, in] { return run(f, f.algo, *in); };
  kind.describe = [dense = kind.describe, m](Json& j) {
    dense(j);
    j.add("mask_block", (long long)m->block()).add("mask_heads", m->heads()).add("mask_density", m->density());
  };
  kind.check = [run, &f, in](const Outputs& out, Json& j) {
    DenseInputs in64 = *in;
    in64.dtype = io::DType::f64;
    RunFlags once = f;  // the reference: one call, no progress line
    once.timing = Timing{};
    once.console.progress = false, once.console.quiet = true;
    const Outputs ref = run(once, "naive", in64);
    return check_verdict(compare(out.o, ref.o), compare(out.lse, ref.lse), in->dtype,
                         "block mask as element mask, all " + std::to_string(in->B * in->Nq * in->Hq) + " rows",
                         f.console.text(), j, "run");
  };
  return kind;
}

}  // namespace cli
}  // namespace kattn
