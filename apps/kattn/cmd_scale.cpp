// kattn scale: scaling studies. Without --report or --model it measures one row at the current
// rank count (under mpirun; see scale_run.cpp); --report turns the CSVs of several runs into a
// table and an SVG figure (scale_plot.cpp); --model predicts time and efficiency up to
// many ranks from a per-rank throughput and a link bandwidth.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "args.hpp"
#include "commands.hpp"
#include "dist_commands.hpp"
#include "kattn/dist/scaling_model.hpp"
#include "kattn/errors.hpp"
#include "paths.hpp"
#include "scale_csv.hpp"
#include "scale_plot.hpp"

namespace kattn {
namespace cli {
namespace {

const char* kScaleUsage =
    "usage: mpirun -np P kattn scale [--study weak|strong] [--tokens N] [--dist ring|decode]\n"
    "                 [--batch B] [--heads HQ,HKV] [--dim D] [--queries NQ] [--dtype f32|f64]\n"
    "                 [--causal] [--zigzag] [--deterministic] [--chunk KEYS] [--repeat R] [--warmup W]\n"
    "                 [--nocomm-baseline] [--csv FILE] [--json]\n"
    "         weak: --tokens is per rank; strong: --tokens is the whole sequence (ring) or KV cache\n"
    "         (decode). Appends one row per timed repetition to --csv (and as many for the\n"
    "         comm-removed ring with --nocomm-baseline).\n"
    "       kattn scale --report A.csv[,B.csv...] [--table T.md] [--plot P.svg]\n"
    "       kattn scale --model [--dist ring|decode] [--study weak|strong] --tokens N [--heads HQ,HKV]\n"
    "                 [--dim D] [--batch B] [--queries NQ] [--dtype f32|f64] [--causal]\n"
    "                 (--tflops-per-rank F | --from-csv FILE) [--bandwidth BYTES_PER_S] [--latency S]\n"
    "                 [--mem-bandwidth BYTES_PER_S] [--max-ranks P] [--csv FILE]\n";

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

std::string fmt(const char* f, double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, x);
  return buf;
}

// ---- report -------------------------------------------------------------------------------

int scale_report(Args& args, const std::string& files) {
  const auto table_path = args.value("--table");
  const auto plot_path = args.value("--plot");
  args.finish();
  if (table_path) check_output_file("--table", *table_path);
  if (plot_path) check_output_file("--plot", *plot_path);
  std::vector<ScaleRow> rows;
  const std::vector<std::string> paths = split_list(files);
  KATTN_REQUIRE(!paths.empty(), "--report: expected one or more CSV files, comma-separated");
  for (const std::string& p : paths)
    for (ScaleRow& r : read_scale_csv(p)) rows.push_back(std::move(r));
  KATTN_REQUIRE(!rows.empty(), "--report: the CSV files hold no rows");
  const std::vector<ScaleStudy> studies = group_studies(rows);
  // One line per study and rank count: the median repetition, the spread of the times, and
  // efficiency and speedup at the median.
  std::ostringstream t;
  t << "| study | ranks | tokens | tokens/rank | seconds | compute s | exposed comm s | MB sent/rank | TFLOP/s/rank | "
       "efficiency | baseline | speedup | repetitions | seconds min | seconds max |\n";
  t << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|\n";
  std::size_t points = 0;
  for (const ScaleStudy& s : studies)
    for (const ScalePoint& p : s.points) {
      ++points;
      const ScaleRow& r = p.median_row();
      std::vector<double> seconds;
      for (const ScaleRow* x : p.rows) seconds.push_back(x->num("seconds"));
      const Spread time = spread_of(seconds);
      const std::string baseline = s.has_baseline() ? "1-rank" : r.str("baseline");
      t << "| " << s.label << " | " << r.str("ranks") << " | " << r.str("tokens") << " | " << r.str("tokens_per_rank")
        << " | " << fmt("%.4g", r.num("seconds")) << " | " << r.str("compute_seconds") << " | "
        << r.str("exposed_comm_seconds") << " | "
        << (r.str("bytes_sent_per_rank").empty() ? std::string("") : fmt("%.3f", r.num("bytes_sent_per_rank") / 1e6))
        << " | " << fmt("%.4g", r.num("tflops_per_rank")) << " | "
        << fmt("%.3f", spread_of(s.efficiencies(p)).median) << " | " << baseline << " | "
        << (s.has_baseline() ? fmt("%.3f", spread_of(s.speedups(p)).median) : std::string("")) << " | "
        << p.rows.size() << " | " << fmt("%.4g", time.min) << " | " << fmt("%.4g", time.max) << " |\n";
    }
  std::cout << t.str();
  if (table_path) {
    std::ofstream f(*table_path);
    KATTN_REQUIRE(f.good(), "--table ", *table_path, ": cannot open file for writing");
    f << t.str();
  }
  if (plot_path) {
    std::ofstream f(*plot_path);
    KATTN_REQUIRE(f.good(), "--plot ", *plot_path, ": cannot open file for writing");
    f << scaling_figure_svg(studies);
    std::cout << "plot: " << *plot_path << " (" << studies.size() << " studies, " << points << " points)\n";
  }
  return 0;
}

// ---- model --------------------------------------------------------------------------------

// The best local compute rate (FLOP/s per rank) among measured rows of an algorithm.
double measured_rate(const std::string& path, const std::string& algorithm) {
  double best = 0;
  for (const ScaleRow& r : read_scale_csv(path)) {
    if (r.str("algorithm") != algorithm) continue;
    const double compute = r.num("compute_seconds");
    if (compute > 0) best = std::max(best, r.num("tflops_per_rank") * 1e12 * r.num("seconds") / compute);
  }
  KATTN_REQUIRE(best > 0, "--from-csv ", path, ": no row of algorithm '", algorithm, "' with a compute time");
  return best;
}

int scale_model(Args& args) {
  const std::string mode = args.value("--dist").value_or("ring");
  KATTN_REQUIRE(mode == "ring" || mode == "decode", "--dist: expected ring or decode, got '", mode, "'");
  const std::string study = args.value("--study").value_or("weak");
  KATTN_REQUIRE(study == "weak" || study == "strong", "--study: expected weak or strong, got '", study, "'");
  const auto tokens = args.integer("--tokens", 1, std::int64_t(1) << 50);
  KATTN_REQUIRE(tokens.has_value(), "--tokens: required (per rank for weak scaling, in total for strong)");
  const auto heads = args.integers("--heads", 2).value_or(std::vector<std::int64_t>{1, 1});
  const int D = static_cast<int>(args.integer("--dim", 1, 1 << 16).value_or(64));
  const int B = static_cast<int>(args.integer("--batch", 1, 1 << 20).value_or(1));
  const int queries = static_cast<int>(args.integer("--queries", 1, 1 << 20).value_or(1));
  const std::string dtype = args.value("--dtype").value_or("f32");
  KATTN_REQUIRE(dtype == "f32" || dtype == "f64", "--dtype: expected f32 or f64, got '", dtype, "'");
  const bool causal = args.flag("--causal");
  const auto tflops = args.number("--tflops-per-rank");
  const auto from_csv = args.value("--from-csv");
  const double bw = args.number("--bandwidth").value_or(25e9);
  const double latency = args.number("--latency").value_or(2e-6);
  const double mem_bw = args.number("--mem-bandwidth").value_or(3.35e12);
  const int max_ranks = static_cast<int>(args.integer("--max-ranks", 1, 1 << 20).value_or(1024));
  const auto csv = args.value("--csv");
  args.finish();
  if (csv) check_output_file("--csv", *csv);
  KATTN_REQUIRE(heads[0] >= 1 && heads[1] >= 1 && heads[0] % heads[1] == 0,
                "--heads: expected HQ,HKV with HQ a multiple of HKV, got ", heads[0], ",", heads[1]);
  KATTN_REQUIRE(tflops.has_value() != from_csv.has_value(),
                "--tflops-per-rank: give the measured per-rank throughput, or --from-csv FILE to take it from a "
                "scaling CSV (one of the two)");
  const double rate = tflops ? *tflops * 1e12 : measured_rate(*from_csv, mode);
  KATTN_REQUIRE(rate > 0 && bw > 0 && latency >= 0 && mem_bw > 0,
                "--tflops-per-rank/--bandwidth/--mem-bandwidth: expected positive rates and a latency >= 0");
  const int bytes = dtype == "f32" ? 4 : 8;

  std::printf(
      "kattn scale --model: %s %s scaling, %s, B=%d Hq=%lld Hkv=%lld D=%d%s, %.4g TFLOP/s per rank, link "
      "%.4g GB/s, latency %.3g us%s\n",
      mode.c_str(), study.c_str(), dtype.c_str(), B, (long long)heads[0], (long long)heads[1], D,
      causal ? " causal (zigzag)" : "", rate / 1e12, bw / 1e9, latency * 1e6,
      mode == "decode" ? fmt(", memory %.4g GB/s per rank", mem_bw / 1e9).c_str() : "");
  if (mode == "ring")
    std::printf("%8s %14s %14s %14s %14s %12s %14s %10s %12s %s\n", "ranks", "tokens", "tokens/rank", "step comp s",
                "step xfer s", "seconds", "exposed comm s", "efficiency", "MB sent/rank", "hidden");
  else
    std::printf("%8s %14s %14s %14s %14s %12s %14s %10s %12s\n", "ranks", "context", "keys/rank", "local s", "reduce s",
                "seconds", "exposed comm s", "efficiency", "MB moved/rank");
  double overlap_tokens = 0;
  for (int P = 1; P <= max_ranks; P *= 2) {
    const std::int64_t N = study == "weak" ? *tokens * P : *tokens;
    ScaleRow row;
    row.field = {{"study", study},
                 {"ranks", std::to_string(P)},
                 {"tokens", std::to_string(N)},
                 {"tokens_per_rank", fmt("%.0f", double(N) / P)},
                 {"algorithm", mode + "-model"},
                 {"dtype", dtype},
                 {"batch", std::to_string(B)},
                 {"heads_q", std::to_string(heads[0])},
                 {"heads_kv", std::to_string(heads[1])},
                 {"dim", std::to_string(D)},
                 {"causal", causal ? "1" : "0"},
                 {"sharding", causal && mode == "ring" ? "zigzag" : "contiguous"},
                 {"baseline", "model"}};
    if (mode == "ring") {
      dist::RingModelInput in;
      in.tokens = N, in.ranks = P, in.batch = B, in.heads_q = int(heads[0]), in.heads_kv = int(heads[1]);
      in.head_dim = D, in.bytes_per_value = bytes, in.causal = causal;
      in.flops_per_second = rate, in.link_bytes_per_second = bw, in.latency_seconds = latency;
      const dist::RingModel m = dist::model_ring(in);
      std::printf("%8d %14lld %14.0f %14.4g %14.4g %12.4g %14.4g %10.3f %12.4g %s\n", P, (long long)N,
                  m.tokens_per_rank, m.step_compute_seconds, P > 1 ? m.step_transfer_seconds : 0.0, m.seconds,
                  m.exposed_comm_seconds, m.efficiency, m.bytes_per_rank / 1e6, m.hidden ? "yes" : "no");
      row.field["seconds"] = fmt("%.6g", m.seconds);
      row.field["compute_seconds"] = fmt("%.6g", m.compute_seconds);
      row.field["exposed_comm_seconds"] = fmt("%.6g", m.exposed_comm_seconds);
      row.field["bytes_sent_per_rank"] = fmt("%.0f", m.bytes_per_rank);
      row.field["model_bytes_per_rank"] = fmt("%.0f", m.bytes_per_rank);
      row.field["tflops_per_rank"] = fmt("%.6g", m.flops_per_rank / m.seconds / 1e12);
      row.field["efficiency"] = fmt("%.6f", m.efficiency);
      overlap_tokens = m.overlap_tokens_per_rank;
    } else {
      dist::DecodeModelInput in;
      in.context = N, in.ranks = P, in.batch = B, in.queries = queries, in.heads_q = int(heads[0]);
      in.heads_kv = int(heads[1]), in.head_dim = D, in.bytes_per_value = bytes, in.flops_per_second = rate;
      in.memory_bytes_per_second = mem_bw, in.link_bytes_per_second = bw, in.latency_seconds = latency;
      const dist::DecodeModel m = dist::model_decode(in);
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
    if (csv) append_scale_csv(*csv, {row});
  }
  if (mode == "ring")
    std::printf(
        "overlap condition: a step's K/V transfer hides behind its compute from %.0f tokens per rank "
        "(4 D Hq B n^2%s / F >= latency + 2 B n Hkv D bytes / bandwidth)\n",
        overlap_tokens, causal ? " / 2" : "");
  else
    std::printf(
        "decode moves D + 1 numbers per query row per round (ceil(log2 P) rounds of recursive doubling), "
        "whatever the context length\n");
  return 0;
}

}  // namespace

int cmd_scale(Args& args) {
  if (args.flag("--help")) {
    std::cout << kScaleUsage;
    return 0;
  }
  if (auto files = args.value("--report")) return scale_report(args, *files);
  if (args.flag("--model")) return scale_model(args);
  return scale_measure(args);
}

}  // namespace cli
}  // namespace kattn
