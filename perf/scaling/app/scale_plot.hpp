// The figure of `kattn-scale report`: SVG, for a scaling paper.
#pragma once

#include <string>
#include <vector>

#include "scale_csv.hpp"

namespace kattn {
namespace cli {

// One column per kind of study present (weak, strong), so the two never share an axis; in each, a
// speedup panel (log-log, ideal: speedup = ranks) over an efficiency panel (ideal: 1). A point is
// the median repetition, its bar runs from the smallest to the largest; the legend sits under the
// panels and the canvas grows to fit its text. Elements carry classes (panel, ideal, series,
// point, errorbar) so tests and style sheets can find them.
std::string scaling_figure_svg(const std::vector<ScaleStudy>& studies);

}  // namespace cli
}  // namespace kattn
