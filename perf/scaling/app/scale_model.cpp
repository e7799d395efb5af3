// kattn-scale model: time and efficiency from one rank up to --max-ranks, from the kernel's rate
// against the tokens per rank (given, a curve, or measured rows of a scaling CSV), a link measured
// by `kattn-scale pingpong` or stated, and the cluster's parameters (links between nodes, ranks
// per node, per-step overheads). --anchor NAME runs a published setup with its hardware's
// parameters and prints the published efficiency beside the model's. --dist grid models the grid
// scheme at its fastest shape (or --grid R,C) beside the ring; --crossover NAME runs a published
// 2D scheme's hardware from 8 to --max-ranks ranks (scale_model_grid.cpp).
#include "scale_commands.hpp"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "model/head_sharding_model.hpp"
#include "model/scaling_anchors.hpp"
#include "model/scaling_calibration.hpp"
#include "model/scaling_model.hpp"
#include "kattn/errors.hpp"
#include "paths.hpp"
#include "scale_csv.hpp"
#include "scale_model_grid.hpp"

namespace kattn {
namespace cli {
namespace {

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

int bytes_of(const std::string& dtype) {
  if (dtype == "f64") return 8;
  if (dtype == "f32") return 4;
  KATTN_REQUIRE(dtype == "bf16" || dtype == "f16", "--dtype: expected f32, f64, bf16 or f16, got '", dtype, "'");
  return 2;
}

// --rate-curve TOKENS:TFLOPS,TOKENS:TFLOPS,...
scaling::KernelRate parse_rate_curve(const std::string& text) {
  std::vector<scaling::RatePoint> points;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto colon = item.find(':');
    KATTN_REQUIRE(colon != std::string::npos, "--rate-curve: expected TOKENS:TFLOPS pairs, got '", item, "'");
    const double tokens = parse_number(item.substr(0, colon), "--rate-curve tokens");
    const double tflops = parse_number(item.substr(colon + 1), "--rate-curve TFLOP/s");
    KATTN_REQUIRE(tokens > 0 && tflops > 0, "--rate-curve: expected positive tokens and TFLOP/s, got '", item, "'");
    points.push_back({tokens, tflops * 1e12});
  }
  KATTN_REQUIRE(!points.empty(), "--rate-curve: expected TOKENS:TFLOPS pairs");
  return scaling::KernelRate(points);
}

// The sequence length a row's kernel calls work on: the shard (ring, decode), the whole sequence
// (Ulysses), a ring group's share (hybrid over U ranks: "hybrid-uU").
double kernel_tokens(const ScaleRow& r) {
  const std::string a = r.str("algorithm");
  const double ranks = r.num("ranks"), tokens = r.num("tokens");
  if (a.rfind("ulysses", 0) == 0) return tokens;
  if (a.rfind("hybrid-u", 0) == 0) return tokens * std::min(ranks, std::stod(a.substr(8))) / ranks;
  return r.num("tokens_per_rank");
}

// The kernel's rate per rank at each measured size of a scaling CSV (kernel_tokens): the work over
// the compute's process CPU time (times the threads per rank), the median over the rows of a size.
// CPU time, not wall time: on a loaded machine the wall clock counts other jobs' turns. Rows of
// older CSVs without CPU time give their wall-clock compute time.
scaling::KernelRate rate_from_csv(const std::string& path, const std::string& algorithm) {
  std::map<double, std::vector<double>> by_size;
  for (const ScaleRow& r : read_scale_csv(path)) {
    if (r.str("algorithm") != algorithm || r.str("compute_seconds").empty()) continue;
    const bool has_cpu = !r.str("compute_cpu_seconds").empty();
    const double cpu = r.num(has_cpu ? "compute_cpu_seconds" : "compute_seconds");
    const double threads = !has_cpu || r.str("threads_per_rank").empty() ? 1.0 : r.num("threads_per_rank");
    const double flops = r.num("tflops_per_rank") * 1e12 * r.num("seconds");
    if (cpu > 0 && flops > 0) by_size[kernel_tokens(r)].push_back(flops / cpu * threads);
  }
  KATTN_REQUIRE(!by_size.empty(), "--from-csv ", path, ": no row of algorithm '", algorithm, "' with a compute time");
  std::vector<scaling::RatePoint> points;
  for (const auto& [tokens, rates] : by_size) points.push_back({tokens, spread_of(rates).median});
  return scaling::KernelRate(points);
}

void print_ring_header() {
  std::printf("%8s %14s %12s %12s %12s %12s %12s %14s %10s %12s %6s %s\n", "ranks", "tokens", "tokens/rank",
              "step comp s", "step xfer s", "step merge s", "seconds", "exposed comm s", "efficiency", "MB sent/rank",
              "link", "hidden");
}

void print_ring_row(int P, double N, const scaling::RingModel& m) {
  std::printf("%8d %14.0f %12.0f %12.4g %12.4g %12.4g %12.4g %14.4g %10.3f %12.4g %6s %s\n", P, N, m.tokens_per_rank,
              m.step_compute_seconds, m.step_transfer_seconds, m.step_merge_seconds, m.seconds, m.exposed_comm_seconds,
              m.efficiency, m.bytes_per_rank / 1e6, P == 1 ? "-" : (m.crosses_nodes ? "inter" : "intra"),
              m.hidden ? "yes" : "no");
}

void describe_cluster(const scaling::KernelRate& rate, const scaling::Cluster& c, double backward_ratio) {
  std::string rates;
  for (const scaling::RatePoint& p : rate.points()) {
    if (!rates.empty()) rates += ", ";
    if (!rate.measured_at_one_size()) rates += fmt("%.0f tokens/rank: ", p.tokens_per_rank);
    rates += fmt("%.4g TFLOP/s", p.flops_per_second / 1e12);
  }
  std::printf("kernel rate per rank: %s\n", rates.c_str());
  std::printf(
      "links: intra-node %.4g GB/s, %.3g us; inter-node %s; ranks per node %s; step overhead %.3g us; "
      "merges: %.3g passes at %.4g GB/s; backward/forward %.3g\n",
      c.intra.bytes_per_second / 1e9, c.intra.latency_seconds * 1e6,
      c.inter.bytes_per_second > 0
          ? (fmt("%.4g GB/s, ", c.inter.bytes_per_second / 1e9) + fmt("%.3g us", c.inter.latency_seconds * 1e6)).c_str()
          : "none",
      c.ranks_per_node > 0 ? std::to_string(c.ranks_per_node).c_str() : "all", c.step_overhead_seconds * 1e6,
      c.merge_passes, c.memory_bytes_per_second / 1e9, backward_ratio);
}

void print_heads_header() {
  std::printf("%8s %9s %14s %12s %12s %12s %12s %14s %10s %12s %6s %6s\n", "ranks", "U x R", "tokens", "tokens/rank",
              "exchange s", "attention s", "seconds", "exposed comm s", "efficiency", "MB sent/rank", "a2a", "ring");
}

void print_heads_row(int P, double N, const scaling::HeadShardedModel& m) {
  const std::string grid = std::to_string(m.ulysses_ranks) + " x " + std::to_string(m.ring_ranks);
  std::printf("%8d %9s %14.0f %12.0f %12.4g %12.4g %12.4g %14.4g %10.3f %12.4g %6s %6s\n", P, grid.c_str(), N,
              m.tokens_per_rank, m.exchange_seconds, m.ring.seconds, m.seconds, m.exposed_comm_seconds, m.efficiency,
              m.bytes_per_rank / 1e6, m.ulysses_ranks == 1 ? "-" : (m.exchange_crosses_nodes ? "inter" : "intra"),
              m.ring_ranks == 1 ? "-" : (m.ring.crosses_nodes ? "inter" : "intra"));
}

int run_anchor(const std::string& name, int max_ranks) {
  for (const scaling::ScalingAnchor& a : scaling::scaling_anchors()) {
    if (a.name != name) continue;
    std::printf("kattn-scale model --anchor %s: %s\n", a.name.c_str(), a.source.c_str());
    std::printf("ring, %lld tokens, %d ranks, Hq=%d Hkv=%d D=%d, %d-byte values%s\n", (long long)a.input.tokens,
                a.input.ranks, a.input.heads_q, a.input.heads_kv, a.input.head_dim, a.input.bytes_per_value,
                a.input.causal ? (a.input.zigzag ? ", causal (zigzag)" : ", causal (contiguous)") : "");
    describe_cluster(a.input.rate, a.input.cluster, a.input.backward_ratio);
    const scaling::RingModel at = scaling::model_ring(a.input);
    std::printf("anchor: published efficiency %.3f, model %.3f (%+.1f points)\n", a.published_efficiency, at.efficiency,
                100 * (at.efficiency - a.published_efficiency));
    // Weak scaling from there: the same tokens per rank on more ranks.
    print_ring_header();
    const double n = double(a.input.tokens) / a.input.ranks;
    for (int P = 1; P <= max_ranks; P *= 2) {
      scaling::RingModelInput in = a.input;
      in.ranks = P, in.tokens = std::int64_t(n) * P;
      print_ring_row(P, double(in.tokens), scaling::model_ring(in));
    }
    return 0;
  }
  std::string names;
  for (const scaling::ScalingAnchor& a : scaling::scaling_anchors()) names += (names.empty() ? "" : ", ") + a.name;
  KATTN_REQUIRE(false, "--anchor: expected one of ", names, ", got '", name, "'");
  return 2;
}

// The measured study a model run can be compared with: the rows of `compare` with the model
// row's study, algorithm, dtype, shape and fixed size (the sharding too where it changes the work;
// head sharding alone is indifferent to it).
const ScaleStudy* matching_study(const std::vector<ScaleStudy>& studies, const ScaleRow& model,
                                 const std::string& algorithm) {
  const ScaleStudy* found = nullptr;
  for (const ScaleStudy& st : studies) {
    const ScaleRow& r = *st.points.front().rows.front();
    bool same = r.str("algorithm") == algorithm;
    for (const char* col : {"study", "dtype", "batch", "heads_q", "heads_kv", "dim", "causal"})
      same = same && r.str(col) == model.str(col);
    const char* size = model.str("study") == "weak" ? "tokens_per_rank" : "tokens";
    same = same && r.num(size) == model.num(size);
    if (!same) continue;
    if (r.str("sharding") == model.str("sharding")) return &st;
    if (algorithm.rfind("ulysses", 0) == 0) found = &st;
  }
  return found;
}

}  // namespace

static const char* const kUsage =
    "usage: kattn-scale model [--dist ring|decode|ulysses|hybrid|grid] [--ulysses-size U] [--grid R,C]\n"
    "                 [--study weak|strong]\n"
    "                 --tokens N [--heads HQ,HKV]\n"
    "                 [--dim D] [--batch B] [--queries NQ] [--dtype f32|f64|bf16|f16] [--causal]\n"
    "                 [--sharding zigzag|contiguous]\n"
    "                 (--tflops-per-rank F | --rate-curve TOKENS:TFLOPS,... | --from-csv FILE)\n"
    "                 [--bandwidth BYTES_PER_S] [--latency S] (intra-node; from kattn-scale pingpong)\n"
    "                 [--ranks-per-node K --inter-bandwidth BYTES_PER_S --inter-latency S]\n"
    "                 [--step-overhead S] [--mem-bandwidth BYTES_PER_S] [--merge-passes X]\n"
    "                 [--backward-ratio R] [--max-ranks P] [--csv FILE] [--compare STUDY.csv]\n"
    "       kattn-scale model --anchor ring-flash-attn-fwd|ring-flash-attn-fwd-bwd|meta-cp-1m [--max-ranks P]\n"
    "       kattn-scale model --crossover all|attention2d-a100|attention2d-h100|mesh-attention-256\n"
    "                 [--max-ranks P] [--markdown]\n"
    "         --dist grid: every shape R x C = P is modelled and the fastest kept (the shape kattn-scale\n"
    "         recommends; the library's own default is the most square); --grid R,C models that shape at\n"
    "         R x C ranks only.\n";

int scale_model(Args& args) {
  if (args.help(kUsage)) return 0;
  const int max_ranks = static_cast<int>(args.integer("--max-ranks", 1, 1 << 20).value_or(1024));
  if (auto anchor = args.value("--anchor")) {
    args.finish();
    return run_anchor(*anchor, max_ranks);
  }
  if (auto crossover = args.value("--crossover")) {
    const bool markdown = args.flag("--markdown");
    args.finish();
    return run_crossover(*crossover, max_ranks, markdown);
  }
  const std::string mode = args.value("--dist").value_or("ring");
  KATTN_REQUIRE(mode == "ring" || mode == "decode" || mode == "ulysses" || mode == "hybrid" || mode == "grid",
                "--dist: expected ring, decode, ulysses, hybrid or grid, got '", mode, "'");
  const auto grid_text = args.value("--grid");
  KATTN_REQUIRE(!grid_text || mode == "grid", "--grid: only for --dist grid");
  const std::optional<scaling::GridShape> forced =
      grid_text ? std::optional<scaling::GridShape>(parse_grid_shape(*grid_text)) : std::nullopt;
  const bool heads_sharded = mode == "ulysses" || mode == "hybrid";
  // Hybrid: U ranks share heads (a node's worth, typically); fewer ranks than U are one group.
  const int ulysses_size = static_cast<int>(args.integer("--ulysses-size", 1, 1 << 20).value_or(0));
  KATTN_REQUIRE(mode == "hybrid" ? ulysses_size > 0 : ulysses_size == 0,
                mode == "hybrid" ? "--ulysses-size: required with --dist hybrid (the ranks of one head-sharding group)"
                                 : "--ulysses-size: only for --dist hybrid");
  if (mode == "decode")  // one reduction, no ring steps: these describe the ring
    refuse_out_of_mode(args, {{"--ranks-per-node", "--dist ring"},
                              {"--inter-bandwidth", "--dist ring"},
                              {"--inter-latency", "--dist ring"},
                              {"--step-overhead", "--dist ring"},
                              {"--merge-passes", "--dist ring"},
                              {"--backward-ratio", "--dist ring"},
                              {"--sharding", "--dist ring"}});
  const std::string study = args.value("--study").value_or("weak");
  KATTN_REQUIRE(study == "weak" || study == "strong", "--study: expected weak or strong, got '", study, "'");
  const auto tokens = args.integer("--tokens", 1, std::int64_t(1) << 50);
  KATTN_REQUIRE(tokens.has_value(), "--tokens: required (per rank for weak scaling, in total for strong)");
  const auto heads = args.integers("--heads", 2).value_or(std::vector<std::int64_t>{1, 1});
  const int D = static_cast<int>(args.integer("--dim", 1, 1 << 16).value_or(64));
  const int B = static_cast<int>(args.integer("--batch", 1, 1 << 20).value_or(1));
  const int queries = static_cast<int>(args.integer("--queries", 1, 1 << 20).value_or(1));
  const std::string dtype = args.value("--dtype").value_or("f32");
  const int bytes = bytes_of(dtype);
  const bool causal = args.flag("--causal");
  const std::string sharding = args.value("--sharding").value_or(causal ? "zigzag" : "contiguous");
  KATTN_REQUIRE(sharding == "zigzag" || sharding == "contiguous", "--sharding: expected zigzag or contiguous, got '",
                sharding, "'");
  const auto tflops = args.number("--tflops-per-rank");
  const auto curve = args.value("--rate-curve");
  const auto from_csv = args.value("--from-csv");
  scaling::Cluster cl;
  cl.intra = {args.number("--bandwidth").value_or(25e9), args.number("--latency").value_or(2e-6)};
  cl.inter = {args.number("--inter-bandwidth").value_or(0), args.number("--inter-latency").value_or(0)};
  cl.ranks_per_node = static_cast<int>(args.integer("--ranks-per-node", 0, 1 << 20).value_or(0));
  cl.step_overhead_seconds = args.number("--step-overhead").value_or(0);
  cl.memory_bytes_per_second = args.number("--mem-bandwidth").value_or(3.35e12);
  cl.merge_passes = args.number("--merge-passes").value_or(3);
  const double backward_ratio = args.number("--backward-ratio").value_or(0);
  const auto csv = args.value("--csv");
  const auto compare = args.value("--compare");
  args.finish();
  if (csv) check_output_file("--csv", *csv);
  const std::vector<ScaleRow> measured = compare ? read_scale_csv(*compare) : std::vector<ScaleRow>{};
  const std::vector<ScaleStudy> measured_studies = group_studies(measured);
  std::map<int, double> model_efficiency;  // by rank count
  ScaleRow model_row;                      // the shape and fixed size of the model's rows
  KATTN_REQUIRE(heads[0] >= 1 && heads[1] >= 1 && heads[0] % heads[1] == 0,
                "--heads: expected HQ,HKV with HQ a multiple of HKV, got ", heads[0], ",", heads[1]);
  KATTN_REQUIRE(int(tflops.has_value()) + int(curve.has_value()) + int(from_csv.has_value()) == 1,
                "--tflops-per-rank: give the kernel's rate per rank: --tflops-per-rank F, --rate-curve "
                "TOKENS:TFLOPS,... or --from-csv FILE (measured rows of a scaling CSV), one of the three");
  KATTN_REQUIRE(cl.intra.bytes_per_second > 0 && cl.intra.latency_seconds >= 0 && cl.memory_bytes_per_second > 0,
                "--bandwidth/--latency/--mem-bandwidth: expected positive rates and a latency >= 0");
  KATTN_REQUIRE(cl.ranks_per_node == 0 || (cl.inter.bytes_per_second > 0 && cl.inter.latency_seconds >= 0),
                "--ranks-per-node: needs --inter-bandwidth BYTES_PER_S (and --inter-latency S) for the links between "
                "nodes");
  KATTN_REQUIRE(cl.step_overhead_seconds >= 0 && cl.merge_passes >= 0 && backward_ratio >= 0,
                "--step-overhead/--merge-passes/--backward-ratio: expected values >= 0");
  KATTN_REQUIRE(mode != "grid" || backward_ratio == 0,
                "--backward-ratio: not for --dist grid (the model has the grid's forward only)");
  KATTN_REQUIRE(mode != "grid" || !causal || sharding == "zigzag",
                "--sharding: --dist grid with --causal needs zigzag (contiguous shards leave the grid unbalanced)");
  KATTN_REQUIRE(mode != "hybrid" || heads[0] % ulysses_size == 0, "--ulysses-size: expected a divisor of the ",
                heads[0], " query heads (each member of a group computes Hq / U of them), got ", ulysses_size);
  // The model places groups of U consecutive ranks on nodes of --ranks-per-node: whole groups in a
  // node, or whole nodes in a group.
  KATTN_REQUIRE(mode != "hybrid" || cl.ranks_per_node == 0 || cl.ranks_per_node % ulysses_size == 0 ||
                    ulysses_size % cl.ranks_per_node == 0,
                "--ulysses-size: expected a divisor or a multiple of the ", cl.ranks_per_node,
                " ranks per node (groups that straddle nodes unevenly are not modelled), got ", ulysses_size);
  const std::string algorithm = mode == "hybrid" ? "hybrid-u" + std::to_string(ulysses_size) : mode;
  const scaling::KernelRate rate = tflops  ? scaling::KernelRate(*tflops * 1e12)
                                : curve ? parse_rate_curve(*curve)
                                        : rate_from_csv(*from_csv, algorithm);

  std::printf("kattn-scale model: %s %s scaling, %s, B=%d Hq=%lld Hkv=%lld D=%d%s%s\n", mode.c_str(), study.c_str(),
              dtype.c_str(), B, (long long)heads[0], (long long)heads[1], D,
              causal ? (" causal (" + sharding + ")").c_str() : "",
              backward_ratio > 0 ? ", forward + backward" : ", forward");
  if (mode == "ring" || heads_sharded || mode == "grid") {
    describe_cluster(rate, cl, backward_ratio);
    if (heads_sharded)
      print_heads_header();
    else if (mode == "grid")
      print_grid_header();
    else
      print_ring_header();
  } else {
    std::printf(
        "kernel %.4g TFLOP/s per rank (at %.0f keys per rank), link %.4g GB/s, latency %.3g us, memory %.4g GB/s\n",
        rate.at(double(*tokens)) / 1e12, double(*tokens), cl.intra.bytes_per_second / 1e9,
        cl.intra.latency_seconds * 1e6, cl.memory_bytes_per_second / 1e9);
    std::printf("%8s %14s %14s %14s %14s %12s %14s %10s %12s\n", "ranks", "context", "keys/rank", "local s", "reduce s",
                "seconds", "exposed comm s", "efficiency", "MB moved/rank");
  }
  double overlap_tokens = 0;
  bool extrapolated = false;
  int heads_limit = 0;       // Ulysses: the first rank count the query heads do not divide over
  std::vector<int> skipped;  // hybrid below U: rank counts (one group) the heads do not divide over
  std::vector<scaling::GridModel> shapes;  // grid: every shape at the last rank count
  scaling::GridModel grid_pick;
  // Powers of two; hybrid also at U, then U times powers of two (the grid needs U | P).
  const auto next = [&](int P) {
    return mode == "hybrid" && P < ulysses_size && 2 * P > ulysses_size ? ulysses_size : 2 * P;
  };
  // --grid R,C: its one rank count only.
  const int first_ranks = forced ? forced->rows * forced->cols : 1, last_ranks = forced ? first_ranks : max_ranks;
  for (int P = first_ranks; P <= last_ranks; P = next(P)) {
    const int U = mode == "ulysses" ? P : std::min(ulysses_size, P);
    if (heads_sharded && heads[0] % U != 0) {
      if (mode == "hybrid") {  // only below U (U itself divides the heads): the larger grids follow
        skipped.push_back(P);
        continue;
      }
      heads_limit = P;
      break;
    }
    const std::int64_t N = study == "weak" ? *tokens * P : *tokens;
    if (!heads_sharded) extrapolated = extrapolated || rate.extrapolates(double(N) / P);
    ScaleRow row;
    row.field = {{"study", study},
                 {"ranks", std::to_string(P)},
                 {"tokens", std::to_string(N)},
                 {"tokens_per_rank", fmt("%.0f", double(N) / P)},
                 {"algorithm", algorithm + "-model"},
                 {"dtype", dtype},
                 {"batch", std::to_string(B)},
                 {"heads_q", std::to_string(heads[0])},
                 {"heads_kv", std::to_string(heads[1])},
                 {"dim", std::to_string(D)},
                 {"causal", causal ? "1" : "0"},
                 {"sharding", mode == "decode" ? "contiguous" : sharding},
                 {"baseline", "model"}};
    scaling::RingModelInput in;
    in.tokens = N, in.ranks = P, in.batch = B, in.heads_q = int(heads[0]), in.heads_kv = int(heads[1]);
    in.head_dim = D, in.bytes_per_value = bytes, in.causal = causal, in.zigzag = sharding == "zigzag";
    in.rate = rate, in.cluster = cl, in.backward_ratio = backward_ratio;
    in.baseline_tokens = study == "strong" ? double(N) : 0.0;
    if (heads_sharded) {
      const scaling::HeadShardedModel m = scaling::model_head_sharded(in, U);
      // The kernel calls work on a ring group's share of the sequence.
      extrapolated = extrapolated || rate.extrapolates(double(N) / m.ring_ranks);
      print_heads_row(P, double(N), m);
      row.field["seconds"] = fmt("%.6g", m.seconds);
      row.field["compute_seconds"] = fmt("%.6g", m.ring.compute_seconds);
      row.field["exposed_comm_seconds"] = fmt("%.6g", m.exposed_comm_seconds);
      row.field["bytes_sent_per_rank"] = fmt("%.0f", m.bytes_per_rank);
      row.field["model_bytes_per_rank"] = fmt("%.0f", m.bytes_per_rank);
      row.field["tflops_per_rank"] = fmt("%.6g", m.flops_per_rank * (1 + backward_ratio) / m.seconds / 1e12);
      row.field["efficiency"] = fmt("%.6f", m.efficiency);
    } else if (mode == "grid") {
      const scaling::RingModel ring = scaling::model_ring(in);
      std::vector<scaling::GridModel> all;
      const scaling::GridModel m = forced ? scaling::model_grid(in, *forced) : scaling::best_grid(in, &all);
      print_grid_row(P, double(N), m, ring);
      if (!forced) shapes = all;
      grid_pick = m;
      row.field["seconds"] = fmt("%.6g", m.seconds);
      row.field["compute_seconds"] = fmt("%.6g", m.compute_seconds);
      row.field["exposed_comm_seconds"] = fmt("%.6g", m.exposed_comm_seconds);
      row.field["bytes_sent_per_rank"] = fmt("%.0f", m.bytes_per_rank);
      row.field["model_bytes_per_rank"] = fmt("%.0f", m.bytes_per_rank);
      row.field["tflops_per_rank"] = fmt("%.6g", m.flops_per_rank / m.seconds / 1e12);
      row.field["efficiency"] = fmt("%.6f", m.efficiency);
    } else if (mode == "ring") {
      const scaling::RingModel m = scaling::model_ring(in);
      print_ring_row(P, double(N), m);
      row.field["seconds"] = fmt("%.6g", m.seconds);
      row.field["compute_seconds"] = fmt("%.6g", m.compute_seconds);
      row.field["exposed_comm_seconds"] = fmt("%.6g", m.exposed_comm_seconds);
      row.field["bytes_sent_per_rank"] = fmt("%.0f", m.bytes_per_rank);
      row.field["model_bytes_per_rank"] = fmt("%.0f", m.bytes_per_rank);
      row.field["tflops_per_rank"] = fmt("%.6g", m.flops_per_rank * (1 + backward_ratio) / m.seconds / 1e12);
      row.field["efficiency"] = fmt("%.6f", m.efficiency);
      overlap_tokens = m.overlap_tokens_per_rank;
    } else {
      scaling::DecodeModelInput in;
      in.context = N, in.ranks = P, in.batch = B, in.queries = queries, in.heads_q = int(heads[0]);
      in.heads_kv = int(heads[1]), in.head_dim = D, in.bytes_per_value = bytes;
      in.flops_per_second = rate.at(double(N) / P);
      in.memory_bytes_per_second = cl.memory_bytes_per_second, in.link_bytes_per_second = cl.intra.bytes_per_second;
      in.latency_seconds = cl.intra.latency_seconds;
      const scaling::DecodeModel m = scaling::model_decode(in);
      std::printf("%8d %14lld %14.0f %14.4g %14.4g %12.4g %14.4g %10.3f %12.4g\n", P, (long long)N, double(N) / P,
                  m.local_seconds, m.reduce_seconds, m.seconds, m.reduce_seconds, m.efficiency, m.bytes_per_rank / 1e6);
      row.field["seconds"] = fmt("%.6g", m.seconds);
      row.field["compute_seconds"] = fmt("%.6g", m.local_seconds);
      row.field["exposed_comm_seconds"] = fmt("%.6g", m.reduce_seconds);
      row.field["bytes_sent_per_rank"] = fmt("%.0f", m.bytes_per_rank);
      row.field["model_bytes_per_rank"] = fmt("%.0f", m.bytes_per_rank);
      const double flops = 4.0 * D * heads[0] * B * queries * double(N) / P;
      row.field["tflops_per_rank"] = fmt("%.6g", flops / m.seconds / 1e12);
      row.field["efficiency"] = fmt("%.6f", m.efficiency);
    }
    model_efficiency[P] = row.num("efficiency");
    model_row = row;
    if (csv) append_scale_csv(*csv, {row});
  }
  if (heads_sharded) {
    std::printf(
        "the all-to-alls run before and after the attention, none hidden behind it; the attention inside is the ring "
        "model over the R groups (R = 1: one call over the whole sequence)\n");
    if (heads_limit > 0)
      std::printf("stops at %d ranks: %lld query heads do not divide over %d ranks sharing them\n", heads_limit,
                  (long long)heads[0], heads_limit);
    for (int P : skipped)
      std::printf("no row at %d ranks: %lld query heads do not divide over one group of %d\n", P, (long long)heads[0],
                  P);
  } else if (mode == "grid") {
    print_grid_shapes(shapes, grid_pick);
    std::printf(
        "the grid posts every input before its first kernel and sends each block's rows home as it finishes; "
        "ring columns: the ring model on the same cluster; speedup: ring s / grid s\n");
  } else if (mode == "ring") {
    std::printf(
        "overlap condition: a step's K/V transfer hides behind its work (kernel, merge, overhead) from %.0f tokens "
        "per rank\n",
        overlap_tokens);
  } else {
    std::printf(
        "decode moves D + 1 numbers per query row per round (ceil(log2 P) rounds of recursive doubling), "
        "whatever the context length\n");
  }
  if (compare) {
    // Each side against its own one-rank point: the measured rows' efficiency is against the
    // one-rank run (which pays what a call costs besides the kernel), the model's against the bare
    // kernel rate.
    // (Forward + backward: the rows of `kattn-scale measure --backward`.)
    const std::string measured_algorithm = algorithm + (backward_ratio > 0 ? "-fwd-bwd" : "");
    const ScaleStudy* st =
        model_efficiency.count(1) ? matching_study(measured_studies, model_row, measured_algorithm) : nullptr;
    KATTN_REQUIRE(st && st->has_baseline(), "--compare ", *compare, ": no measured study of algorithm '",
                  measured_algorithm, "' with this study, dtype, shape and fixed size and a one-rank point");
    std::printf("against %s (%s), each side relative to its one-rank point:\n", compare->c_str(), st->label.c_str());
    std::printf("%8s %14s %14s %10s %14s %12s\n", "ranks", "measured wall", "measured CPU", "model", "points (CPU)",
                "repetitions");
    for (const ScalePoint& pt : st->points) {
      const int P = static_cast<int>(pt.ranks);
      if (!model_efficiency.count(P)) continue;
      const double wall = spread_of(st->efficiencies(pt)).median, model = model_efficiency[P] / model_efficiency[1];
      const std::vector<double> cpu = st->cpu_efficiencies(pt);
      const double cpu_median = cpu.empty() ? 0.0 : spread_of(cpu).median;
      std::printf("%8d %14.3f %14s %10.3f %14s %12zu\n", P, wall, cpu.empty() ? "-" : fmt("%.3f", cpu_median).c_str(),
                  model, cpu.empty() ? "-" : fmt("%+.1f", 100 * (model - cpu_median)).c_str(), pt.rows.size());
    }
  }
  if (extrapolated)
    std::printf(
        "note: some sizes lie outside the measured kernel rates (%.0f to %.0f tokens per rank); the nearest "
        "measured rate was used\n",
        rate.points().front().tokens_per_rank, rate.points().back().tokens_per_rank);
  return 0;
}

}  // namespace cli
}  // namespace kattn
