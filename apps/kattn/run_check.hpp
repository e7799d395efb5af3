// --check of `kattn run`: the outputs against float64 textbook values computed on the same
// (rounded) inputs, each checked row computed exactly (kattn::reference_row). Every row when the
// problem's score matrix would fit in 1 GiB (a bound on the check's time); otherwise, or when
// asked with --check-rows N, a sample: the first and last rows, every masked edge, and random
// rows up to N. Non-finite outputs fail the check
// unless the reference has the same non-finite values in the same places.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "args.hpp"
#include "batch_inputs.hpp"
#include "console.hpp"
#include "inputs.hpp"
#include "json.hpp"
#include "kattn/core/attention_params.hpp"
#include "kattn/reference_rows.hpp"

namespace kattn {
namespace cli {

struct CheckSettings {
  bool enabled = false;
  std::int64_t rows = 0;  // --check-rows N: sample N rows; 0 = every row when the reference fits
};
// --check and --check-rows N (which implies --check).
CheckSettings read_check_settings(Args& args);

// The verdict's bound on the relative error of o: 1e-4 (f32) or 1e-10 (f64), far looser than the
// test suite's, so only a broken build fails; for bf16 and f16 twice the type's unit roundoff u
// (2^-8, 2^-11): o computed in float and rounded once to the type is within u of the float64 value
// in norm plus float's own error (at most the f32 bound, 1e-4, well under u). Measured at D = 128,
// N = 8192: correct runs err 1.7e-3 (bf16) and 2.1e-4 (f16); one dropped 64-key tile errs 9e-2.
double check_tolerance(io::DType dtype);
// The bound on lse's absolute error: lse is computed and stored in float for 16-bit runs.
double check_lse_tolerance(io::DType dtype);
// The seed of the random rows of a sample: the same rows on every run.
constexpr std::uint64_t kCheckSampleSeed = 0x6b61747;
// Whether to check a sample of rows: asked for, or the problem's score matrix (full_bytes) past 1 GiB.
bool check_samples(const CheckSettings& settings, double full_bytes);
// The rows a sample holds: --check-rows N, else 64.
std::int64_t sample_size(const CheckSettings& settings);
// About `wanted` query rows of p: every masked edge, then random ones (kattn::rows_to_check); every
// row when wanted covers them all.
std::vector<QueryRow> sample_query_rows(const AttentionParams<double>& p, const Options& opt, std::int64_t wanted);
// "checked 64 of 65536 <rows> exactly in float64 (first and last, every masked edge, the rest at random)".
std::string sample_description(std::int64_t checked, std::int64_t total, const char* rows);

// A problem whose q, k, v point at float64 copies of the inputs, held here (and by every copy).
struct HostParams : AttentionParams<double> {
  std::shared_ptr<const std::vector<double>> widened[3];
};
// The tested outputs o and lse (float64 copies) with the inputs they came from, as a problem
// whose q, k, v point at the inputs (widened to float64 now; without `values`, the shape alone and
// no values) and o, lse at the outputs, in the layouts `kattn run` writes.
HostParams host_params(const DenseInputs& in, const std::vector<double>& o, const std::vector<double>& lse,
                       bool values = true);
HostParams host_params(const BatchInputs& in, const std::vector<double>& o, const std::vector<double>& lse,
                       bool values = true);

// Runs the check, each checked row computed by the float64 textbook (reference_row): every row, or
// a sample (check_samples). A long check shows its progress line on standard error as the console
// says (progress_wanted). Prints its lines on `text` and records it in j (check, max_abs_err,
// rel_err, lse_max_abs_err, checked_rows, total_rows, nonfinite, ...). Returns the exit status: 0,
// or 3 (with a line on standard error) when the check fails.
int check_outputs(const AttentionParams<double>& p, const Options& opt, const CheckSettings& settings, io::DType dtype,
                  const Console& console, Json& j, const char* command);

// The verdict on compared o and lse: prints the error line (`how` says what was checked) and the
// non-finite counts, records them in j; returns 0, or 3 with a line on standard error.
int check_verdict(const ErrorStats& eo, const ErrorStats& el, io::DType dtype, const std::string& how, std::FILE* text,
                  Json& j, const char* command);

// Tested and reference values side by side, with where each tested value sits in its array, so
// that the first non-finite one is reported at its position in the array, not in the list.
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

// Prints and records the non-finite part of a comparison (see ErrorStats); `what` names the array.
void report_nonfinite(const ErrorStats& e, const std::string& what, std::FILE* text, Json& j);

}  // namespace cli
}  // namespace kattn
