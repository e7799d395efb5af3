// `kattn run` as one pipeline: inputs -> the call through kattn::attention (timed) -> report ->
// write -> check. What differs between the input kinds (dense, ragged or paged, block-sparse,
// cascade) is a RunKind, data the stages read; the stages are written once (cmd_run.cpp).
// `kattn grad` is the same pipeline with a backward (cmd_grad.cpp): the flags, the timed calls and
// the --repeat report below are both commands'.
#pragma once

#include <Kokkos_Core.hpp>

#include <cstdarg>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "args.hpp"
#include "console.hpp"
#include "json.hpp"
#include "kattn/io/npy.hpp"
#include "kattn/options.hpp"
#include "kattn/plan_splits.hpp"
#include "progress_line.hpp"
#include "run_check.hpp"
#include "timing.hpp"

namespace kattn {
namespace cli {

// The flags run's and grad's pipelines both read: --check and --check-rows, --json, --quiet and
// --progress, --repeat and --no-workspace.
struct PipelineFlags {
  CheckSettings check;
  Console console;
  Timing timing;
};
inline void read_pipeline_flags(Args& args, PipelineFlags& f) {
  f.check = read_check_settings(args);
  f.console = read_console(args);
  f.timing = read_timing(args);
}

// The flags of `run` besides the inputs and the variant, with every output path checked.
struct RunFlags : PipelineFlags {
  std::string algo;
  std::optional<std::string> out, lse, save_dir;
};

// o and lse of a run (float64 copies, in the layouts `run` writes), its timing and split plan.
struct Outputs {
  std::vector<double> o, lse;
  Timing timing;
  SplitPlan plan;
};

// printf into a string (the headings).
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2)))
#endif
inline std::string printed(const char* format, ...) {
  va_list args, again;
  va_start(args, format);
  va_copy(again, args);
  std::string s(static_cast<std::size_t>(std::vsnprintf(nullptr, 0, format, args)), '\0');
  std::vsnprintf(&s[0], s.size() + 1, format, again);
  va_end(again);
  va_end(args);
  return s;
}

// The shapes the headings name (run, grad, --dist): " B=1 Nq=128 Nk=128 Hq=8 Hkv=2 D=64" of dense
// inputs; " ragged batch of 4 sequences, 186 queries, 300 keys, Hq=4 Hkv=2 D=16" of a ragged batch,
// with its JSON fields (layout, batch, shape, shape_is).
inline std::string dense_heading(const DenseInputs& in) {
  return printed(" B=%lld Nq=%lld Nk=%lld Hq=%lld Hkv=%lld D=%lld", (long long)in.B, (long long)in.Nq, (long long)in.Nk,
                 (long long)in.Hq, (long long)in.Hkv, (long long)in.D);
}
inline std::string ragged_heading(const BatchInputs& in) {
  return printed(" ragged batch of %lld sequences, %lld queries, %lld keys, Hq=%lld Hkv=%lld D=%lld",
                 (long long)in.batch(), (long long)in.total_q(), (long long)in.kv_rows(), (long long)in.Hq,
                 (long long)in.Hkv, (long long)in.D);
}
inline void describe_ragged(Json& j, const BatchInputs& in) {
  j.add("layout", "ragged").add("batch", (long long)in.batch());
  j.add("shape", std::vector<long long>{in.batch(), in.total_q(), in.kv_rows(), in.Hq, in.Hkv, in.D});
  j.add("shape_is", "B,total_q,total_kv,Hq,Hkv,D");
}

// One input kind of a pipeline (Result: run's Outputs, grad's Gradients): how it is called,
// described, written and checked.
template <class Result>
struct PipelineKind {
  io::DType dtype = io::DType::f32;
  std::string heading;                              // the first line, after "kattn run: " or "kattn grad: "
  std::string detail;                               // lines printed after it (each ending in \n)
  double flops = 0;                                 // of one forward call (4 D per visible pair and head)
  std::function<Result()> call;                     // the timed calls
  std::function<void(Json&)> describe;              // the kind's JSON fields (layout, shape, ...)
  std::function<void(const Result&)> write;         // the outputs' files (--out and --lse, --dq, --dk, --dv)
  std::function<int(const Result&, Json&)> check;  // --check: the exit status
};

// A run's kind also says how its rate is reported.
struct RunKind : PipelineKind<Outputs> {
  const char* algo = "";  // the JSON's "algo" (the --algo run, or "cascade")
  std::string rate_note;  // after the GFLOP/s of the time line
  double kv_bytes = 0;    // K and V's bytes, for the read rate of decode-like runs
  bool decode = false;    // print the K+V read rate
};

// The stages after the report, run's and grad's: the files, --check (the exit status), the
// notice and the JSON.
template <class Result>
int write_and_check(const PipelineFlags& f, const PipelineKind<Result>& kind, const Result& result, Json& j) {
  kind.write(result);
  const int status = f.check.enabled ? kind.check(result, j) : 0;
  f.console.notice(j);
  f.console.finish(j);
  return status;
}

// A progress line for a call of `flops` work when the console wants one (progress_wanted), its
// callback in opt.progress (run's calls, grad's forward and backward).
inline void progress_into(std::optional<ProgressLine>& line, const Console& console, double flops, Options& opt) {
  if (!progress_wanted(console.progress, console.quiet, flops)) return;
  line.emplace(flops, console.progress);
  opt.progress = line->callback();
}

// Runs `call` (which fences) as the flags' timing says, with the progress line (when wanted) in
// opt.progress; returns the timing of the calls (run's calls, grad's backward).
template <class Call>
Timing timed_with_progress(const PipelineFlags& f, double flops, Options& opt, Call&& call) {
  std::optional<ProgressLine> line;
  progress_into(line, f.console, flops, opt);
  Timing timing = f.timing;
  const RepeatWorkspace kept(f.timing, opt);
  time_calls(timing, call, [&] {
    if (line) line->restart();
  });
  return timing;
}

// The time line's note on --repeat and the JSON's fields of it (nothing without --repeat).
inline void print_repeat(std::FILE* text, const Timing& t) {
  if (t.repeat > 0)
    std::fprintf(text, " (median of %d calls after a warm-up; min %.6f s, max %.6f s)", t.repeat, t.min(), t.max());
}
inline void add_repeat(Json& j, const Timing& t) {
  if (t.repeat > 0) j.add("repeat", t.repeat).add("seconds_min", t.min()).add("seconds_max", t.max());
}

// The stages after the inputs: heading, timed call, time line and JSON, --out/--lse, --check.
int run_pipeline(const RunFlags& f, const Options& opt, const RunKind& kind);

class BiasTensor;
struct DenseInputs;
// Dense inputs [B, N, H, D]; `bias`: opt's bias tensor (the host reference reads it).
RunKind dense_kind(const RunFlags& f, const Options& opt, const BiasTensor& bias, std::shared_ptr<const DenseInputs> in);
struct BatchInputs;
// --out and --lse of a ragged or paged batch: o [total_q, Hq, D] in its type, lse [total_q, Hq].
std::function<void(const Outputs&)> batch_writer(const RunFlags& f, std::shared_ptr<const BatchInputs> in);
// The kinds with files of their own (each reads its inputs from args, then args.finish()).
// --block-mask / --pattern over dense inputs (dense_kind's, with the mask).
RunKind block_sparse_kind(Args& args, const RunFlags& f, const Options& opt, const BiasTensor& bias);
// --cascade: a ragged batch of suffixes behind a shared prefix.
RunKind cascade_kind(Args& args, const RunFlags& f, const Options& opt);

}  // namespace cli
}  // namespace kattn
