#include "dist_io.hpp"

#include <algorithm>
#include <functional>

#include "dist_files.hpp"
#include "kattn/errors.hpp"
#include "kattn/distributed/collective.hpp"

namespace kattn {
namespace cli {

// Point-to-point doubles in messages MPI's int count can carry.
constexpr std::int64_t kPiece = std::int64_t(1) << 30;
void send_doubles(const std::vector<double>& v, int to, MPI_Comm comm) {
  for (std::int64_t at = 0; at < std::int64_t(v.size()); at += kPiece)
    MPI_Send(v.data() + at, int(std::min<std::int64_t>(kPiece, std::int64_t(v.size()) - at)), MPI_DOUBLE, to, 8, comm);
}
void receive_doubles(std::vector<double>& v, int from, MPI_Comm comm) {
  for (std::int64_t at = 0; at < std::int64_t(v.size()); at += kPiece)
    MPI_Recv(v.data() + at, int(std::min<std::int64_t>(kPiece, std::int64_t(v.size()) - at)), MPI_DOUBLE, from, 8,
             comm, MPI_STATUS_IGNORE);
}

std::vector<double> gather_blocks(MPI_Comm comm, const std::vector<double>& local, std::int64_t size,
                                  const std::function<RowBlock(int rank)>& block_of, bool sum) {
  if (rank_of(comm) != 0) {
    send_doubles(local, 0, comm);
    return {};
  }
  std::vector<double> global(static_cast<std::size_t>(size));
  for (int r = 0; r < ranks_in(comm); ++r) {
    const RowBlock block = block_of(r);
    std::vector<double> part(static_cast<std::size_t>(block.local_size()));
    if (r == 0)
      part = local;
    else
      receive_doubles(part, r, comm);
    for_each_span(block, [&](std::int64_t g, std::int64_t l, std::int64_t count) {
      if (sum)
        std::transform(part.begin() + l, part.begin() + l + count, global.begin() + g, global.begin() + g,
                       std::plus<>());
      else
        std::copy(part.begin() + l, part.begin() + l + count, global.begin() + g);
    });
  }
  return global;
}

std::vector<double> gather_positions(MPI_Comm comm, const std::vector<double>& local, std::int64_t outer,
                                     std::int64_t inner, const dist::SequenceLayout& layout) {
  return gather_blocks(comm, local, outer * layout.length() * inner,
                       [&](int r) { return RowBlock{outer, layout.length(), inner, runs_of(layout, r)}; });
}

int mode_number(const std::string& mode) {
  return mode == "ring"      ? 0
         : mode == "decode"  ? 1
         : mode == "ulysses" ? 2
         : mode == "hybrid"  ? 3
         : mode == "grid"    ? 4
                             : -1;
}

void read_grid(Args& args, const std::string& mode, int ranks, dist::DistOptions& d) {
  d.scheme = mode == "decode" ? dist::Scheme::sharded_kv : dist::scheme_named(mode, "--dist");
  const auto U = args.integer("--ulysses-size", 1, 1 << 30);
  KATTN_REQUIRE(!U || mode == "hybrid", "--ulysses-size: only for --dist hybrid");
  const auto grid = args.value("--grid");
  KATTN_REQUIRE(!grid || mode == "grid", "--grid: only for --dist grid");
  if (grid) {
    const std::size_t comma = grid->find(',');
    KATTN_REQUIRE(comma != std::string::npos, "--grid: expected ROWS,COLS, got '", *grid, "'");
    d.grid.rows = static_cast<int>(parse_integer(grid->substr(0, comma), "--grid rows", 1, 1 << 30));
    d.grid.cols = static_cast<int>(parse_integer(grid->substr(comma + 1), "--grid cols", 1, 1 << 30));
  }
  if (mode != "hybrid") return;
  KATTN_REQUIRE(U, "--ulysses-size: --dist hybrid needs the ranks per head-sharding group (a divisor of the ",
                ranks, " ranks)");
  KATTN_REQUIRE(ranks % *U == 0, "--ulysses-size: expected a divisor of the ", ranks, " ranks, got ", *U);
  d.ulysses_size = static_cast<int>(*U);
}

std::string grid_text(const std::string& mode, int ranks, const dist::DistOptions& d) {
  if (mode == "grid") {
    const dist::DistOptions::GridShape g = dist::grid_shape(ranks, d);
    return " grid=" + std::to_string(g.rows) + "x" + std::to_string(g.cols);
  }
  if (mode != "hybrid") return "";
  return " grid=" + std::to_string(d.ulysses_size) + "x" + std::to_string(ranks / d.ulysses_size);
}

std::string dist_heading(const std::string& mode, int ranks, const dist::DistOptions& d) {
  return "dist=" + mode + " ranks=" + std::to_string(ranks) + grid_text(mode, ranks, d) +
         " sharding=" + dist::name(d.sharding) + (d.deterministic ? " deterministic" : "");
}

void add_dist_fields(Json& j, const std::string& mode, int ranks, const dist::DistOptions& d) {
  j.add("dist", mode).add("ranks", ranks).add("sharding", dist::name(d.sharding));
  if (mode == "hybrid") j.add("ulysses_size", d.ulysses_size);
  if (mode == "grid") j.add("grid", grid_text(mode, ranks, d).substr(6));
  j.add("deterministic", d.deterministic);
}

double max_over(MPI_Comm comm, double x, MPI_Op op) {
  MPI_Allreduce(MPI_IN_PLACE, &x, 1, MPI_DOUBLE, op, comm);
  return x;
}

SlowestRank slowest_rank(MPI_Comm comm, const dist::DistStats& s, double model_sent) {
  SlowestRank r;
  r.stats = s;
  r.compute_min = max_over(comm, s.compute_seconds, MPI_MIN);
  r.stats.seconds = max_over(comm, s.seconds);
  r.stats.compute_seconds = max_over(comm, s.compute_seconds);
  r.stats.compute_cpu_seconds = max_over(comm, s.compute_cpu_seconds);
  r.stats.comm_seconds = max_over(comm, s.comm_seconds);
  r.stats.bytes_sent = static_cast<std::int64_t>(max_over(comm, double(s.bytes_sent)));
  r.model_bytes = static_cast<long long>(max_over(comm, model_sent));
  if (r.model_bytes < 0) r.model_bytes = -1;
  return r;
}

namespace {

std::string model_text(long long model_bytes) {
  return model_bytes >= 0 ? " (model " + std::to_string(model_bytes) + ")" : "";
}

}  // namespace

void report_dist_forward(std::FILE* text, Json& j, double flops, int ranks, const SlowestRank& s, long long peak_rss) {
  const double secs = s.stats.seconds, gflops = secs > 0 ? flops / secs / 1e9 : 0.0;
  std::fprintf(text,
               "time: %.6f s, %.2f GFLOP/s (%.2f per rank); slowest rank: compute %.6f s (fastest %.6f s), exposed "
               "communication %.6f s; bytes sent per rank (max): %lld%s; peak memory per rank (max): %lld MB\n",
               secs, gflops, gflops / ranks, s.stats.compute_seconds, s.compute_min, s.stats.comm_seconds,
               (long long)s.stats.bytes_sent, model_text(s.model_bytes).c_str(), peak_rss >> 20);
  j.add("seconds", secs).add("gflops", gflops);
  j.add("compute_seconds", s.stats.compute_seconds).add("compute_seconds_min", s.compute_min);
  j.add("comm_seconds", s.stats.comm_seconds).add("bytes_sent_per_rank", (long long)s.stats.bytes_sent);
  j.add("compute_cpu_seconds", s.stats.compute_cpu_seconds);
  if (s.model_bytes >= 0) j.add("model_bytes_per_rank", s.model_bytes);
  j.add("peak_rss_bytes_max", peak_rss);
}

void report_dist_backward(std::FILE* text, Json& j, double flops, double forward_seconds, const SlowestRank& s,
                          long long peak_rss) {
  const double secs = s.stats.seconds, gflops = secs > 0 ? flops / secs / 1e9 : 0.0;
  std::fprintf(text,
               "time: backward %.6f s, %.2f GFLOP/s (2.5x the forward's flop count); forward %.6f s; exposed "
               "communication %.6f s; bytes sent per rank (max): %lld%s; peak memory per rank (max): %lld MB\n",
               secs, gflops, forward_seconds, s.stats.comm_seconds, (long long)s.stats.bytes_sent,
               model_text(s.model_bytes).c_str(), peak_rss >> 20);
  j.add("seconds", secs).add("gflops", gflops).add("forward_seconds", forward_seconds);
  j.add("comm_seconds", s.stats.comm_seconds).add("bytes_sent_per_rank", (long long)s.stats.bytes_sent);
  if (s.model_bytes >= 0) j.add("model_bytes_per_rank", s.model_bytes);
  j.add("peak_rss_bytes_max", peak_rss);
}

void agree_on_command(MPI_Comm comm, const std::string& mode, const Options& opt, const dist::DistOptions& d,
                      bool check, const std::vector<dist::Agreed>& extra) {
  std::vector<dist::Agreed> fields = {
      dist::Agreed::integer("--dist", "mode (0 ring, 1 decode, 2 ulysses, 3 hybrid, 4 grid)", mode_number(mode)),
      dist::Agreed::boolean("--check", "check", check)};
  for (const dist::Agreed& f : dist::option_fields(opt, d)) fields.push_back(f);
  fields.insert(fields.end(), extra.begin(), extra.end());
  dist::collective_agree(comm, fields);
}

dist::TrafficProblem traffic_problem(const DenseInputs& in, int bytes_per_value) {
  dist::TrafficProblem pr;
  pr.Nq = in.Nq, pr.Nk = in.Nk, pr.batch = int(in.B), pr.heads_q = int(in.Hq), pr.heads_kv = int(in.Hkv);
  pr.head_dim = int(in.D), pr.bytes_per_value = bytes_per_value;
  return pr;
}

}  // namespace cli
}  // namespace kattn
