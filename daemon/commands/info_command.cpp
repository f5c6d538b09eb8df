// `tapstream info FILE... [--rate HZ] [--json]`: what each coefficient file
// holds and does, so that nobody has to trust a filter unseen: taps, rate,
// channels, DC and peak gain, group delay at DC, the latency of a linear-phase
// filter, and the -3 dB points; as text, or as one JSON array.

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "daemon/commands/analysed_filter_file.hpp"
#include "daemon/commands/command.hpp"
#include "daemon/control/json.hpp"
#include "dsp/design/filter_response.hpp"
#include "dsp/files/coefficient_file.hpp"

namespace tapstream {

namespace {

struct InfoArgs {
  std::vector<std::string> files;
  double rate = 0.0;  // 0: the file's own, else 48000
  bool json = false;
};

// A number JSON can hold: NaN and infinities (a zero at DC) become null.
Json number_or_null(double value) {
  return std::isfinite(value) ? Json(value) : Json(nullptr);
}

std::string decibels(double db) {
  return std::isfinite(db) ? fmt::format("{:.2f} dB", db) : std::string("-inf dB (a zero)");
}

int run_info(const InfoArgs& args) {
  Json all = Json::array();
  int status = exit_code::ok;
  for (const std::string& file : args.files) {
    try {
      const AnalysedFilterFile analysed =
          load_for_analysis(file, args.rate, &load_filter_bank_quietly);
      const FilterBank& bank = analysed.bank;
      const double rate = analysed.rate;
      const std::string rate_origin = analysed.rate_from == AnalysedFilterFile::RateFrom::option
                                          ? "--rate"
                                      : analysed.rate_from == AnalysedFilterFile::RateFrom::file
                                          ? "the file's"
                                          : "assumed; the file does not say";
      Json entry;
      entry["file"] = file;
      entry["sample_rate"] = rate;
      entry["sample_rate_from"] = rate_origin;
      entry["channels"] = Json::array();
      std::string text = fmt::format("{}: {} Hz ({}), {} filter{}\n", file, rate, rate_origin,
                                     bank.is_shared() ? 1 : bank.channels(),
                                     bank.is_shared() || bank.channels() == 1 ? "" : "s");
      const std::size_t filters = bank.is_shared() ? 1 : bank.channels();
      for (std::size_t c = 0; c < filters; ++c) {
        const auto taps = bank.taps(c);
        const FilterSummary s = summarize_filter(taps, rate);
        const auto ms = [rate](double frames) { return 1000.0 * frames / rate; };
        Json channel = {{"channel", c},
                        {"taps", s.taps},
                        {"all_zero", s.all_zero},
                        {"dc_gain_db", number_or_null(s.dc_gain_db)},
                        {"peak_gain_db", number_or_null(s.peak_gain_db)},
                        {"peak_hz", s.peak_hz},
                        {"group_delay_dc_frames", number_or_null(s.group_delay_dc_frames)},
                        {"linear_phase", s.linear_phase},
                        {"linear_phase_latency_frames",
                         s.linear_phase ? Json(s.linear_phase_latency_frames) : Json(nullptr)},
                        {"minus_3db_hz", s.minus_3db_hz}};
        entry["channels"].push_back(channel);
        const std::string prefix = filters > 1 ? fmt::format("  channel {}: ", c) : "  ";
        text +=
            fmt::format("{}{} taps{}\n", prefix, s.taps, s.all_zero ? ", ALL ZERO (silence)" : "");
        text += fmt::format("  DC gain {}, peak gain {} at {:.1f} Hz\n", decibels(s.dc_gain_db),
                            decibels(s.peak_gain_db), s.peak_hz);
        if (std::isfinite(s.group_delay_dc_frames)) {
          text += fmt::format("  group delay at DC {:.2f} frames ({:.3f} ms)\n",
                              s.group_delay_dc_frames, ms(s.group_delay_dc_frames));
        }
        text += s.linear_phase
                    ? fmt::format("  linear phase: latency {:g} frames ({:.3f} ms)\n",
                                  s.linear_phase_latency_frames, ms(s.linear_phase_latency_frames))
                    : std::string("  not linear phase\n");
        std::string points;
        for (const double hz : s.minus_3db_hz) {
          points += (points.empty() ? "" : ", ") + fmt::format("{:.1f}", hz);
        }
        text += points.empty() ? "  no -3 dB point (within 3 dB of its peak everywhere)\n"
                               : "  -3 dB at " + points + " Hz\n";
      }
      all.push_back(entry);
      if (!args.json) fmt::print("{}", text);
    } catch (const std::exception& e) {
      spdlog::error("info: {}", e.what());  // the loader's message names the file
      status = exit_code::partial;
    }
  }
  if (args.json) fmt::print("{}\n", all.dump(2, ' ', false, Json::error_handler_t::replace));
  // Every file failed: nothing was done.
  if (status != exit_code::ok && all.empty()) return exit_code::runtime_error;
  return status;
}

}  // namespace

Command add_info_command(CLI::App& app) {
  auto args = std::make_shared<InfoArgs>();
  CLI::App* sub = app.add_subcommand(
      "info", "What coefficient files hold: taps, gains, delay, latency, -3 dB points");
  sub->add_option("files", args->files, "Coefficient files (text, raw, WAV/FLAC impulse responses)")
      ->required();
  sub->add_option("-r,--rate", args->rate,
                  "Sample rate in Hz (default: the file's own, else 48000)")
      ->check(number_between(1, 1e7, "Hz"));
  sub->add_flag("--json", args->json, "Print one JSON array instead of text");
  return Command{sub, [args] { return run_info(*args); }};
}

}  // namespace tapstream
