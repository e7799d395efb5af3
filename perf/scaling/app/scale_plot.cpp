#include "scale_plot.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <sstream>

namespace kattn {
namespace cli {
namespace {

// Layout, in pixels. A column is the y-axis margin, the panels and a right margin; the legend
// starts under the panels, kLegendLeft into the column.
constexpr double kLeft = 64, kPanelW = 300, kRight = 18, kLegendLeft = 20;
constexpr double kTop = 44, kPanelH = 210, kGap = 50;
constexpr double kLegendLine = 17, kFont = 12, kLegendFont = 11, kNoteFont = 10;
// Average advance of a sans-serif glyph per unit of font size, rounded up (DejaVu Sans digits
// are 0.64): widths of text are estimated with it, so the canvas grows to fit the labels.
constexpr double kCharWidth = 0.64;

// Okabe-Ito: distinguishable with the common colour-vision deficiencies and in grey.
const char* const kColors[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"};

double text_width(const std::string& s, double size) { return kCharWidth * size * double(s.size()); }

std::string px(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", x);
  return buf;
}

std::string label_of(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", x);
  return buf;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&') out += "&amp;";
    else if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else out += c;
  }
  return out;
}

// Data to pixels along one axis, linear or in log2.
struct Axis {
  double lo = 0, hi = 1, p_lo = 0, p_hi = 1;
  bool log = false;
  double operator()(double v) const {
    const double t = log ? (std::log2(v) - std::log2(lo)) / (std::log2(hi) - std::log2(lo)) : (v - lo) / (hi - lo);
    return p_lo + t * (p_hi - p_lo);
  }
};

// The powers of two from lo to hi, or multiples of a round step.
std::vector<double> ticks_of(const Axis& a) {
  std::vector<double> t;
  if (a.log) {
    for (double v = std::pow(2.0, std::ceil(std::log2(a.lo) - 1e-9)); v <= a.hi * (1 + 1e-9); v *= 2) t.push_back(v);
  } else {
    double step = 0.25;
    while ((a.hi - a.lo) / step > 6) step *= 2;
    for (double v = a.lo; v <= a.hi + 1e-9; v += step) t.push_back(v);
  }
  return t;
}

double pow2_ceil(double x) { return std::pow(2.0, std::ceil(std::log2(x) - 1e-9)); }

// A study's markers in one panel: (ranks, spread of the repetitions' values).
struct Curve {
  int series = 0;  // index of the study, for data-series
  const char* color = "";
  std::vector<std::pair<double, Spread>> points;
};

struct PanelSpec {
  std::string name, ylabel;
  Axis x, y;
  std::function<double(double)> ideal;  // ideal value at a rank count
  std::vector<Curve> curves;
};

void draw_panel(std::ostringstream& o, const PanelSpec& p, double col_x) {
  const double x0 = p.x.p_lo, x1 = p.x.p_hi, y_bottom = p.y.p_lo, y_top = p.y.p_hi;
  o << "<g class=\"panel\" data-panel=\"" << p.name << "\">\n";
  const std::vector<double> xt = ticks_of(p.x), yt = ticks_of(p.y);
  const std::size_t x_every = xt.size() > 8 ? 2 : 1, y_every = yt.size() > 8 ? 2 : 1;
  for (std::size_t i = 0; i < yt.size(); ++i) {
    const double y = p.y(yt[i]);
    o << "<line x1=\"" << px(x0) << "\" y1=\"" << px(y) << "\" x2=\"" << px(x1) << "\" y2=\"" << px(y)
      << "\" stroke=\"#e4e4e4\"/>\n";
    if (i % y_every == 0)
      o << "<text x=\"" << px(x0 - 6) << "\" y=\"" << px(y + 4) << "\" text-anchor=\"end\">" << label_of(yt[i])
        << "</text>\n";
  }
  for (std::size_t i = 0; i < xt.size(); ++i) {
    const double x = p.x(xt[i]);
    o << "<line x1=\"" << px(x) << "\" y1=\"" << px(y_top) << "\" x2=\"" << px(x) << "\" y2=\"" << px(y_bottom)
      << "\" stroke=\"#e4e4e4\"/>\n";
    if (i % x_every == 0)
      o << "<text x=\"" << px(x) << "\" y=\"" << px(y_bottom + 16) << "\" text-anchor=\"middle\">" << label_of(xt[i])
        << "</text>\n";
  }
  o << "<rect x=\"" << px(x0) << "\" y=\"" << px(y_top) << "\" width=\"" << px(x1 - x0) << "\" height=\""
    << px(y_bottom - y_top) << "\" fill=\"none\" stroke=\"#000\"/>\n";
  o << "<text transform=\"translate(" << px(col_x + 18) << "," << px((y_top + y_bottom) / 2)
    << ") rotate(-90)\" text-anchor=\"middle\">" << escape(p.ylabel) << "</text>\n";
  o << "<line class=\"ideal\" x1=\"" << px(x0) << "\" y1=\"" << px(p.y(p.ideal(p.x.lo))) << "\" x2=\"" << px(x1)
    << "\" y2=\"" << px(p.y(p.ideal(p.x.hi))) << "\" stroke=\"#555\" stroke-width=\"1.2\" stroke-dasharray=\"6 4\"/>\n";
  if (p.curves.empty())
    o << "<text x=\"" << px((x0 + x1) / 2) << "\" y=\"" << px((y_top + y_bottom) / 2) << "\" text-anchor=\"middle\""
      << " fill=\"#555\">no 1-rank run to compare with</text>\n";
  for (const Curve& c : p.curves) {
    o << "<polyline class=\"series\" data-series=\"" << c.series << "\" fill=\"none\" stroke=\"" << c.color
      << "\" stroke-width=\"2\" points=\"";
    for (std::size_t i = 0; i < c.points.size(); ++i)
      o << (i ? " " : "") << px(p.x(c.points[i].first)) << "," << px(p.y(c.points[i].second.median));
    o << "\"/>\n";
    for (const auto& [ranks, s] : c.points) {
      const double x = p.x(ranks);
      if (s.max > s.min)
        o << "<path class=\"errorbar\" data-series=\"" << c.series << "\" d=\"M" << px(x) << " " << px(p.y(s.min))
          << "V" << px(p.y(s.max)) << "M" << px(x - 4) << " " << px(p.y(s.min)) << "H" << px(x + 4) << "M"
          << px(x - 4) << " " << px(p.y(s.max)) << "H" << px(x + 4) << "\" stroke=\"" << c.color
          << "\" stroke-width=\"1.3\" fill=\"none\"/>\n";
      o << "<circle class=\"point\" data-series=\"" << c.series << "\" data-ranks=\"" << label_of(ranks) << "\" cx=\""
        << px(x) << "\" cy=\"" << px(p.y(s.median)) << "\" r=\"3.5\" fill=\"" << c.color
        << "\" stroke=\"#fff\" stroke-width=\"0.8\"/>\n";
    }
  }
  o << "</g>\n";
}

// The studies of one kind (weak or strong) and what their column needs.
struct Column {
  bool weak = false;
  std::vector<std::size_t> studies;  // indices into the studies
  double width = 0;
};

}  // namespace

std::string scaling_figure_svg(const std::vector<ScaleStudy>& studies) {
  std::vector<Column> columns;
  for (bool weak : {true, false}) {
    Column c;
    c.weak = weak;
    for (std::size_t i = 0; i < studies.size(); ++i)
      if (studies[i].weak == weak) c.studies.push_back(i);
    if (!c.studies.empty()) columns.push_back(std::move(c));
  }
  const auto legend_label = [&](const ScaleStudy& s) {
    return s.label + (s.has_baseline() ? "" : " (no 1-rank run)");
  };

  // Notes under the legends, for the whole figure.
  std::size_t fewest = SIZE_MAX, most = 0;
  bool any_without = false;
  for (const ScaleStudy& s : studies) {
    for (const ScalePoint& p : s.points) fewest = std::min(fewest, p.rows.size()), most = std::max(most, p.rows.size());
    any_without = any_without || !s.has_baseline();
  }
  std::vector<std::string> notes;
  notes.push_back(most <= 1 ? "one repetition per point (no spread to show)"
                            : "median of " +
                                  (fewest == most ? std::to_string(most)
                                                  : std::to_string(fewest) + " to " + std::to_string(most)) +
                                  " repetitions; bars: min to max");
  notes.push_back("efficiency: per-rank throughput / 1 rank's");
  notes.push_back("speedup: ranks x efficiency (strong: T(1) / T(P))");
  if (any_without) notes.push_back("no 1-rank run: the CSV's own efficiency, no speedup");

  // Sizes first: a column is as wide as its panels or its legend, whichever is wider; the
  // figure as wide as its columns or its notes.
  const double legend_top = kTop + 2 * kPanelH + kGap + 58;
  double width = 0, legend_bottom = 0;
  for (Column& c : columns) {
    double legend_w = 28 + text_width("ideal scaling", kLegendFont);
    for (std::size_t i : c.studies) legend_w = std::max(legend_w, 28 + text_width(legend_label(studies[i]), kLegendFont));
    c.width = std::max(kLeft + kPanelW, kLegendLeft + legend_w) + kRight;
    width += c.width;
    legend_bottom = std::max(legend_bottom, legend_top + kLegendLine * double(c.studies.size() + 1));
  }
  double notes_w = 0;
  for (const std::string& n : notes) notes_w = std::max(notes_w, text_width(n, kNoteFont));
  width = std::max(width, kLegendLeft + notes_w + kRight);
  const double notes_top = legend_bottom + 6;
  const double height = notes_top + kLegendLine * double(notes.size()) + 4;

  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << px(width) << "\" height=\"" << px(height)
    << "\" viewBox=\"0 0 " << px(width) << " " << px(height) << "\" font-family=\"DejaVu Sans, Arial, sans-serif\""
    << " font-size=\"" << kFont << "\">\n";
  o << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  double col_x = 0;
  for (const Column& c : columns) {
    const double x0 = col_x + kLeft, x1 = x0 + kPanelW;
    o << "<text x=\"" << px((x0 + x1) / 2) << "\" y=\"" << px(24) << "\" text-anchor=\"middle\" font-size=\"14\">"
      << (c.weak ? "weak scaling (tokens per rank fixed)" : "strong scaling (total tokens fixed)") << "</text>\n";
    // Ranks from 1 to the next power of two above the largest run.
    double max_ranks = 2, min_speedup = 1, max_speedup = 2, max_eff = 0;
    for (std::size_t i : c.studies)
      for (const ScalePoint& p : studies[i].points) {
        max_ranks = std::max(max_ranks, p.ranks);
        max_eff = std::max(max_eff, spread_of(studies[i].efficiencies(p)).max);
        const Spread s = spread_of(studies[i].speedups(p));
        if (studies[i].has_baseline() && s.min > 0)
          min_speedup = std::min(min_speedup, s.min), max_speedup = std::max(max_speedup, s.max);
      }
    // Log axes padded by a quarter octave, so no marker sits on the frame.
    const double pad = std::pow(2.0, 0.25);
    Axis x;
    x.lo = 1 / pad, x.hi = pow2_ceil(max_ranks) * pad, x.p_lo = x0, x.p_hi = x1, x.log = true;
    PanelSpec speedup, efficiency;
    speedup.name = std::string(c.weak ? "weak" : "strong") + "-speedup";
    speedup.ylabel = c.weak ? "scaled speedup" : "speedup";
    speedup.x = x;
    speedup.y.lo = std::min(1.0, min_speedup) / pad, speedup.y.hi = std::max(max_speedup * pad, x.hi);
    speedup.y.p_lo = kTop + kPanelH, speedup.y.p_hi = kTop, speedup.y.log = true;
    speedup.ideal = [](double ranks) { return ranks; };
    efficiency.name = std::string(c.weak ? "weak" : "strong") + "-efficiency";
    efficiency.ylabel = "parallel efficiency";
    efficiency.x = x;
    efficiency.y.lo = 0, efficiency.y.hi = std::ceil(std::max(1.1, max_eff * 1.05) * 4) / 4;
    efficiency.y.p_lo = kTop + 2 * kPanelH + kGap, efficiency.y.p_hi = kTop + kPanelH + kGap;
    efficiency.ideal = [](double) { return 1.0; };
    for (std::size_t k = 0; k < c.studies.size(); ++k) {
      const ScaleStudy& s = studies[c.studies[k]];
      Curve e, sp;
      e.series = sp.series = int(c.studies[k]);
      e.color = sp.color = kColors[k % (sizeof kColors / sizeof *kColors)];
      for (const ScalePoint& p : s.points) {
        e.points.emplace_back(p.ranks, spread_of(s.efficiencies(p)));
        const Spread speedup_spread = spread_of(s.speedups(p));
        if (s.has_baseline() && speedup_spread.min > 0) sp.points.emplace_back(p.ranks, speedup_spread);  // log axis
      }
      efficiency.curves.push_back(std::move(e));
      if (s.has_baseline()) speedup.curves.push_back(std::move(sp));
    }
    draw_panel(o, speedup, col_x);
    draw_panel(o, efficiency, col_x);
    o << "<text x=\"" << px((x0 + x1) / 2) << "\" y=\"" << px(efficiency.y.p_lo + 34)
      << "\" text-anchor=\"middle\">ranks</text>\n";
    // Legend: one line per study, then the ideal line.
    const double lx = col_x + kLegendLeft;
    double y = legend_top;
    o << "<g class=\"legend\">\n";
    const auto entry = [&](const std::string& color, const char* dash, const std::string& text) {
      o << "<line x1=\"" << px(lx) << "\" y1=\"" << px(y - 4) << "\" x2=\"" << px(lx + 20) << "\" y2=\"" << px(y - 4)
        << "\" stroke=\"" << color << "\" stroke-width=\"2\"" << dash << "/>\n";
      o << "<text x=\"" << px(lx + 28) << "\" y=\"" << px(y) << "\" font-size=\"" << kLegendFont << "\">"
        << escape(text) << "</text>\n";
    };
    for (std::size_t k = 0; k < c.studies.size(); ++k, y += kLegendLine) {
      const char* color = kColors[k % (sizeof kColors / sizeof *kColors)];
      entry(color, "", legend_label(studies[c.studies[k]]));
      o << "<circle cx=\"" << px(lx + 10) << "\" cy=\"" << px(y - 4) << "\" r=\"3.5\" fill=\"" << color << "\"/>\n";
    }
    entry("#555", " stroke-dasharray=\"6 4\"", "ideal scaling");
    o << "</g>\n";
    col_x += c.width;
  }
  double y = notes_top;
  o << "<g class=\"legend\">\n";
  for (const std::string& n : notes) {
    o << "<text x=\"" << px(kLegendLeft) << "\" y=\"" << px(y) << "\" font-size=\"" << kNoteFont
      << "\" fill=\"#333\">" << escape(n) << "</text>\n";
    y += kLegendLine;
  }
  o << "</g>\n</svg>\n";
  return o.str();
}

}  // namespace cli
}  // namespace kattn
