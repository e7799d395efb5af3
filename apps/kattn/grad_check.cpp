#include "grad_check.hpp"

#include <algorithm>
#include <string>

#include "kattn/errors.hpp"
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

// Tested and reference values side by side, with where each tested value sits in its array.
struct Compared {
  std::vector<double> out, ref;
  std::vector<std::int64_t> at;
  void add(const double* tested, const double* base, const double* reference, std::int64_t n) {
    for (std::int64_t d = 0; d < n; ++d) {
      out.push_back(tested[d]);
      ref.push_back(reference[d]);
      at.push_back(static_cast<std::int64_t>(tested - base) + d);
    }
  }
  ErrorStats stats() const {
    ErrorStats e = compare(out, ref);
    if (e.first_nonfinite >= 0) e.first_nonfinite = at[e.first_nonfinite];
    return e;
  }
};

}  // namespace

GradientsUnderTest host_gradients(const AttentionParams<double>& inputs, const std::vector<double>& dout,
                                  const std::vector<double>& dq, const std::vector<double>& dk,
                                  const std::vector<double>& dv) {
  GradientsUnderTest g;
  BackwardParams<double>& p = g.p;
  p.fwd = inputs;
  p.dout = dout.data();
  p.do_stride_batch = p.dq_stride_batch = inputs.q_stride_batch;
  p.do_stride_seq = p.dq_stride_seq = inputs.q_stride_seq;
  p.do_stride_head = p.dq_stride_head = inputs.q_stride_head;
  p.dq = const_cast<double*>(dq.data());  // read only: the gradients under test
  p.dk = const_cast<double*>(dk.data());
  p.dv = const_cast<double*>(dv.data());
  p.dk_stride_batch = p.dv_stride_batch = inputs.k_stride_batch;
  p.dk_stride_seq = p.dv_stride_seq = inputs.k_stride_seq;
  p.dk_stride_head = p.dv_stride_head = inputs.k_stride_head;
  g.dq_size = static_cast<std::int64_t>(dq.size());
  g.dkv_size = static_cast<std::int64_t>(dk.size());
  return g;
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
  Compared c[3];  // dq, dk, dv
  std::string how_q, how_k;
  std::int64_t checked_q = 0, checked_k = 0;
  std::int64_t total_k = 0;
  for (int b = 0; b < f.batch; ++b) total_k += f.seq_kv_len(b);
  total_k *= f.heads_kv;
  if (!sampled) {
    std::vector<double> ref[3];
    full(ref[0], ref[1], ref[2]);
    c[0].add(p.dq, p.dq, ref[0].data(), g.dq_size);
    c[1].add(p.dk, p.dk, ref[1].data(), g.dkv_size);
    c[2].add(p.dv, p.dv, ref[2].data(), g.dkv_size);
    checked_q = f.q_total * f.heads_q, checked_k = total_k;
  } else {
    const std::int64_t wanted = sample_size(settings);
    const std::vector<QueryRow> rows = sample_query_rows(f, opt, wanted);
    std::vector<double> row(f.head_dim);
    for (const QueryRow& r : rows) {
      reference_dq_row(p, opt, r, row.data());
      c[0].add(p.dq_ptr(r.b, r.i, r.h), p.dq, row.data(), f.head_dim);
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
      c[1].add(p.dk_ptr(keys[r].b, keys[r].j, keys[r].h), p.dk, dk.data() + r * f.head_dim, f.head_dim);
      c[2].add(p.dv_ptr(keys[r].b, keys[r].j, keys[r].h), p.dv, dv.data() + r * f.head_dim, f.head_dim);
    }
    checked_q = static_cast<std::int64_t>(rows.size()), checked_k = static_cast<std::int64_t>(keys.size());
    how_q = sample_description(checked_q, f.q_total * f.heads_q, "query rows");
    how_k = sample_description(checked_k, total_k, "key rows");
  }
  ErrorStats e[3];
  for (int i = 0; i < 3; ++i) e[i] = c[i].stats();
  return gradient_verdict(e, how_q, how_k, dtype, text, j, [&](Json& jj) {
    jj.add("check_mode", sampled ? "sampled" : "full").add("checked_rows", (long long)checked_q);
    jj.add("checked_key_rows", (long long)checked_k);
  });
}

int gradient_verdict(const ErrorStats (&e)[3], const std::string& how_q, const std::string& how_k, io::DType dtype,
                     std::FILE* text, Json& j, const std::function<void(Json&)>& describe) {
  const char* names[3] = {"dq", "dk", "dv"};
  double max_abs = 0, rel = 0;
  std::int64_t nonfinite = 0;
  for (int i = 0; i < 3; ++i) {
    const std::string& how = i == 0 ? how_q : how_k;  // empty: every row
    std::fprintf(text, "check %s vs float64 textbook backward%s%s: max abs err %.3e, rel err %.3e\n", names[i],
                 how.empty() ? "" : ", ", how.c_str(), e[i].max_abs, e[i].rel);
    j.add(std::string(names[i]) + "_max_abs_err", e[i].max_abs).add(std::string(names[i]) + "_rel_err", e[i].rel);
    max_abs = std::max(max_abs, e[i].max_abs);
    rel = std::max(rel, e[i].rel);
  }
  for (int i = 0; i < 3; ++i) {
    report_nonfinite(e[i], names[i], text, j);
    nonfinite += e[i].nonfinite;
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
