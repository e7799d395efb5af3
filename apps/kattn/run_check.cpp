#include "run_check.hpp"

#include <algorithm>
#include <optional>

#include "kattn/core/key_window.hpp"
#include "kattn/errors.hpp"
#include "kattn/reference_rows.hpp"
#include "progress_line.hpp"

namespace kattn {
namespace cli {
namespace {

// Past a score matrix of this many bytes, checking every row takes too long: sample rows instead.
constexpr double kFullReferenceBytes = double(1 << 30);
// Rows checked by default when sampling.
constexpr std::int64_t kDefaultSampleRows = 64;

}  // namespace

double check_tolerance(io::DType dtype) {
  switch (dtype) {
    case io::DType::bf16: return 2 * 0x1p-8;
    case io::DType::f16: return 2 * 0x1p-11;
    case io::DType::f64: return 1e-10;
    default: return 1e-4;
  }
}

double check_lse_tolerance(io::DType dtype) { return check_tolerance(lse_dtype(dtype)); }

bool check_samples(const CheckSettings& settings, double full_bytes) {
  return settings.rows > 0 || full_bytes > kFullReferenceBytes;
}

std::int64_t sample_size(const CheckSettings& settings) {
  return settings.rows > 0 ? settings.rows : kDefaultSampleRows;
}

std::vector<QueryRow> sample_query_rows(const AttentionParams<double>& p, const Options& opt, std::int64_t wanted) {
  std::vector<QueryRow> rows;
  if (wanted >= p.q_total * p.heads_q) {  // every row, one by one
    for (int b = 0; b < p.batch; ++b)
      for (std::int64_t i = 0; i < p.seq_q_len(b); ++i)
        for (int h = 0; h < p.heads_q; ++h) rows.push_back({b, i, h});
    return rows;
  }
  const std::int64_t edges = static_cast<std::int64_t>(rows_to_check(p, opt, 0, kCheckSampleSeed).size());
  return rows_to_check(p, opt, std::max<std::int64_t>(0, wanted - edges), kCheckSampleSeed);
}

std::string sample_description(std::int64_t checked, std::int64_t total, const char* rows) {
  return "checked " + std::to_string(checked) + " of " + std::to_string(total) + " " + rows + " exactly in float64" +
         (checked < total ? " (first and last, every masked edge, the rest at random)" : " (row by row)");
}

CheckSettings read_check_settings(Args& args) {
  CheckSettings s;
  s.enabled = args.flag("--check");
  s.rows = args.integer("--check-rows", 1, std::int64_t(1) << 40).value_or(0);
  if (s.rows > 0) s.enabled = true;
  return s;
}

namespace {

// What dense inputs and a batch share: q, k and v of nq and nk positions per sequence (0: ragged)
// at float64 copies of the stored inputs, which p holds (with `values`), o, the heads and batch.
template <class In>
HostParams host_common(const In& in, std::int64_t nq, std::int64_t nk, int batch, const std::vector<double>& o,
                       bool values) {
  HostParams p;
  const int Hq = static_cast<int>(in.Hq), Hkv = static_cast<int>(in.Hkv), D = static_cast<int>(in.D);
  p.q = dense_operand<const double>(nullptr, nq, Hq, D);
  p.k = p.v = dense_operand<const double>(nullptr, nk, Hkv, D);
  if (values) {
    const StoredValues* stored[3] = {&in.q, &in.k, &in.v};
    for (int i = 0; i < 3; ++i) p.widened[i] = std::make_shared<const std::vector<double>>(stored[i]->widened());
    p.q.data = p.widened[0]->data(), p.k.data = p.widened[1]->data(), p.v.data = p.widened[2]->data();
  }
  p.o = dense_operand(const_cast<double*>(o.data()), nq, Hq, D);  // read only: the outputs under test
  p.batch = batch, p.heads_q = Hq, p.heads_kv = Hkv, p.head_dim = D;
  return p;
}

}  // namespace

HostParams host_params(const DenseInputs& in, const std::vector<double>& o, const std::vector<double>& lse,
                       bool values) {
  HostParams p = host_common(in, in.Nq, in.Nk, static_cast<int>(in.B), o, values);
  p.lse = Operand<double>(const_cast<double*>(lse.data()), in.Hq * in.Nq, 1, in.Nq);  // [B, Hq, Nq]
  p.q_len = in.Nq, p.kv_len = in.Nk, p.q_total = in.B * in.Nq;
  return p;
}

HostParams host_params(const BatchInputs& in, const std::vector<double>& o, const std::vector<double>& lse,
                       bool values) {
  HostParams p = host_common(in, 0, 0, static_cast<int>(in.batch()), o, values);
  p.lse = dense_operand(const_cast<double*>(lse.data()), 0, static_cast<int>(in.Hq), 1);
  p.q_indptr = in.q_indptr.data();
  if (in.paged) {
    p.k.stride_batch = p.v.stride_batch = in.page_size * in.Hkv * in.D;
    p.kv_page_indptr = in.page_indptr.data();
    p.kv_page_indices = in.page_indices.data();
    p.kv_last_page_len = in.last_page_len.data();
    p.page_size = in.page_size;
  } else {
    p.kv_indptr = in.kv_indptr.data();
  }
  for (int b = 0; b < p.batch; ++b) {
    p.q_len = std::max(p.q_len, p.seq_q_len(b));
    p.kv_len = std::max(p.kv_len, p.seq_kv_len(b));
  }
  p.q_total = in.total_q();
  return p;
}

void report_nonfinite(const ErrorStats& e, const std::string& what, std::FILE* text, Json& j) {
  if (e.nonfinite > 0)
    std::fprintf(text,
                 "check: %lld non-finite or missing values in %s where the reference differs, the first at "
                 "element %lld\n",
                 (long long)e.nonfinite, what.c_str(), (long long)e.first_nonfinite);
  if (e.nonfinite_matched > 0)
    std::fprintf(text, "check: %lld non-finite values in %s, in the same places as the reference's\n",
                 (long long)e.nonfinite_matched, what.c_str());
  j.add(what + "_nonfinite", (long long)e.nonfinite).add(what + "_nonfinite_matched", (long long)e.nonfinite_matched);
  if (e.nonfinite > 0) j.add(what + "_nonfinite_first", (long long)e.first_nonfinite);
}

int check_outputs(const AttentionParams<double>& p, const Options& opt, const CheckSettings& settings, io::DType dtype,
                  const Console& console, Json& j, const char* command) {
  const std::int64_t total_rows = p.q_total * p.heads_q;
  const double full_bytes = 8.0 * p.batch * p.heads_q * double(p.q_len) * double(p.kv_len);
  const bool sampled = check_samples(settings, full_bytes);
  const std::vector<QueryRow> rows = sample_query_rows(p, opt, sampled ? sample_size(settings) : total_rows);
  // The check's work, for its progress line: 4 D flops per visible pair of the rows checked.
  const KeyWindow window = KeyWindow::from(opt);
  double pairs = 0;
  for (const QueryRow& r : rows) pairs += double(window.keys_seen(r.i, p.seq_q_len(r.b), p.seq_kv_len(r.b)));
  const double flops = 4.0 * p.head_dim * pairs;
  std::optional<ProgressLine> line;
  if (progress_wanted(console.progress, console.quiet, flops))
    line.emplace(flops, console.progress, "check against the float64 textbook");
  Compared co, cl;  // o and lse
  std::vector<double> o_row(p.head_dim);
  double done = 0;
  for (std::size_t n = 0; n < rows.size(); ++n) {
    const QueryRow& r = rows[n];
    const double lse = reference_row(p, opt, r, o_row.data());
    co.add(p.o_ptr(r.b, r.i, r.h), p.o.data, o_row.data(), p.head_dim);
    cl.add(p.lse_ptr(r.b, r.i, r.h), p.lse.data, &lse, 1);
    if (line) {
      done += double(window.keys_seen(r.i, p.seq_q_len(r.b), p.seq_kv_len(r.b)));
      if (n % 64 == 63 || n + 1 == rows.size()) line->callback()(pairs > 0 ? done / pairs : double(n + 1) / rows.size());
    }
  }
  if (line) line->finish();
  const std::int64_t checked = static_cast<std::int64_t>(rows.size());
  const std::string how =
      sampled ? sample_description(checked, total_rows, "rows") : "all " + std::to_string(total_rows) + " rows";
  j.add("check_mode", sampled ? "sampled" : "full").add("checked_rows", (long long)checked);
  j.add("total_rows", (long long)total_rows);
  return check_verdict(co.stats(), cl.stats(), dtype, how, console.text(), j, command);
}

int check_verdict(const ErrorStats& eo, const ErrorStats& el, io::DType dtype, const std::string& how, std::FILE* text,
                  Json& j, const char* command) {
  std::fprintf(text, "check vs float64 reference, %s: max abs err %.3e, rel err %.3e, lse max abs err %.3e\n",
               how.c_str(), eo.max_abs, eo.rel, el.max_abs);
  report_nonfinite(eo, "o", text, j);
  report_nonfinite(el, "lse", text, j);
  const double tol = check_tolerance(dtype), lse_tol = check_lse_tolerance(dtype);
  const std::int64_t nonfinite = eo.nonfinite + el.nonfinite;
  const bool failed = nonfinite > 0 || !(eo.rel <= tol && el.max_abs <= lse_tol);
  j.add("max_abs_err", eo.max_abs).add("rel_err", eo.rel).add("lse_max_abs_err", el.max_abs);
  j.add("rel_err_bound", tol).add("lse_err_bound", lse_tol);
  j.add("nonfinite", (long long)nonfinite).add("check", failed ? "fail" : "pass");
  if (!failed) return 0;
  if (nonfinite > 0)
    std::fprintf(stderr, "kattn %s: --check failed: %lld non-finite values where the float64 reference differs\n",
                 command, (long long)nonfinite);
  else
    std::fprintf(stderr,
                 "kattn %s: --check failed: error above the %s bound against the float64 reference (o: %.3g "
                 "relative, lse: %.3g absolute)\n",
                 command, dtype_name(dtype), tol, lse_tol);
  return 3;
}

}  // namespace cli
}  // namespace kattn
