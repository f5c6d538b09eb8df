// `tapstream design TYPE --rate R --cutoff F[,F2] --taps N -o FILE`: windowed-
// sinc FIR design into a coefficient file, so that users can make filters
// without other tools. The container is the one FILE's extension names (text,
// .wav, .f32/.raw/.bin, .f64); a text file's header records how it was made.
// A design whose stopband falls more than 10 dB short of what its window
// promises (too few taps, float32 rounding at very high beta) is warned about.

#include <spdlog/spdlog.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "daemon/commands/command.hpp"
#include "daemon/commands/response_plot.hpp"
#include "dsp/design/filter_design.hpp"
#include "dsp/files/coefficient_file.hpp"

namespace tapstream {

namespace {

struct DesignArgs {
  std::string type;
  double rate = 0.0;
  std::string cutoff;
  std::size_t taps = 0;
  std::string window = "kaiser";
  double beta = 8.6;
  bool beta_given = false;
  int order = 4;
  bool order_given = false;
  std::string output;
  std::string plot;  // a picture of the design (.svg/.png); empty: none
};

double parse_frequency(const std::string& text) {
  std::size_t used = 0;
  double value = 0.0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !std::isfinite(value) || value <= 0.0) {
    throw UsageError("--cutoff: '" + text + "' is not a positive frequency in Hz");
  }
  return value;
}

std::string format_number(double value) {
  std::ostringstream out;
  out.precision(10);
  out << value;
  return out.str();
}

int run_design(const DesignArgs& args) {
  if (!args.plot.empty()) {  // refused before anything is written
    plot_terminal_for(args.plot);
    require_gnuplot();
  }
  FilterSpec spec;
  spec.type = parse_filter_type(args.type);
  spec.sample_rate = args.rate;
  spec.taps = args.taps;
  spec.window = parse_window_type(args.window);
  spec.kaiser_beta = args.beta;
  spec.order = args.order;
  if (args.order_given && !is_linkwitz_riley(spec.type)) {
    throw UsageError("--order: only lr-lowpass and lr-highpass have an order (type is " +
                     args.type + ")");
  }
  if (args.beta_given && spec.window != WindowType::kaiser) {
    throw UsageError("--beta: only the kaiser window has a beta (window is " + args.window + ")");
  }

  const bool two_edges = spec.type == FilterType::bandpass || spec.type == FilterType::bandstop;
  const auto comma = args.cutoff.find(',');
  if (two_edges && comma == std::string::npos) {
    throw UsageError("--cutoff: " + args.type + " needs two edges, e.g. --cutoff 300,3400 (got '" +
                     args.cutoff + "')");
  }
  if (!two_edges && comma != std::string::npos) {
    throw UsageError("--cutoff: " + args.type + " takes one edge (got '" + args.cutoff + "')");
  }
  spec.cutoff_hz = parse_frequency(args.cutoff.substr(0, comma));
  if (two_edges) {
    spec.cutoff2_hz = parse_frequency(args.cutoff.substr(comma + 1));
    if (spec.cutoff2_hz <= spec.cutoff_hz) {
      throw UsageError("--cutoff: the second edge must be above the first (got '" + args.cutoff +
                       "')");
    }
  }
  const double nyquist = spec.sample_rate / 2.0;
  if (spec.cutoff_hz >= nyquist || spec.cutoff2_hz >= nyquist) {
    throw UsageError("--cutoff: '" + args.cutoff + "' must be below half of --rate (" +
                     format_number(nyquist) + " Hz)");
  }

  std::vector<float> taps;
  try {
    taps = design_fir(spec);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());  // every spec problem is one of the command line's
  }

