// kattn-scale model's grid parts (scale_model.cpp): the per-rank-count row of the grid against the
// ring, the table of every shape at one rank count, and --crossover, the ring against the grid on
// the hardware of a published 2D scheme (scaling_anchors.hpp's grid_anchors).
#pragma once

#include <string>
#include <vector>

#include "model/grid_model.hpp"
#include "model/scaling_model.hpp"

namespace kattn {
namespace cli {

// "R,C" into a shape (--grid of model and measure).
scaling::GridShape parse_grid_shape(const std::string& text);

void print_grid_header();
void print_grid_row(int P, double N, const scaling::GridModel& g, const scaling::RingModel& ring);
// Every shape of `all` (one rank count), the picked one marked.
void print_grid_shapes(const std::vector<scaling::GridModel>& all, const scaling::GridModel& pick);

// --crossover NAME|all [--markdown]: ring against the best grid at 8 to max_ranks ranks.
int run_crossover(const std::string& name, int max_ranks, bool markdown);

}  // namespace cli
}  // namespace kattn
