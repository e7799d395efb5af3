// --check of `kattn run`: the outputs against float64 textbook values computed on the same
// (rounded) inputs. Every row when the full reference fits in memory; otherwise, or when asked
// with --check-rows N, a sample of rows each computed exactly (kattn::reference_row): the first
// and last rows, every masked edge, and random rows up to N. Non-finite outputs fail the check
// unless the reference has the same non-finite values in the same places.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "args.hpp"
#include "batch_inputs.hpp"
#include "inputs.hpp"
#include "json.hpp"
#include "kattn/params.hpp"

namespace kattn {
namespace cli {

struct CheckSettings {
  bool enabled = false;
  std::int64_t rows = 0;  // --check-rows N: sample N rows; 0 = every row when the reference fits
};
// --check and --check-rows N (which implies --check).
CheckSettings read_check_settings(Args& args);

// The tested outputs o and lse (float64 copies) with the inputs they came from, as a problem
// whose q, k, v point at the inputs and o, lse at the outputs, in the layouts `kattn run` writes.
AttentionParams<double> host_params(const DenseInputs& in, const std::vector<double>& o,
                                    const std::vector<double>& lse);
AttentionParams<double> host_params(const BatchInputs& in, const std::vector<double>& o,
                                    const std::vector<double>& lse);

// The full reference's o and lse, in the layout of the outputs.
using FullReference = std::function<void(std::vector<double>& o, std::vector<double>& lse)>;

// Runs the check, prints its lines on `text` and records it in j (check, max_abs_err, rel_err,
// lse_max_abs_err, checked_rows, total_rows, nonfinite, ...). Returns the exit status: 0, or 3
// (with a line on standard error) when the check fails.
int check_outputs(const AttentionParams<double>& p, const Options& opt, const CheckSettings& settings, io::DType dtype,
                  const FullReference& full, std::FILE* text, Json& j, const char* command);

// The verdict on compared o and lse: prints the error line (`how` says what was checked) and the
// non-finite counts, records them in j; returns 0, or 3 with a line on standard error.
int check_verdict(const ErrorStats& eo, const ErrorStats& el, io::DType dtype, const std::string& how, std::FILE* text,
                  Json& j, const char* command);

// Prints and records the non-finite part of a comparison (see ErrorStats); `what` names the array.
void report_nonfinite(const ErrorStats& e, const std::string& what, std::FILE* text, Json& j);

}  // namespace cli
}  // namespace kattn
