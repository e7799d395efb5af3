// kattn scale: scaling studies. Without --report, --model or --pingpong it measures one row at the
// current rank count (under mpirun; see scale_run.cpp); --pingpong measures the link between two
// ranks (scale_pingpong.cpp); --report turns the CSVs of several runs into a table and an SVG figure
// (scale_plot.cpp); --model predicts time and efficiency up to many ranks (scale_model.cpp).
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
#include "kattn/errors.hpp"
#include "paths.hpp"
#include "scale_csv.hpp"
#include "scale_model.hpp"
#include "scale_plot.hpp"

namespace kattn {
namespace cli {
namespace {

const char* kScaleUsage =
    "usage: mpirun -np P kattn scale [--study weak|strong] [--tokens N] [--dist ring|decode|ulysses|hybrid]\n"
    "                 [--ulysses-size U] [--batch B] [--heads HQ,HKV] [--dim D] [--queries NQ]\n"
    "                 [--dtype f32|f64|bf16|f16]\n"
    "                 [--causal] [--zigzag] [--deterministic] [--chunk KEYS] [--repeat R] [--warmup W]\n"
    "                 [--nocomm-baseline] [--backward] [--no-workspace] [--csv FILE] [--json]\n"
    "         weak: --tokens is per rank; strong: --tokens is the whole sequence (ring, ulysses,\n"
    "         hybrid) or KV cache (decode). Hybrid: groups of U ranks share heads (fewer ranks: one\n"
    "         group). --backward: each repetition is a forward and its backward. The calls share one\n"
    "         kattn::Workspace; --no-workspace: each allocates its own buffers (rows NAME-no-workspace).\n"
    "         Appends one row per timed repetition to --csv (and as many for the comm-removed ring\n"
    "         with --nocomm-baseline).\n"
    "       kattn scale --report A.csv[,B.csv...] [--table T.md] [--plot P.svg]\n"
    "       kattn scale --model [--dist ring|decode|ulysses|hybrid] [--ulysses-size U] [--study weak|strong]\n"
    "                 --tokens N [--heads HQ,HKV]\n"
    "                 [--dim D] [--batch B] [--queries NQ] [--dtype f32|f64|bf16|f16] [--causal]\n"
    "                 [--sharding zigzag|contiguous]\n"
    "                 (--tflops-per-rank F | --rate-curve TOKENS:TFLOPS,... | --from-csv FILE)\n"
    "                 [--bandwidth BYTES_PER_S] [--latency S] (intra-node; from --pingpong)\n"
    "                 [--ranks-per-node K --inter-bandwidth BYTES_PER_S --inter-latency S]\n"
    "                 [--step-overhead S] [--mem-bandwidth BYTES_PER_S] [--merge-passes X]\n"
    "                 [--backward-ratio R] [--max-ranks P] [--csv FILE] [--compare STUDY.csv]\n"
    "       kattn scale --model --anchor ring-flash-attn-fwd|ring-flash-attn-fwd-bwd|meta-cp-1m [--max-ranks P]\n"
    "       mpirun -np 2 kattn scale --pingpong [--both-ways] [--sizes BYTES,...] [--repeat R] [--json]\n";

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
       "efficiency | baseline | speedup | repetitions | seconds min | seconds max | efficiency (CPU) | threads/rank | "
       "load |\n";
  t << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|\n";
  std::size_t points = 0;
  for (const ScaleStudy& s : studies)
    for (const ScalePoint& p : s.points) {
      ++points;
      const ScaleRow& r = p.median_row();
      std::vector<double> seconds;
      for (const ScaleRow* x : p.rows) seconds.push_back(x->num("seconds"));
      const Spread time = spread_of(seconds);
      const std::string baseline = s.has_baseline() ? "1-rank" : r.str("baseline");
      const std::vector<double> cpu = s.cpu_efficiencies(p);
      const std::string cpu_efficiency = cpu.empty() ? "" : fmt("%.3f", spread_of(cpu).median);
      t << "| " << s.label << " | " << r.str("ranks") << " | " << r.str("tokens") << " | " << r.str("tokens_per_rank")
        << " | " << fmt("%.4g", r.num("seconds")) << " | " << r.str("compute_seconds") << " | "
        << r.str("exposed_comm_seconds") << " | "
        << (r.str("bytes_sent_per_rank").empty() ? std::string("") : fmt("%.3f", r.num("bytes_sent_per_rank") / 1e6))
        << " | " << fmt("%.4g", r.num("tflops_per_rank")) << " | " << fmt("%.3f", spread_of(s.efficiencies(p)).median)
        << " | " << baseline << " | "
        << (s.has_baseline() ? fmt("%.3f", spread_of(s.speedups(p)).median) : std::string("")) << " | " << p.rows.size()
        << " | " << fmt("%.4g", time.min) << " | " << fmt("%.4g", time.max) << " | " << cpu_efficiency << " | "
        << r.str("threads_per_rank") << " | " << r.str("load_avg") << " |\n";
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

}  // namespace

int cmd_scale(Args& args) {
  if (args.flag("--help")) {
    std::cout << kScaleUsage;
    return 0;
  }
  if (auto files = args.value("--report")) return scale_report(args, *files);
  if (args.flag("--model")) return scale_model(args);
  if (args.flag("--pingpong")) return scale_pingpong(args);
  return scale_measure(args);
}

}  // namespace cli
}  // namespace kattn
