// The CSV of scaling studies: one row per `kattn scale` run, appended; read back by the report.
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
// columns still read). Throws kattn::Error naming the file and line for malformed input.
std::vector<ScaleRow> read_scale_csv(const std::string& path);

// Appends one row, writing the header first when the file is new or empty.
void append_scale_csv(const std::string& path, const ScaleRow& row);

// What makes rows the same study at different rank counts: study, algorithm, dtype, shape,
// variant and the fixed size (tokens per rank for weak scaling, tokens for strong).
std::string study_key(const ScaleRow& row);
// A short human label of a study, for legends and tables.
std::string study_label(const ScaleRow& row);

// Efficiency of a row against the one-rank row of its study when `rows` has one (per-rank
// throughput ratio), else the row's own value. Sets *baseline to "1-rank" or keeps the row's.
double efficiency_against_one_rank(const ScaleRow& row, const std::vector<ScaleRow>& rows, std::string* baseline);

}  // namespace cli
}  // namespace kattn
