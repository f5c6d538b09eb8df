// `tapstream plot FILE... -o response.svg|png [--rate HZ] [--linear]`: a
// picture of what coefficient files do (magnitude, phase, group delay,
// impulse response), every filter of every file overlaid, so that a filter is
// seen before it is trusted. Drawn by gnuplot (daemon/commands/response_plot).

#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <vector>

#include "daemon/commands/analysed_filter_file.hpp"
#include "daemon/commands/command.hpp"
#include "daemon/commands/response_plot.hpp"
#include "dsp/files/coefficient_file.hpp"

namespace tapstream {

namespace {

struct PlotArgs {
  std::vector<std::string> files;
  std::string output;
  double rate = 0.0;  // 0: each file's own, else 48000
  bool linear = false;
  std::string title;
};

int run_plot(const PlotArgs& args) {
  plot_terminal_for(args.output);  // a bad extension is refused before any work
  std::vector<PlottedFilter> filters;
  for (const std::string& file : args.files) {
    // Every file must load: a picture missing one of the filters asked for
    // would mislead, so the first bad file stops the command.
    const AnalysedFilterFile analysed = load_for_analysis(file, args.rate, &load_filter_bank);
    const FilterBank& bank = analysed.bank;
    const double rate = analysed.rate;
    if (analysed.rate_from == AnalysedFilterFile::RateFrom::assumed) {
      spdlog::info("{}: the file does not say its sample rate; drawn at {} Hz (--rate)", file,
                   rate);
    }
    const std::size_t count = bank.is_shared() ? 1 : bank.channels();
    const std::string name = std::filesystem::path(file).filename().string();
    for (std::size_t c = 0; c < count; ++c) {
      const auto taps = bank.taps(c);
      filters.push_back({count > 1 ? name + " ch " + std::to_string(c) : name,
                         std::vector<float>(taps.begin(), taps.end()), rate});
    }
  }
  PlotOptions options;
  options.linear_frequency = args.linear;
  options.title = args.title;
  plot_responses(filters, args.output, options);
  spdlog::info("drew {} filter{} into {}", filters.size(), filters.size() == 1 ? "" : "s",
               args.output);
  return exit_code::ok;
}

}  // namespace

Command add_plot_command(CLI::App& app) {
  auto args = std::make_shared<PlotArgs>();
  CLI::App* sub = app.add_subcommand(
      "plot", "Draw coefficient files' magnitude, phase, group delay and impulse response");
  sub->add_option("files", args->files, "Coefficient files (text, raw, WAV/FLAC impulse responses)")
      ->required();
  sub->add_option("-o,--output", args->output, "The picture to write: .svg or .png")->required();
  sub->add_option("-r,--rate", args->rate,
                  "Sample rate in Hz (default: each file's own, else 48000)")
      ->check(number_between(1, 1e7, "Hz"));
  sub->add_flag("--linear", args->linear, "A linear frequency axis (default: logarithmic)");
  sub->add_option("--title", args->title, "A title above the panels");
  return Command{sub, [args] { return run_plot(*args); }};
}

}  // namespace tapstream
