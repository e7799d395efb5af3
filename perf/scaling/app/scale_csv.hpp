// The CSV of scaling studies: one row per timed repetition of a `kattn-scale measure` run, appended;
// read back by the report, which groups the rows into studies and points.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace kattn {
namespace cli {

// Columns, in file order.
const std::vector<std::string>& scale_columns();

struct ScaleRow {
  std::map<std::string, std::string> field;
  const std::string& str(const std::string& column) const;
  double num(const std::string& column) const;
};

// Rows of a scaling CSV (header line first; columns found by name, so older files with fewer
// columns still read: a file of one row per run reads as runs of one repetition). Throws
// kattn::Error naming the file and line for malformed input.
std::vector<ScaleRow> read_scale_csv(const std::string& path);

// Appends rows, writing the header first when the file is new or empty.
void append_scale_csv(const std::string& path, const std::vector<ScaleRow>& rows);

// What makes rows the same study at different rank counts: study, algorithm, dtype, shape,
// variant and the fixed size (tokens per rank for weak scaling, tokens for strong).
std::string study_key(const ScaleRow& row);
// A short human label of a study, for legends and tables.
std::string study_label(const ScaleRow& row);

// The median, smallest and largest of some values (the repetitions of one point).
struct Spread {
  double median = 0, min = 0, max = 0;
};
Spread spread_of(std::vector<double> values);

// One study at one rank count: every repetition of every run found, in file order.
struct ScalePoint {
  double ranks = 0;
  std::vector<const ScaleRow*> rows;
  // The repetition of median time (the faster of the two middle ones for an even count).
  const ScaleRow& median_row() const;
};

// The work per second of CPU time, all ranks' threads together (process CPU time summed over the
// ranks): what the cores did, whoever else shared them. 0 when the row has no CPU time.
double cpu_throughput(const ScaleRow& row);

// Rows sharing a study_key, by rank count. Efficiency is per-rank throughput against the one-rank
// point's median; speedup is ranks x efficiency (T(1)/T(P) when the total work is fixed).
struct ScaleStudy {
  std::string key, label;
  bool weak = false;
  std::vector<ScalePoint> points;  // ascending ranks
  double one_rank_throughput = 0;  // median TFLOP/s of the one-rank point; 0 when there is none
  double one_rank_cpu_throughput = 0;  // median cpu_throughput of the one-rank point; 0 when unknown
  bool has_baseline() const { return one_rank_throughput > 0; }
  // Efficiency in CPU time: cpu_throughput against the one-rank point's (empty without one). Reads
  // 2 ranks x 1 thread against 1 rank x 2 threads as the work it is, where wall-clock
  // efficiency (per rank) reads it as half.
  std::vector<double> cpu_efficiencies(const ScalePoint& p) const;
  // One value per repetition of the point: against the one-rank point when there is one,
  // else the rows' own efficiency column (the busy fraction, or the model's).
  std::vector<double> efficiencies(const ScalePoint& p) const;
  std::vector<double> speedups(const ScalePoint& p) const;
};

// Studies in order of first appearance; rows are referenced, so `rows` must outlive them.
std::vector<ScaleStudy> group_studies(const std::vector<ScaleRow>& rows);

// Efficiency of a new row against the one-rank rows of its study in `rows` when there are some
// (per-rank throughput over their median), else the row's own value. Sets *baseline to "1-rank"
// or keeps the row's.
double efficiency_against_one_rank(const ScaleRow& row, const std::vector<ScaleRow>& rows, std::string* baseline);
// The same in CPU time; 0 when the one-rank rows or this row have no CPU time.
double cpu_efficiency_against_one_rank(const ScaleRow& row, const std::vector<ScaleRow>& rows);

}  // namespace cli
}  // namespace kattn
