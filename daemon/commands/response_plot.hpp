#pragma once
// Pictures of filters for `tapstream plot` and `design --plot`: magnitude
// (dB), phase, group delay and impulse response, several filters overlaid,
// drawn by gnuplot from data tapstream computes (dsp/design/filter_response). The
// data and the script live in a private temporary directory that is removed
// afterwards; the picture is written beside its destination and renamed onto
// it, so a failure leaves no file behind and touches none but the one named.

#include <filesystem>
#include <string>
#include <vector>

namespace tapstream {

struct PlottedFilter {
  std::string label;  // the legend entry, e.g. "lowpass.txt" or "ir.wav ch 1"
  std::vector<float> taps;
  double sample_rate = 48000.0;
};

struct PlotOptions {
  bool linear_frequency = false;  // default: a logarithmic frequency axis
  std::string title;              // above the four panels; empty: none
};

// The picture formats, by extension: ".svg" or ".png". Throws UsageError
// (daemon/commands/command.hpp) naming the file for any other, before anything
// is computed or written.
std::string plot_terminal_for(const std::filesystem::path& output);

// Throws std::runtime_error (saying which package brings it) when gnuplot
// is not on PATH: for commands that would otherwise write something first.
void require_gnuplot();

// Draws `filters` into `output`. Throws std::runtime_error when gnuplot is
// not installed (saying which package brings it) or fails (with its message).
void plot_responses(const std::vector<PlottedFilter>& filters, const std::filesystem::path& output,
                    const PlotOptions& options = {});

}  // namespace tapstream
