// kattn plan: the split planner's decision for a decode or prefill problem on this machine's
// execution space (or on `--processors P` of another, e.g. 132 for an H100/H200's SMs).
#include <Kokkos_Core.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "inputs.hpp"
#include "console.hpp"
#include "json.hpp"
#include "kattn/plan_splits.hpp"
#include "kattn/errors.hpp"

namespace kattn {
namespace cli {
namespace {

const char* kPlanUsage =
    "usage: kattn plan (--batch B --kv-len N [--q-len N] | --kv-lens L,... [--q-lens L,...])\n"
    "                  --heads Q,KV --head-dim D [--dtype f32|f64] [--processors P]\n"
    "                  [--heads-per-team N] [--splits N] [--split-chunk N] [--block-q N] [--block-k N] [--json]\n"
    "Prints how split-KV attention cuts the keys: splits, keys per chunk, work units, for this build's\n"
    "execution space. --processors overrides its count (SMs on CUDA, threads on the host);\n"
    "--heads-per-team overrides how many KV heads one team takes (on the host as many as fit, fewer\n"
    "where a fixed split would leave threads idle; 1 on GPUs: --processors 132 --heads-per-team 1\n"
    "is an H100/H200's decision).\n";

// The plan for the problem `shape` gives (its dims only) with T storage.
template <class T>
SplitPlan plan_for(const AttentionParams<float>& shape, const Options& opt, const BatchLengths& lengths, int procs,
                   int heads_per_team) {
  AttentionParams<T> p;
  p.batch = shape.batch, p.heads_q = shape.heads_q, p.heads_kv = shape.heads_kv, p.head_dim = shape.head_dim;
  p.q_len = shape.q_len, p.kv_len = shape.kv_len;
  const Kokkos::DefaultExecutionSpace space;
  if (heads_per_team == 0 || opt.splits > 0 || opt.split_chunk > 0)
    return plan_splits(space, p, opt, lengths, procs);
  KATTN_REQUIRE(p.heads_kv % heads_per_team == 0, "--heads-per-team: expected a divisor of the ", p.heads_kv,
                " KV heads, got ", heads_per_team);
  const int P = procs > 0 ? procs : processors(space);
  SplitWork work = split_work(space, p, opt, lengths, P);
  work.head_groups = p.heads_kv / heads_per_team;
  return plan_splits(work, P);
}

}  // namespace

int cmd_plan(Args& args) {
  if (args.help(kPlanUsage)) return 0;
  const auto batch = args.integer("--batch", 1, INT32_MAX);
  const auto kv_len = args.integer("--kv-len", 0, std::int64_t(1) << 40);
  const auto q_len = args.integer("--q-len", 0, std::int64_t(1) << 40);
  const auto kv_lens = args.value("--kv-lens");
  const auto q_lens = args.value("--q-lens");
  const auto heads = args.integers("--heads", 2);
  const auto head_dim = args.integer("--head-dim", 1, 1 << 20);
  const auto dtype = args.value("--dtype").value_or("f32");
  const auto procs = args.integer("--processors", 1, 1 << 30);
  const auto heads_per_team = args.integer("--heads-per-team", 1, 1 << 20);
  const Console console = read_console(args);
  const Options opt = read_options(args);
  args.finish();
  validate(opt);
  KATTN_REQUIRE(heads.has_value(), "--heads: required (query heads, KV heads: --heads 64,8)");
  KATTN_REQUIRE(head_dim.has_value(), "--head-dim: required");
  KATTN_REQUIRE((*heads)[0] >= 1 && (*heads)[1] >= 1 && (*heads)[0] % (*heads)[1] == 0,
                "--heads: expected query heads a multiple of KV heads, both >= 1, got ", (*heads)[0], ",", (*heads)[1]);
  KATTN_REQUIRE(dtype == "f32" || dtype == "f64", "--dtype: expected f32 or f64, got '", dtype, "'");
  KATTN_REQUIRE(!(kv_lens && (batch || kv_len)), "--kv-lens: give either --kv-lens or --batch and --kv-len");
  KATTN_REQUIRE(!(q_lens && !kv_lens), "--q-lens: needs --kv-lens");
  KATTN_REQUIRE(!(q_len && kv_lens), "--q-len: with --kv-lens, give --q-lens");

  BatchLengths lengths;
  AttentionParams<float> p;
  p.heads_q = static_cast<int>((*heads)[0]);
  p.heads_kv = static_cast<int>((*heads)[1]);
  p.head_dim = static_cast<int>(*head_dim);
  if (kv_lens) {
    lengths.kv_len = parse_lengths(*kv_lens, "--kv-lens", std::int64_t(1) << 40);
    lengths.q_len = q_lens ? parse_lengths(*q_lens, "--q-lens", std::int64_t(1) << 40)
                           : std::vector<std::int64_t>(lengths.kv_len.size(), 1);
    KATTN_REQUIRE(lengths.q_len.size() == lengths.kv_len.size(), "--q-lens: expected ", lengths.kv_len.size(),
                  " lengths (one per sequence, as --kv-lens), got ", lengths.q_len.size());
    p.batch = static_cast<int>(lengths.kv_len.size());
    p.q_len = lengths.max_q();
    p.kv_len = lengths.max_kv();
  } else {
    KATTN_REQUIRE(batch && kv_len, "plan: give --batch B --kv-len N, or --kv-lens L,...");
    p.batch = static_cast<int>(*batch);
    p.q_len = q_len.value_or(1);
    p.kv_len = *kv_len;
  }
  const int P = static_cast<int>(procs.value_or(0));
  const int hpt = static_cast<int>(heads_per_team.value_or(0));
  const SplitPlan plan =
      dtype == "f32" ? plan_for<float>(p, opt, lengths, P, hpt) : plan_for<double>(p, opt, lengths, P, hpt);
  const std::string space = Kokkos::DefaultExecutionSpace::name();
  std::FILE* text = console.text();
  std::fprintf(text, "kattn plan: %d sequence%s, %s keys, %lld queries per sequence (the longest), Hq=%d Hkv=%d D=%d (%s)\n", p.batch,
              p.batch == 1 ? "" : "s",
              kv_lens ? ("up to " + std::to_string(p.kv_len)).c_str() : std::to_string(p.kv_len).c_str(),
              (long long)p.q_len, p.heads_q, p.heads_kv, p.head_dim, dtype.c_str());
  std::fprintf(text, "processors: %d (%s)\n", plan.processors,
              procs ? "--processors" : ("this machine's Kokkos::" + space).c_str());
  std::fprintf(text, "work units without splitting: %lld\n", (long long)plan.units_unsplit);
  std::fprintf(text, "plan: %d split%s", plan.splits, plan.splits == 1 ? "" : "s");
  if (plan.chunk > 0) std::fprintf(text, " of %lld keys", (long long)plan.chunk);
  std::fprintf(text, ", %lld work units: %s\n", (long long)plan.units, plan.reason.c_str());
  Json j;
  j.add("splits", plan.splits).add("chunk", (long long)plan.chunk).add("units", (long long)plan.units);
  j.add("units_unsplit", (long long)plan.units_unsplit).add("processors", plan.processors);
  j.add("space", space).add("reason", plan.reason);
  // The planner sees the threads Kokkos runs; say when that is fewer than the machine has.
  if (!procs) console.notice(j);
  console.finish(j);
  return 0;
}

}  // namespace cli
}  // namespace kattn
