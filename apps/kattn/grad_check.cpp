#include "grad_check.hpp"

#include <algorithm>
#include <string>

#include "bias_tensor.hpp"
#include "kattn/errors.hpp"
#include "kattn/reference_backward.hpp"
#include "kattn/reference_masked.hpp"
#include "kattn/score_bias.hpp"
#include "kattn/reference_backward_rows.hpp"

namespace kattn {
namespace cli {
namespace {

// The bytes of the full textbook backward's two score-sized float64 arrays.
double full_gradient_bytes(const AttentionParams<double>& p) {
  double pairs = 0;
  for (int b = 0; b < p.batch; ++b) pairs += double(p.seq_q_len(b)) * double(p.seq_kv_len(b));
  return 2.0 * 8.0 * p.heads_q * pairs;
}

}  // namespace

GradientsUnderTest host_gradients(const AttentionParams<double>& inputs, const StoredValues& dout,
                                  const GradientSet& tested) {
  GradientsUnderTest g;
  BackwardParams<double>& p = g.p;
  p.fwd = inputs;
  g.dout = std::make_shared<const std::vector<double>>(dout.widened());
  p.dout = same_layout(g.dout->data(), inputs.q);
  p.dq = same_layout(const_cast<double*>(tested.dq.data()), inputs.q);  // read only: the gradients under test
  p.dk = same_layout(const_cast<double*>(tested.dk.data()), inputs.k);
  p.dv = same_layout(const_cast<double*>(tested.dv.data()), inputs.k);
  g.tested = &tested;
  return g;
}

std::vector<GradientError> compare_gradients(const GradientSet& tested, const GradientSet& ref) {
  std::vector<GradientError> e = {{"dq", compare(tested.dq, ref.dq), ""},
                                  {"dk", compare(tested.dk, ref.dk), ""},
                                  {"dv", compare(tested.dv, ref.dv), ""}};
  if (!tested.dsinks.empty() && !ref.dsinks.empty()) e.push_back({"dsinks", compare(tested.dsinks, ref.dsinks), ""});
  if (!tested.dbias.empty() && !ref.dbias.empty()) e.push_back({"dbias", compare(tested.dbias, ref.dbias), ""});
  return e;
}

bool gradient_check_samples(const AttentionParams<double>& inputs, const CheckSettings& settings, bool block_mask) {
  const bool sampled = check_samples(settings, full_gradient_bytes(inputs));
  if (sampled && block_mask) {
    KATTN_REQUIRE(settings.rows == 0,
                  "--check-rows: a sampled check does not take a block mask (--check checks "
                  "every row against the masked textbook backward)");
    KATTN_REQUIRE(false, "--check: the textbook backward would hold ", full_gradient_bytes(inputs) / 1e9,
                  " GB of scores, past the 1 GiB a full check takes, and a sampled check does not take a block "
                  "mask; check a smaller problem");
  }
  return sampled;
}

int check_gradients(const GradientsUnderTest& g, const Options& opt, const CheckSettings& settings, io::DType dtype,
                    bool block_mask, const FullGradients& full, std::FILE* text, Json& j) {
  const BackwardParams<double>& p = g.p;
  const AttentionParams<double>& f = p.fwd;
  const bool sampled = gradient_check_samples(f, settings, block_mask);
  std::int64_t checked_q = 0, checked_k = 0;
  std::int64_t total_k = 0;
  for (int b = 0; b < f.batch; ++b) total_k += f.seq_kv_len(b);
  total_k *= f.heads_kv;
  const auto describe = [&](Json& jj) {
    jj.add("check_mode", sampled ? "sampled" : "full").add("checked_rows", (long long)checked_q);
    jj.add("checked_key_rows", (long long)checked_k);
  };
  const GradientSet& tested = *g.tested;
  if (!sampled) {
    const GradientSet ref = full();
    const std::vector<GradientError> e = compare_gradients(tested, ref);
    checked_q = f.q_total * f.heads_q, checked_k = total_k;
    std::string unchecked;
    if (!tested.dbias.empty() && ref.dbias.empty()) unchecked = "dbias (the masked textbook backward has none)";
    return gradient_verdict(e, dtype, text, j, describe, unchecked);
  }
  Compared c[3];  // dq, dk, dv
  const std::int64_t wanted = sample_size(settings);
  const std::vector<QueryRow> rows = sample_query_rows(f, opt, wanted);
  std::vector<double> row(f.head_dim);
  for (const QueryRow& r : rows) {
    reference_dq_row(p, opt, r, row.data());
    c[0].add(p.dq_ptr(r.b, r.i, r.h), p.dq.data, row.data(), f.head_dim);
  }
  std::vector<KeyRow> keys;
  if (wanted >= total_k) {
    for (int b = 0; b < f.batch; ++b)
      for (std::int64_t n = 0; n < f.seq_kv_len(b); ++n)
        for (int h = 0; h < f.heads_kv; ++h) keys.push_back({b, n, h});
  } else {
    const std::int64_t edges = static_cast<std::int64_t>(key_rows_to_check(p, opt, 0, kCheckSampleSeed).size());
    keys = key_rows_to_check(p, opt, std::max<std::int64_t>(0, wanted - edges), kCheckSampleSeed);
  }
  std::vector<double> dk(keys.size() * f.head_dim), dv(keys.size() * f.head_dim);
  reference_dkdv_rows(p, opt, keys, dk.data(), dv.data());
  for (std::size_t r = 0; r < keys.size(); ++r) {
    c[1].add(p.dk_ptr(keys[r].b, keys[r].j, keys[r].h), p.dk.data, dk.data() + r * f.head_dim, f.head_dim);
    c[2].add(p.dv_ptr(keys[r].b, keys[r].j, keys[r].h), p.dv.data, dv.data() + r * f.head_dim, f.head_dim);
  }
  checked_q = static_cast<std::int64_t>(rows.size()), checked_k = static_cast<std::int64_t>(keys.size());
  const std::string how_q = sample_description(checked_q, f.q_total * f.heads_q, "query rows");
  const std::string how_k = sample_description(checked_k, total_k, "key rows");
  std::string unchecked;
  for (const auto& [name, values] : {std::pair{"dsinks", &tested.dsinks}, std::pair{"dbias", &tested.dbias}})
    if (!values->empty()) unchecked += std::string(unchecked.empty() ? "" : ", ") + name;
  if (!unchecked.empty()) unchecked += " (a sampled check compares rows of dq, dk and dv only)";
  return gradient_verdict({{"dq", c[0].stats(), how_q}, {"dk", c[1].stats(), how_k}, {"dv", c[2].stats(), how_k}},
                          dtype, text, j, describe, unchecked);
}

GradientSet dense_textbook_backward(const DenseInputs& in, const StoredValues& dout_values, const Options& opt,
                                    const BlockMask* mask, const BiasTensor* dbias_of) {
  using T4 = Tensor4<double>;
  const auto q = to_view<T4>(in.q, "q", in.B, in.Nq, in.Hq, in.D);
  const auto k = to_view<T4>(in.k, "k", in.B, in.Nk, in.Hkv, in.D);
  const auto v = to_view<T4>(in.v, "v", in.B, in.Nk, in.Hkv, in.D);
  const auto dout = to_view<T4>(dout_values, "do", in.B, in.Nq, in.Hq, in.D);
  T4 dq("dq", in.B, in.Nq, in.Hq, in.D), dk("dk", in.B, in.Nk, in.Hkv, in.D), dv("dv", in.B, in.Nk, in.Hkv, in.D);
  GradientSet g;
  if (mask) {  // host loops with the block mask as element mask
    const auto host = [](const T4& view) { return Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), view); };
    auto hq = host(dq), hk = host(dk), hv = host(dv);
    g.dsinks = reference_backward_masked(host(q), host(k), host(v), host(dout), hq, hk, hv,
                                         expand_block_mask(*mask, in.Nq, in.Nk), opt);
    Kokkos::deep_copy(dq, hq);
    Kokkos::deep_copy(dk, hk);
    Kokkos::deep_copy(dv, hv);
  } else {
    const T4 dbias = dbias_of ? dbias_of->gradient_view() : T4();
    g.dsinks = reference_backward(Kokkos::DefaultExecutionSpace(), q, k, v, dout, dq, dk, dv, opt,
                                  dbias_of ? score_bias_gradient(dbias) : ScoreBiasGradient{});
    if (dbias_of) g.dbias = from_view(dbias);
  }
  g.dq = from_view(dq);
  g.dk = from_view(dk);
  g.dv = from_view(dv);
  return g;
}

