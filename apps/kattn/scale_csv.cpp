#include "scale_csv.hpp"

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
                                                "compute_cpu_seconds_min"};
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
  KATTN_REQUIRE(f.good(), "--report ", path, ": cannot open file");
  std::string line;
  KATTN_REQUIRE(static_cast<bool>(std::getline(f, line)), "--report ", path, ": empty file, expected a header line");
  if (!line.empty() && line.back() == '\r') line.pop_back();
  const std::vector<std::string> header = split(line);
  for (const char* need : {"ranks", "algorithm", "seconds", "tflops_per_rank", "efficiency"}) {
    bool found = false;
    for (const auto& h : header) found = found || h == need;
    KATTN_REQUIRE(found, "--report ", path, ": the header has no column '", need, "'");
  }
  std::vector<ScaleRow> rows;
  for (int n = 2; std::getline(f, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const std::vector<std::string> cells = split(line);
    KATTN_REQUIRE(cells.size() == header.size(), "--report ", path, ":", n, ": expected ", header.size(),
                  " comma-separated cells, got ", cells.size());
    ScaleRow r;
    for (std::size_t i = 0; i < header.size(); ++i) r.field[header[i]] = cells[i];
    r.num("ranks");
    r.num("seconds");
    r.num("efficiency");
    rows.push_back(std::move(r));
  }
  return rows;
}

void append_scale_csv(const std::string& path, const ScaleRow& row) {
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

double efficiency_against_one_rank(const ScaleRow& row, const std::vector<ScaleRow>& rows, std::string* baseline) {
  const std::string key = study_key(row);
  for (const ScaleRow& r : rows)
    if (study_key(r) == key && r.num("ranks") == 1 && r.num("tflops_per_rank") > 0) {
      if (baseline) *baseline = "1-rank";
      return row.num("tflops_per_rank") / r.num("tflops_per_rank");
    }
  if (baseline) *baseline = row.str("baseline");
  return row.num("efficiency");
}

}  // namespace cli
}  // namespace kattn
