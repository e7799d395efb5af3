// The subcommands of the `kattn-scale` program (main.cpp); each returns the exit status.
#pragma once

#include "args.hpp"

namespace kattn {
namespace cli {

// measure: one row of a weak or strong scaling study at this run's rank count (under mpirun).
int scale_measure(Args& args);
// pingpong: latency and bandwidth between ranks 0 and 1, for the model's links.
int scale_pingpong(Args& args);
// model: predicted time and efficiency from one rank up to many.
int scale_model(Args& args);
// report: the CSVs of measured runs as a table and an SVG figure.
int scale_report(Args& args);

}  // namespace cli
}  // namespace kattn
