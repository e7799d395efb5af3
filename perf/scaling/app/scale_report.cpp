// kattn-scale report: the CSVs of several measured runs as one table (median repetition, spread,
// efficiency and speedup per study and rank count) and an SVG figure (scale_plot.cpp).
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
#include "kattn/errors.hpp"
#include "paths.hpp"
#include "scale_commands.hpp"
#include "scale_csv.hpp"
#include "scale_plot.hpp"

namespace kattn {
namespace cli {
namespace {

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

}  // namespace

static const char* const kUsage =
    "usage: kattn-scale report --csv A.csv[,B.csv...] [--table T.md] [--plot P.svg]\n";

int scale_report(Args& args) {
  if (args.help(kUsage)) return 0;
  const auto files = args.value("--csv");
  KATTN_REQUIRE(files, "--csv: expected the CSV files of the measured runs, comma-separated");
  const auto table_path = args.value("--table");
  const auto plot_path = args.value("--plot");
  args.finish();
  if (table_path) check_output_file("--table", *table_path);
  if (plot_path) check_output_file("--plot", *plot_path);
  std::vector<ScaleRow> rows;
  const std::vector<std::string> paths = split_list(*files);
  KATTN_REQUIRE(!paths.empty(), "--csv: expected one or more CSV files, comma-separated");
  for (const std::string& p : paths)
    for (ScaleRow& r : read_scale_csv(p)) rows.push_back(std::move(r));
  KATTN_REQUIRE(!rows.empty(), "--csv: the CSV files hold no rows");
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

}  // namespace cli
}  // namespace kattn
