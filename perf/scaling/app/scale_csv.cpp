#include "scale_csv.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "args.hpp"
#include "kattn/errors.hpp"

namespace kattn {
namespace cli {

const std::vector<std::string>& scale_columns() {
  static const std::vector<std::string> cols = {"study",
                                                "ranks",
                                                "tokens",
                                                "tokens_per_rank",
                                                "algorithm",
                                                "dtype",
                                                "batch",
                                                "heads_q",
                                                "heads_kv",
                                                "dim",
                                                "causal",
                                                "sharding",
                                                "seconds",
                                                "compute_seconds",
                                                "compute_seconds_min",
                                                "exposed_comm_seconds",
                                                "bytes_sent_per_rank",
                                                "model_bytes_per_rank",
                                                "tflops_per_rank",
                                                "efficiency",
                                                "baseline",
                                                "compute_cpu_seconds",
                                                "compute_cpu_seconds_min",
                                                "repetition",
                                                "threads_per_rank",
                                                "load_avg",
                                                "cpu_seconds",
                                                "efficiency_cpu"};
  return cols;
}

const std::string& ScaleRow::str(const std::string& column) const {
  static const std::string empty;
  auto it = field.find(column);
  return it == field.end() ? empty : it->second;
}

double ScaleRow::num(const std::string& column) const {
  const std::string& s = str(column);
  KATTN_REQUIRE(!s.empty(), "scale csv: column '", column, "' is missing");
  return parse_number(s, "scale csv column '" + column + "'");
}

namespace {

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> out;
  std::stringstream ss(line);
  std::string cell;
  while (std::getline(ss, cell, ',')) out.push_back(cell);
  if (!line.empty() && line.back() == ',') out.emplace_back();
  return out;
}

}  // namespace

std::vector<ScaleRow> read_scale_csv(const std::string& path) {
  std::ifstream f(path);
  KATTN_REQUIRE(f.good(), "--csv ", path, ": cannot open file");
  std::string line;
  KATTN_REQUIRE(static_cast<bool>(std::getline(f, line)), "--csv ", path, ": empty file, expected a header line");
  if (!line.empty() && line.back() == '\r') line.pop_back();
  const std::vector<std::string> header = split(line);
  for (const char* need : {"ranks", "algorithm", "seconds", "tflops_per_rank", "efficiency"}) {
    bool found = false;
    for (const auto& h : header) found = found || h == need;
    KATTN_REQUIRE(found, "--csv ", path, ": the header has no column '", need, "'");
  }
  std::vector<ScaleRow> rows;
  for (int n = 2; std::getline(f, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::vector<std::string> cells = split(line);
    KATTN_REQUIRE(cells.size() == header.size(), "--csv ", path, ":", n, ": expected ", header.size(),
                  " comma-separated cells, got ", cells.size());
    ScaleRow r;
    for (std::size_t i = 0; i < header.size(); ++i) r.field[header[i]] = cells[i];
    const double ranks = r.num("ranks");
    KATTN_REQUIRE(ranks >= 1 && ranks == std::floor(ranks), "--csv ", path, ":", n,
                  ": expected a rank count >= 1, got '", r.str("ranks"), "'");
    r.num("seconds");
    r.num("efficiency");
    rows.push_back(std::move(r));
  }
  return rows;
}

void append_scale_csv(const std::string& path, const std::vector<ScaleRow>& rows) {
  bool fresh = true;
  {
    std::ifstream f(path);
    fresh = !f.good() || f.peek() == std::ifstream::traits_type::eof();
  }
  std::ofstream f(path, std::ios::app);
  KATTN_REQUIRE(f.good(), "--csv ", path, ": cannot open file for appending");
  const auto& cols = scale_columns();
  if (fresh)
    for (std::size_t i = 0; i < cols.size(); ++i) f << cols[i] << (i + 1 < cols.size() ? "," : "\n");
  for (const ScaleRow& row : rows)
    for (std::size_t i = 0; i < cols.size(); ++i) f << row.str(cols[i]) << (i + 1 < cols.size() ? "," : "\n");
  KATTN_REQUIRE(f.good(), "--csv ", path, ": write failed");
}

std::string study_key(const ScaleRow& r) {
  const bool weak = r.str("study") == "weak";
  return r.str("study") + "|" + r.str("algorithm") + "|" + r.str("dtype") + "|" + r.str("batch") + "|" +
         r.str("heads_q") + "|" + r.str("heads_kv") + "|" + r.str("dim") + "|" + r.str("causal") + "|" +
         r.str("sharding") + "|" + (weak ? r.str("tokens_per_rank") : r.str("tokens"));
}

std::string study_label(const ScaleRow& r) {
  const bool weak = r.str("study") == "weak";
  std::string s = r.str("study") + " " + r.str("algorithm") + " " + r.str("dtype");
  if (r.str("causal") == "1") s += " causal";
  if (!r.str("sharding").empty() && r.str("sharding") != "contiguous") s += " " + r.str("sharding");
  s += weak ? ", " + r.str("tokens_per_rank") + " tokens/rank" : ", " + r.str("tokens") + " tokens";
  return s;
}

Spread spread_of(std::vector<double> v) {
  Spread s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  s.median = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  s.min = v.front();
  s.max = v.back();
  return s;
}

const ScaleRow& ScalePoint::median_row() const {
  std::vector<const ScaleRow*> by_time = rows;
  std::stable_sort(by_time.begin(), by_time.end(),
                   [](const ScaleRow* a, const ScaleRow* b) { return a->num("seconds") < b->num("seconds"); });
  return *by_time[(by_time.size() - 1) / 2];
}

namespace {

// Median per-rank throughput of the one-rank rows of a study; 0 when there are none.
double one_rank_throughput(const std::string& key, const std::vector<ScaleRow>& rows) {
  std::vector<double> tflops;
  for (const ScaleRow& r : rows)
    if (r.num("ranks") == 1 && r.num("tflops_per_rank") > 0 && study_key(r) == key)
      tflops.push_back(r.num("tflops_per_rank"));
  return spread_of(tflops).median;
}

// Median CPU throughput of the one-rank rows of a study; 0 when none has a CPU time.
double one_rank_cpu_throughput(const std::string& key, const std::vector<ScaleRow>& rows) {
  std::vector<double> x;
  for (const ScaleRow& r : rows)
    if (r.num("ranks") == 1 && cpu_throughput(r) > 0 && study_key(r) == key) x.push_back(cpu_throughput(r));
  return spread_of(x).median;
}

}  // namespace

double cpu_throughput(const ScaleRow& row) {
  if (row.str("cpu_seconds").empty()) return 0;
  const double cpu = row.num("cpu_seconds");
  return cpu > 0 ? row.num("tflops_per_rank") * row.num("ranks") * row.num("seconds") / cpu : 0;
}

std::vector<double> ScaleStudy::cpu_efficiencies(const ScalePoint& p) const {
  std::vector<double> out;
  if (one_rank_cpu_throughput <= 0) return out;
  for (const ScaleRow* r : p.rows)
    if (cpu_throughput(*r) > 0) out.push_back(cpu_throughput(*r) / one_rank_cpu_throughput);
  return out;
}

std::vector<double> ScaleStudy::efficiencies(const ScalePoint& p) const {
  std::vector<double> out;
  for (const ScaleRow* r : p.rows)
    out.push_back(has_baseline() ? r->num("tflops_per_rank") / one_rank_throughput : r->num("efficiency"));
  return out;
}

std::vector<double> ScaleStudy::speedups(const ScalePoint& p) const {
  std::vector<double> out = efficiencies(p);
  for (double& e : out) e *= p.ranks;
  return out;
}

std::vector<ScaleStudy> group_studies(const std::vector<ScaleRow>& rows) {
  std::vector<ScaleStudy> studies;
  std::map<std::string, std::size_t> index;
  for (const ScaleRow& r : rows) {
    const std::string key = study_key(r);
    auto it = index.find(key);
    if (it == index.end()) {
      it = index.emplace(key, studies.size()).first;
      ScaleStudy s;
      s.key = key;
      s.label = study_label(r);
      s.weak = r.str("study") == "weak";
      s.one_rank_throughput = one_rank_throughput(key, rows);
      s.one_rank_cpu_throughput = one_rank_cpu_throughput(key, rows);
      studies.push_back(std::move(s));
    }
    std::vector<ScalePoint>& points = studies[it->second].points;
    const double ranks = r.num("ranks");
    auto at = std::find_if(points.begin(), points.end(), [&](const ScalePoint& p) { return p.ranks >= ranks; });
    if (at == points.end() || at->ranks != ranks) at = points.insert(at, ScalePoint{ranks, {}});
    at->rows.push_back(&r);
  }
  return studies;
}

double efficiency_against_one_rank(const ScaleRow& row, const std::vector<ScaleRow>& rows, std::string* baseline) {
  const double one = one_rank_throughput(study_key(row), rows);
  if (one > 0) {
    if (baseline) *baseline = "1-rank";
    return row.num("tflops_per_rank") / one;
  }
  if (baseline) *baseline = row.str("baseline");
  return row.num("efficiency");
}

double cpu_efficiency_against_one_rank(const ScaleRow& row, const std::vector<ScaleRow>& rows) {
  const double one = one_rank_cpu_throughput(study_key(row), rows);
  return one > 0 ? cpu_throughput(row) / one : 0;
}

}  // namespace cli
}  // namespace kattn
