#include "scale_model_grid.hpp"

#include <cstdio>

#include "args.hpp"
#include "kattn/errors.hpp"
#include "model/scaling_anchors.hpp"

namespace kattn {
namespace cli {

scaling::GridShape parse_grid_shape(const std::string& text) {
  const std::size_t comma = text.find(',');
  KATTN_REQUIRE(comma != std::string::npos, "--grid: expected ROWS,COLS, got '", text, "'");
  return {static_cast<int>(parse_integer(text.substr(0, comma), "--grid rows", 1, 1 << 20)),
          static_cast<int>(parse_integer(text.substr(comma + 1), "--grid cols", 1, 1 << 20))};
}

void print_grid_header() {
  std::printf("%8s %9s %14s %12s %12s %12s %12s %14s %10s %12s %12s %12s %8s\n", "ranks", "R x C", "tokens",
              "tokens/rank", "block comp s", "inputs s", "seconds", "exposed comm s", "efficiency", "MB sent/rank",
              "ring s", "ring MB", "speedup");
}

void print_grid_row(int P, double N, const scaling::GridModel& g, const scaling::RingModel& ring) {
  const std::string shape = std::to_string(g.shape.rows) + " x " + std::to_string(g.shape.cols);
  std::printf("%8d %9s %14.0f %12.0f %12.4g %12.4g %12.4g %14.4g %10.3f %12.4g %12.4g %12.4g %8.2f\n", P, shape.c_str(),
              N, g.tokens_per_rank, g.block_compute_seconds, g.inputs_seconds, g.seconds, g.exposed_comm_seconds,
              g.efficiency, g.bytes_per_rank / 1e6, ring.seconds, ring.bytes_per_rank / 1e6, ring.seconds / g.seconds);
}

void print_grid_shapes(const std::vector<scaling::GridModel>& all, const scaling::GridModel& pick) {
  if (all.empty()) return;
  std::printf("every shape at %d ranks (* the model's pick; the library's default {0, 0} is the most square):\n",
              all.front().shape.rows * all.front().shape.cols);
  std::printf("%9s %12s %12s %14s %12s\n", "R x C", "seconds", "inputs s", "exposed comm s", "MB sent/rank");
  for (const scaling::GridModel& g : all) {
    const std::string shape = std::to_string(g.shape.rows) + " x " + std::to_string(g.shape.cols);
    const bool picked = g.shape.rows == pick.shape.rows && g.shape.cols == pick.shape.cols;
    std::printf("%9s %12.4g %12.4g %14.4g %12.4g%s\n", shape.c_str(), g.seconds, g.inputs_seconds,
                g.exposed_comm_seconds, g.bytes_per_rank / 1e6, picked ? " *" : "");
  }
}

namespace {

void crossover_table(const scaling::GridAnchor& a, int max_ranks, bool md) {
  const scaling::RingModelInput& in0 = a.input;
  std::printf(md ? "#### %s\n\n" : "kattn-scale model --crossover %s\n", a.name.c_str());
  std::printf(md ? "%s: %s.\n\n" : "%s: %s\n", a.source.c_str(), a.published.c_str());
  std::printf(md ? "Assumed: %s.\n\n" : "assumed: %s\n", a.assumed.c_str());
  std::printf(md ? "%lld tokens in all at every rank count; Hq=%d Hkv=%d D=%d, %d-byte K/V%s; %d ranks a node.\n\n"
                 : "%lld tokens in all at every rank count; Hq=%d Hkv=%d D=%d, %d-byte K/V%s; %d ranks a node\n",
              (long long)in0.tokens, in0.heads_q, in0.heads_kv, in0.head_dim, in0.bytes_per_value,
              in0.causal ? ", causal (zigzag)" : "", in0.cluster.ranks_per_node);
  if (md) {
    std::printf(
        "| ranks | ring s | ring MB/rank | grid R x C | grid s | grid MB/rank | less communication | speedup |\n");
    std::printf("|---|---|---|---|---|---|---|---|\n");
  } else {
    std::printf("%8s %12s %12s %9s %12s %12s %10s %8s\n", "ranks", "ring s", "ring MB", "R x C", "grid s", "grid MB",
                "less comm", "speedup");
  }
  double at_published = 0, bytes_at_published = 0;
  for (int P = 8; P <= max_ranks; P *= 2) {
    const scaling::RingModelInput in = a.at(P);
    const scaling::RingModel ring = scaling::model_ring(in);
    const scaling::GridModel g = scaling::best_grid(in);
    const double speedup = ring.seconds / g.seconds, less = 1.0 - g.bytes_per_rank / ring.bytes_per_rank;
    if (P == a.published_ranks) at_published = speedup, bytes_at_published = less;
    const std::string shape = std::to_string(g.shape.rows) + " x " + std::to_string(g.shape.cols);
    std::printf(md ? "| %d | %.4g | %.0f | %s | %.4g | %.0f | %.0f%% | %.2f |\n"
                   : "%8d %12.4g %12.0f %9s %12.4g %12.0f %9.0f%% %8.2f\n",
                P, ring.seconds, ring.bytes_per_rank / 1e6, shape.c_str(), g.seconds, g.bytes_per_rank / 1e6,
                100 * less, speedup);
  }
  if (at_published > 0)
    std::printf(md ? "\nAt %d ranks: the model %.2fx with %.0f%% less communication per rank; published %.1fx.\n\n"
                   : "at %d ranks: model %.2fx (%.0f%% less communication per rank), published %.1fx\n\n",
                a.published_ranks, at_published, 100 * bytes_at_published, a.published_speedup);
}

}  // namespace

int run_crossover(const std::string& name, int max_ranks, bool markdown) {
  bool any = false;
  for (const scaling::GridAnchor& a : scaling::grid_anchors())
    if (name == "all" || a.name == name) crossover_table(a, max_ranks, markdown), any = true;
  if (any) return 0;
  std::string names;
  for (const scaling::GridAnchor& a : scaling::grid_anchors()) names += (names.empty() ? "" : ", ") + a.name;
  KATTN_REQUIRE(false, "--crossover: expected all or one of ", names, ", got '", name, "'");
  return 2;
}

}  // namespace cli
}  // namespace kattn