  std::string how = "tapstream design " + args.type + " --rate " + format_number(args.rate) +
                    " --cutoff " + args.cutoff + " --taps " + std::to_string(args.taps) +
                    " --window " + args.window;
  if (spec.window == WindowType::kaiser) how += " --beta " + format_number(args.beta);
  if (is_linkwitz_riley(spec.type)) how += " --order " + std::to_string(spec.order);
  const std::string header = how + "\n" + std::to_string(taps.size()) + " taps, " +
                             format_number(args.rate) + " Hz sample rate";
  const std::string container = save_taps(args.output, taps, header, args.rate);
  spdlog::info("wrote {} taps ({} {} Hz at {} Hz, {} window) to {} as {}", taps.size(), args.type,
               args.cutoff, format_number(args.rate), args.window, args.output, container);

  const StopbandCheck stopband = check_stopband(spec, taps);
  if (is_linkwitz_riley(spec.type)) {
    // A crossover's slope is its design: there is no stopband promise to check.
  } else if (!stopband.has_stopband) {
    spdlog::warn(
        "{} taps are too few for these edges: the transition bands cover the whole stopband "
        "(use more taps)",
        taps.size());
  } else if (stopband.missed()) {
    spdlog::warn(
        "the design reaches only -{:.1f} dB in its stopband where the {} window promises -{:.1f} "
        "dB (use more taps{})",
        stopband.achieved_db, args.window, stopband.promised_db,
        spec.window == WindowType::kaiser ? ", or a lower --beta: float32 taps reach about -150 dB"
                                          : "");
  }
  if (!args.plot.empty()) {
    PlotOptions options;
    options.title = how;
    plot_responses({{std::filesystem::path(args.output).filename().string(), taps, args.rate}},
                   args.plot, options);
    spdlog::info("drew the design into {}", args.plot);
  }
  return exit_code::ok;
}

}  // namespace

Command add_design_command(CLI::App& app) {
  auto args = std::make_shared<DesignArgs>();
  CLI::App* sub = app.add_subcommand("design", "Design a windowed-sinc FIR filter into a file");
  sub->add_option("type", args->type,
                  "lowpass, highpass, bandpass, bandstop, or the halves of a linear-phase "
                  "Linkwitz-Riley crossover, lr-lowpass and lr-highpass (same --taps: they sum "
                  "to a pure delay)")
      ->required()
      ->check(CLI::IsMember(
          {"lowpass", "highpass", "bandpass", "bandstop", "lr-lowpass", "lr-highpass"}));
  sub->add_option("-r,--rate", args->rate, "Sample rate in Hz")
      ->required()
      ->check(number_between(1, 1e7, "Hz"));
  sub->add_option("-c,--cutoff", args->cutoff,
                  "Edge frequency in Hz; two, comma-separated, for bandpass and bandstop")
      ->required();
  sub->add_option("-n,--taps", args->taps, "Number of taps (odd for highpass and bandstop)")
      ->required()
      ->check(number_between(1, 1 << 20, "taps"));
  sub->add_option("-w,--window", args->window, "kaiser, hann, hamming, blackman or rectangular")
      ->check(CLI::IsMember({"kaiser", "hann", "hamming", "blackman", "rectangular"}))
      ->capture_default_str();
  sub->add_option("--beta", args->beta, "Kaiser window's beta (more: lower sidelobes, wider)")
      ->check(number_between(0, 50, ""))
      ->capture_default_str();
  sub->add_option("--order", args->order,
                  "Linkwitz-Riley order for lr-lowpass and lr-highpass: 2, 4, 6 or 8 (slope "
                  "6 x order dB/octave)")
      ->check(CLI::IsMember({2, 4, 6, 8}))
      ->capture_default_str();
  sub->add_option("-o,--output", args->output,
                  "Coefficient file to write: .wav (32-bit float), .f32/.raw/.bin (raw float32), "
                  ".f64, or text (any other extension)")
      ->required();
  sub->add_option("--plot", args->plot,
                  "Also draw the design (magnitude, phase, group delay, impulse) into this "
                  "picture: .svg or .png");
  return Command{sub, [args, sub] {
                   DesignArgs resolved = *args;
                   resolved.beta_given = sub->count("--beta") > 0;
                   resolved.order_given = sub->count("--order") > 0;
                   return run_design(resolved);
                 }};
}

}  // namespace tapstream
