#include "run_cascade.hpp"

#include <Kokkos_Core.hpp>
#include <memory>
#include <vector>

#include "batch_inputs.hpp"
#include "inputs.hpp"
#include "json.hpp"
#include "kattn/attention.hpp"
#include "kattn/errors.hpp"
#include "paths.hpp"
#include "run_pipeline.hpp"

namespace kattn {
namespace cli {
namespace {

// Above this many multiply-adds, --check samples rows; below, it checks every row exactly.
constexpr double kCheckAllRowsWork = 2e9;

struct Prefix {
  std::int64_t keys = 0;
  StoredValues k, v;  // [keys, Hkv, D], in the run's type
};

// The prefix's files are read as q's are: float32, float64 or float16, or bf16 bits (<u2) with
// --dtype bf16, of q's dtype unless --dtype says which to compute in.
Prefix read_prefix(Args& args, const BatchInputs& in, bool random, std::uint64_t seed, bool dtype_given) {
  Prefix p;
  std::vector<double> k, v;  // stored in the run's type at the end
  const auto np = args.integer("--random-prefix", 0, std::int64_t(1) << 31);
  const auto kf = args.value("--k-prefix"), vf = args.value("--v-prefix");
  if (random) {
    KATTN_REQUIRE(np.has_value() && !kf && !vf, "--random-prefix: random requests take a random prefix of NP keys");
    p.keys = *np;
    k = random_normal(p.keys * in.Hkv * in.D, 3 * seed + 5);
    v = random_normal(p.keys * in.Hkv * in.D, 3 * seed + 6);
  } else {
    KATTN_REQUIRE(kf && vf && !np, "--k-prefix: give --k-prefix KP.npy and --v-prefix VP.npy [Np, Hkv, D]");
    const io::NpyArray kn = read_input("--k-prefix", *kf), vn = read_input("--v-prefix", *vf);
    for (const auto& [a, flag, path] :
         {std::make_tuple(&kn, "--k-prefix", *kf), std::make_tuple(&vn, "--v-prefix", *vf)}) {
      require_input_dtype(flag, path, a->dtype);
      KATTN_REQUIRE(a->shape.size() == 3 && a->shape[1] == in.Hkv && a->shape[2] == in.D, flag, " ", path,
                    ": expected [Np, ", in.Hkv, ", ", in.D, "] (KV heads and head dim of k)");
      // Without --dtype, in.dtype is q's file's.
      require_one_dtype(flag, path, a->dtype, in.dtype, dtype_given);
      require_bf16_bits_asked(flag, path, a->dtype, in.dtype, dtype_given);
    }
    KATTN_REQUIRE(kn.shape == vn.shape, "--v-prefix ", *vf, ": expected the shape of --k-prefix");
    p.keys = kn.shape[0];
    k = kn.values<double>();
    v = vn.values<double>();
  }
  round_to(in.dtype, k);
  round_to(in.dtype, v);
  p.k = StoredValues(in.dtype, k);
  p.v = StoredValues(in.dtype, v);
  return p;
}

// The same requests with the prefix in front of each one's keys: what cascade must equal.
BatchInputs whole_sequences(const BatchInputs& in, const Prefix& prefix) {
  BatchInputs w = in;
  const std::int64_t row = in.Hkv * in.D;
  const std::vector<double> in_k = in.k.widened(), in_v = in.v.widened();
  const std::vector<double> pre_k = prefix.k.widened(), pre_v = prefix.v.widened();
  std::vector<double> k, v;
  w.kv_indptr.assign(1, 0);
  for (std::int64_t b = 0; b < in.batch(); ++b) {
    for (const auto& [to, suffix, pre] : {std::tie(k, in_k, pre_k), std::tie(v, in_v, pre_v)}) {
      to.insert(to.end(), pre.begin(), pre.end());
      to.insert(to.end(), suffix.begin() + in.kv_indptr[b] * row, suffix.begin() + in.kv_indptr[b + 1] * row);
    }
    w.kv_indptr.push_back(w.kv_indptr.back() + prefix.keys + in.kv_indptr[b + 1] - in.kv_indptr[b]);
  }
  w.k = StoredValues(in.dtype, k);
  w.v = StoredValues(in.dtype, v);
  return w;
}

// o in T, lse in its accumulation type (float for bf16 and fp16), timed as `f` says.
template <class T>
Outputs run(const RunFlags& f, double flops, const BatchInputs& in, const Prefix& prefix, Options opt) {
  const Kokkos::DefaultExecutionSpace space;
  const BatchViews<T> b = make_batch_views<T>(in);
  const auto kp = to_view<Tensor3<T>>(prefix.k, "k_prefix", prefix.keys, in.Hkv, in.D);
  const auto vp = to_view<Tensor3<T>>(prefix.v, "v_prefix", prefix.keys, in.Hkv, in.D);
  space.fence();
  Outputs out;
  out.timing = timed_with_progress(f, flops, opt, [&] {
    attention(space, b.q, kv::cascade(kp, vp, kv::ragged(b.k, b.v, b.layout)), b.o, b.lse, opt);
    space.fence();
  });
  out.o = from_view(b.o);
  out.lse = from_view(b.lse);
  return out;
}

}  // namespace

RunKind cascade_kind(Args& args, const RunFlags& f, const Options& opt) {
  args.flag("--cascade");
  KATTN_REQUIRE(f.algo == "flash", "--cascade: runs kattn::attention over kv::cascade (the tiled algorithm), not --algo ",
                f.algo);
  const auto seed_text = args.peek("--seed");
  const std::uint64_t seed =
      seed_text ? static_cast<std::uint64_t>(parse_integer(*seed_text, "--seed", 0, INT64_MAX)) : 0;
  const bool random = args.has("--random-ragged");
  KATTN_REQUIRE(random || args.has("--kv-indptr"), "--cascade: the requests' suffixes are a ragged batch ",
                "(--random-ragged ... or --q/--k/--v with --q-indptr and --kv-indptr)");
  const bool dtype_given = args.has("--dtype");
  const auto in = std::make_shared<const BatchInputs>(read_batch_inputs(args, nullptr));
  KATTN_REQUIRE(!in->paged, "--cascade: ragged suffixes (--kv-indptr), not a paged cache");
  const auto prefix = std::make_shared<const Prefix>(read_prefix(args, *in, random, seed, dtype_given));
  args.finish();
  const auto whole = std::make_shared<const BatchInputs>(whole_sequences(*in, *prefix));
  RunKind kind;
  kind.algo = "cascade";
  kind.dtype = in->dtype;
  kind.heading = printed("cascade dtype=%s %lld requests, %lld queries, a shared prefix of %lld keys and %lld suffix "
                         "keys, Hq=%lld Hkv=%lld D=%lld%s",
                         dtype_name(in->dtype), (long long)in->batch(), (long long)in->total_q(),
                         (long long)prefix->keys, (long long)in->kv_rows(), (long long)in->Hq, (long long)in->Hkv,
                         (long long)in->D, mask_summary(opt).c_str());
  kind.flops = batch_attention_flops(*whole, opt);
  kind.call = [&f, opt, in, prefix, flops = kind.flops] {
    return with_storage(in->dtype, [&](auto t) { return run<decltype(t)>(f, flops, *in, *prefix, opt); });
  };
  kind.describe = [in, prefix](Json& j) {
    j.add("layout", "ragged").add("batch", (long long)in->batch()).add("prefix_keys", (long long)prefix->keys);
    j.add("shape", std::vector<long long>{in->batch(), in->total_q(), in->kv_rows(), in->Hq, in->Hkv, in->D});
    j.add("shape_is", "B,total_q,total_suffix_kv,Hq,Hkv,D");
  };
  kind.write = batch_writer(f, in);
  kind.check = [&f, opt, in, whole, flops = kind.flops](const Outputs& out, Json& j) {
    // Row by row against attention over prefix + suffix: every row when that is cheap.
    CheckSettings rows = f.check;
    if (rows.rows == 0) rows.rows = flops < kCheckAllRowsWork ? std::max<std::int64_t>(1, in->total_q() * in->Hq) : 64;
    return check_outputs(host_params(*whole, out.o, out.lse), opt, rows, in->dtype, f.console, j, "run");
  };
  return kind;
}

}  // namespace cli
}  // namespace kattn
