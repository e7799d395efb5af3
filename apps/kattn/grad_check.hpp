// --check of `kattn grad` (dense and ragged): dq, dk, dv (and dsinks, dbias) against float64 textbook values on the
// same (rounded) inputs. The full textbook backward when its two [B, Hq, Nq, Nk] arrays fit in
// 1 GiB; otherwise, or when asked with --check-rows N, a sample each computed exactly
// (kattn/reference_backward_rows.hpp): N query rows of dq and N key rows of dk and dv, the first and
// last, every masked edge, the rest at random. Non-finite gradients fail the check unless the
// reference has them in the same places.
#pragma once

#include <cstdio>
#include <functional>
#include <memory>
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

// Gradients of one run, or of the textbook, in the layouts `kattn grad` writes: dq, dk, dv, and
// dsinks [Hq] (with --sinks) and dbias (the bias's shape, with --dbias); empty: not computed.
struct GradientSet {
  std::vector<double> dq, dk, dv, dsinks, dbias;
};

// The gradients under test and the inputs they came from (host, float64): q, k, v and dO through
// p.fwd / p.dout (dO widened now, held here and by every copy), the tested dq, dk, dv at p.dq,
// p.dk, p.dv (read only, though BackwardParams holds them as T*), all of them in *tested.
struct GradientsUnderTest {
  BackwardParams<double> p;
  const GradientSet* tested = nullptr;
  std::shared_ptr<const std::vector<double>> dout;
};
GradientsUnderTest host_gradients(const AttentionParams<double>& inputs, const StoredValues& dout,
                                  const GradientSet& tested);

// The full textbook backward's gradients in the layouts of the tested ones (dsinks, dbias where
// it computes them).
using FullGradients = std::function<GradientSet()>;

// The textbook backward of dense inputs in float64 on the same (rounded) inputs, in their bnhd
// order: under a block mask on the host (opt's bias in host memory then), with dbias (not under a
// block mask) when `dbias_of` holds the bias.
class BiasTensor;
GradientSet dense_textbook_backward(const DenseInputs& in, const StoredValues& dout, const Options& opt,
                                    const BlockMask* mask, const BiasTensor* dbias_of);

// Whether --check will sample (refused up front where a sample cannot be taken: under a block mask).
bool gradient_check_samples(const AttentionParams<double>& inputs, const CheckSettings& settings, bool block_mask);

// One compared gradient: its name, its errors, and how its rows were chosen (empty: every row).
struct GradientError {
  std::string name;
  ErrorStats e;
  std::string how;
};
// dq, dk, dv of `tested` against `ref`, then dsinks and dbias where both hold them (every element).
std::vector<GradientError> compare_gradients(const GradientSet& tested, const GradientSet& ref);

// The verdict on compared gradients: a line each on `text` (and one naming a tested gradient
// `unchecked` says the check could not compare), the errors in j (<name>_max_abs_err,
// <name>_rel_err, then what `describe` adds, then max_abs_err, rel_err, nonfinite, check), one
// error rule for all. Returns 0, or 3 with a line on standard error.
int gradient_verdict(const std::vector<GradientError>& e, io::DType dtype, std::FILE* text, Json& j,
                     const std::function<void(Json&)>& describe = {}, const std::string& unchecked = "");

// Runs the check, prints its lines on `text`, records it in j (check_mode, checked_rows,
// checked_key_rows, the gradients' errors, nonfinite, check): every gradient against the full
// textbook's, or sampled rows of dq, dk and dv (dsinks and dbias need every row: not compared then).
// Returns 0, or 3 with a line on standard error.
int check_gradients(const GradientsUnderTest& g, const Options& opt, const CheckSettings& settings, io::DType dtype,
                    bool block_mask, const FullGradients& full, std::FILE* text, Json& j);

}  // namespace cli
}  // namespace kattn
