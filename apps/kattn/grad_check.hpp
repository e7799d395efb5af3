// --check of `kattn grad` (dense and ragged): dq, dk, dv against float64 textbook values on the
// same (rounded) inputs. The full textbook backward when its two [B, Hq, Nq, Nk] arrays fit in
// 1 GiB; otherwise, or when asked with --check-rows N, a sample each computed exactly
// (kattn/reference_backward_rows.hpp): N query rows of dq and N key rows of dk and dv, the first and
// last, every masked edge, the rest at random. Non-finite gradients fail the check unless the
// reference has them in the same places.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "inputs.hpp"
#include "json.hpp"
#include "kattn/backward_params.hpp"
#include "kattn/io/npy.hpp"
#include "kattn/options.hpp"
#include "run_check.hpp"

namespace kattn {
namespace cli {

// The gradients under test and the inputs they came from (host, float64), in the layouts
// `kattn grad` writes: q, k, v and dO through p.fwd / p.dout, the tested gradients at p.dq, p.dk, p.dv
// (read only, though BackwardParams holds them as T*).
struct GradientsUnderTest {
  BackwardParams<double> p;
  std::int64_t dq_size = 0, dkv_size = 0;  // elements of dq, and of each of dk and dv
};
GradientsUnderTest host_gradients(const AttentionParams<double>& inputs, const std::vector<double>& dout,
                                  const std::vector<double>& dq, const std::vector<double>& dk,
                                  const std::vector<double>& dv);

// The full textbook backward's dq, dk, dv in the layouts of the tested ones.
using FullGradients = std::function<void(std::vector<double>& dq, std::vector<double>& dk, std::vector<double>& dv)>;

// Whether --check will sample (refused up front where a sample cannot be taken: under a block mask).
bool gradient_check_samples(const AttentionParams<double>& inputs, const CheckSettings& settings, bool block_mask);

// The verdict on dq, dk, dv compared with the textbook's (e: their errors; how_q, how_k: how
// their rows were chosen, empty for every row): a line each on `text`, the errors in j (dq/dk/dv
// errors, then what `describe` adds, then max_abs_err, rel_err, nonfinite, check). Returns 0, or 3
// with a line on standard error.
int gradient_verdict(const ErrorStats (&e)[3], const std::string& how_q, const std::string& how_k, io::DType dtype,
                     std::FILE* text, Json& j, const std::function<void(Json&)>& describe = {});

// Runs the check, prints its lines on `text`, records it in j (check_mode, checked_rows,
// checked_key_rows, dq/dk/dv errors, nonfinite, check). Returns 0, or 3 with a line on standard error.
int check_gradients(const GradientsUnderTest& g, const Options& opt, const CheckSettings& settings, io::DType dtype,
                    bool block_mask, const FullGradients& full, std::FILE* text, Json& j);

}  // namespace cli
}  // namespace kattn