int gradient_verdict(const std::vector<GradientError>& e, io::DType dtype, std::FILE* text, Json& j,
                     const std::function<void(Json&)>& describe, const std::string& unchecked) {
  double max_abs = 0, rel = 0;
  std::int64_t nonfinite = 0;
  for (const GradientError& g : e) {
    std::fprintf(text, "check %s vs float64 textbook backward%s%s: max abs err %.3e, rel err %.3e\n", g.name.c_str(),
                 g.how.empty() ? "" : ", ", g.how.c_str(), g.e.max_abs, g.e.rel);
    j.add(g.name + "_max_abs_err", g.e.max_abs).add(g.name + "_rel_err", g.e.rel);
    max_abs = std::max(max_abs, g.e.max_abs);
    rel = std::max(rel, g.e.rel);
  }
  if (!unchecked.empty()) std::fprintf(text, "check: not compared: %s\n", unchecked.c_str());
  for (const GradientError& g : e) {
    report_nonfinite(g.e, g.name, text, j);
    nonfinite += g.e.nonfinite;
  }
  if (describe) describe(j);
  j.add("max_abs_err", max_abs).add("rel_err", rel);
  // Non-finite values where the reference has numbers (an unwritten gradient) fail too.
  const bool failed = nonfinite > 0 || !(rel <= check_tolerance(dtype));
  j.add("nonfinite", (long long)nonfinite).add("check", failed ? "fail" : "pass");
  if (!failed) return 0;
  if (nonfinite > 0)
    std::fprintf(stderr,
                 "kattn grad: --check failed: %lld non-finite gradients where the float64 textbook backward differs\n",
                 (long long)nonfinite);
  else
    std::fprintf(stderr,
                 "kattn grad: --check failed: relative error above %.3g against the float64 textbook backward\n",
                 check_tolerance(dtype));
  return 3;
}

}  // namespace cli
}  // namespace kattn
