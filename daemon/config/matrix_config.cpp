#include "daemon/config/matrix_config.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdint>
#include <map>
#include <stdexcept>
#include <utility>
#include <vector>

#include "dsp/files/coefficient_file.hpp"
#include "dsp/files/rate_file_name.hpp"
#include "dsp/files/regular_file.hpp"
#include "dsp/files/sofa_file.hpp"

namespace tapstream {
namespace {

using namespace toml_reading;
namespace fs = std::filesystem;

constexpr std::int64_t kMaxChannels = 65536;

// A matrix file is a few lines per path; far more than any real one.
constexpr std::uint64_t kMaxMatrixFileBytes = std::uint64_t(64) << 20;

// Every channel of a coefficient file, each its own filter (a text or raw
// file has one). The header is read first only for the channel count, so
// that load_filter_bank() reads the file as it always does.
std::vector<std::vector<float>> load_filter_channels(const fs::path& file,
                                                     const MatrixFileOptions& options,
                                                     int named_rate = 0) {
  const std::size_t channels = read_coefficient_header(file).channels;
  CoefficientFileOptions load;
  load.channels = channels;
  load.max_taps = options.max_taps;
  load.sample_rate = options.sample_rate;
  load.resample = options.resample;
  load.named_rate = named_rate != 0 ? named_rate : options.named_rate;
  const FilterBank bank = load_filter_bank(file, load);
  std::vector<std::vector<float>> out(channels);
  for (std::size_t c = 0; c < channels; ++c) {
    const auto taps = bank.taps(c);
    out[c].assign(taps.begin(), taps.end());
  }
  return out;
}

// The file `name` (relative to the matrix file) names for the rate in force:
// "$samplerate$" resolved, the nearest rate's when resampling is on. Fails
// naming `key` when there is none.
RateFile rate_file_of(const Reader& reader, std::string_view key, const toml::node& node,
                      const std::string& name, const MatrixFileOptions& options,
                      bool may_resample = true) {
  RateFile chosen;
  try {
    chosen = choose_rate_file(reader.resolve(name), options.sample_rate,
                              may_resample && options.resample);
  } catch (const RateFileError& e) {
    reader.fail(key, node, e.what());
  }
  reader.require_file(key, node, chosen.file);
  return chosen;
}

std::vector<MatrixPath> read_sparse(const Reader& reader, const toml::node& list,
                                    std::size_t inputs, std::size_t outputs,
                                    const MatrixFileOptions& options) {
  if (!list.is_array_of_tables())
    reader.fail("path", list, "expected [[path]] tables, got " + std::string(type_name(list)));
  std::vector<MatrixPath> paths;
  // Big matrices take many paths from one multichannel file: read each once.
  std::map<fs::path, std::vector<std::vector<float>>> loaded;
  const toml::array& array = *list.as_array();
  for (std::size_t i = 0; i < array.size(); ++i) {
    const toml::table& table = *array[i].as_table();
    const std::string name = "path[" + std::to_string(i) + "]";
    reader.check_known(table, name,
                       {"input", "output", "file", "channel", "gain_db", "delay_frames", "invert"});
    MatrixPath path;
    const auto input = reader.integer(table, name, "input", 0, std::int64_t(inputs) - 1);
    const auto output = reader.integer(table, name, "output", 0, std::int64_t(outputs) - 1);
    if (!input || !output) reader.fail(name + ": needs both input and output");
    path.input = std::size_t(*input);
    path.output = std::size_t(*output);
    const std::string where = RoutingMatrix::describe_path(i, path);
    const auto file = reader.string(table, name, "file");
    if (!file) reader.fail(where + ": needs a file");
    const RateFile chosen =
        rate_file_of(reader, Reader::qualified(name, "file"), *table.get("file"), *file, options);
    const fs::path& resolved = chosen.file;
    const std::size_t channel =
        std::size_t(reader.integer(table, name, "channel", 0, kMaxChannels - 1).value_or(0));
    path.gain_db = reader.number(table, name, "gain_db", -120.0, 40.0).value_or(0.0);
    path.delay_frames = std::size_t(
        reader.integer(table, name, "delay_frames", 0, std::int64_t(RoutingMatrix::kMaxDelayFrames))
            .value_or(0));
    path.invert = reader.boolean(table, name, "invert").value_or(false);
    auto it = loaded.find(resolved);
    if (it == loaded.end()) {
      try {
        it = loaded.emplace(resolved, load_filter_channels(resolved, options, chosen.named_rate))
                 .first;
      } catch (const std::exception& e) {
        reader.fail(where + ": " + e.what());
      }
    }
    const std::vector<std::vector<float>>& channels = it->second;
    if (channel >= channels.size())
      reader.fail(where + ": channel " + std::to_string(channel) + " is out of range (" +
                  resolved.string() + " has channels 0.." + std::to_string(channels.size() - 1) +
                  ")");
    path.taps = channels[channel];
    path.source =
        resolved.string() + (channels.size() > 1 ? " channel " + std::to_string(channel) : "");
    path.file = resolved;
    paths.push_back(std::move(path));
  }
  return paths;
}

// Where channel `channel` of a one-file matrix goes: input -> output.
struct ChannelRoute {
  std::size_t channel;
  std::size_t input;
  std::size_t output;
};

// A layout: how the channels of one multichannel IR file map to paths.
struct Layout {
  const char* name;
  std::size_t inputs = 0, outputs = 0, channels = 0;  // 0: any (dense)
  const char* order = "";                             // the channel order, for messages
  std::vector<ChannelRoute> routes;
};

// True-stereo reverbs ship four channels: left in -> left out, left in ->
// right out, right in -> left out, right in -> right out.
Layout true_stereo_layout() {
  return {"true-stereo", 2, 2, 4, "LL, LR, RL, RR", {{0, 0, 0}, {1, 0, 1}, {2, 1, 0}, {3, 1, 1}}};
}

// HeSuVi's 14-channel virtual surround files, speaker-ear in HeSuVi's track
// order (HeSuVi's hrir files; Impulcifer's HESUVI_TRACK_ORDER writes it):
//   0 FL-left  1 FL-right  2 SL-left  3 SL-right  4 BL-left  5 BL-right
//   6 FC-left  7 FR-right  8 FR-left  9 SR-right 10 SR-left 11 BR-right
//  12 BR-left 13 FC-right
// Inputs in the WAVE/ALSA/PipeWire 7.1 order: 0 FL, 1 FR, 2 FC, 3 LFE, 4 BL,
// 5 BR, 6 SL, 7 SR; outputs 0 left ear, 1 right ear. HeSuVi has no LFE
// responses: the LFE takes the centre's (channels 6 and 13).
Layout hesuvi_layout() {
  enum : std::size_t { FL, FR, FC, LFE, BL, BR, SL, SR };
  return {"hesuvi",
          8,
          2,
          14,
          "FL-left, FL-right, SL-left, SL-right, BL-left, BL-right, FC-left, FR-right, FR-left, "
          "SR-right, SR-left, BR-right, BR-left, FC-right",
          {{0, FL, 0},
           {1, FL, 1},
           {2, SL, 0},
           {3, SL, 1},
           {4, BL, 0},
           {5, BL, 1},
           {6, FC, 0},
           {7, FR, 1},
           {8, FR, 0},
           {9, SR, 1},
           {10, SR, 0},
           {11, BR, 1},
           {12, BR, 0},
           {13, FC, 1},
           {6, LFE, 0},
           {13, LFE, 1}}};
}

Layout dense_layout(std::size_t inputs, std::size_t outputs) {
  Layout layout{"dense", inputs, outputs, inputs * outputs, "input k % inputs -> output k / inputs",
                {}};
  for (std::size_t k = 0; k < inputs * outputs; ++k)
    layout.routes.push_back({k, k % inputs, k / inputs});
  return layout;
}

std::vector<MatrixPath> read_dense(const Reader& reader, const toml::table& dense,
                                   std::size_t inputs, std::size_t outputs,
                                   const MatrixFileOptions& options) {
  reader.check_known(dense, "dense", {"file", "gain_db", "layout"});
  const std::string layout_name = reader.string(dense, "dense", "layout").value_or("dense");
  Layout layout;
  if (layout_name == "dense") {
    layout = dense_layout(inputs, outputs);
  } else if (layout_name == "true-stereo") {
    layout = true_stereo_layout();
  } else if (layout_name == "hesuvi") {
    layout = hesuvi_layout();
  } else {
    reader.fail("dense.layout", *dense.get("layout"),
                "unknown layout \"" + layout_name +
                    "\" (known: \"dense\", \"true-stereo\", \"hesuvi\"; a SOFA set is a [sofa] "
                    "table)");
  }
  if (layout.inputs != inputs || layout.outputs != outputs)
    reader.fail("dense.layout", *dense.get("layout"),
                "layout \"" + layout_name + "\" has " + std::to_string(layout.inputs) +
                    " inputs and " + std::to_string(layout.outputs) +
                    " outputs; the file says inputs = " + std::to_string(inputs) +
                    ", outputs = " + std::to_string(outputs));
  const auto file = reader.string(dense, "dense", "file");
  if (!file) reader.fail("dense: needs a file");
  const RateFile chosen = rate_file_of(reader, "dense.file", *dense.get("file"), *file, options);
  const fs::path& resolved = chosen.file;
  const double gain_db = reader.number(dense, "dense", "gain_db", -120.0, 40.0).value_or(0.0);
  std::vector<std::vector<float>> channels;
  try {
    channels = load_filter_channels(resolved, options, chosen.named_rate);
  } catch (const std::exception& e) {
    reader.fail(std::string("dense: ") + e.what());
  }
  if (channels.size() != layout.channels) {
    if (layout_name == "dense")
      reader.fail("dense: " + resolved.string() + " has " + std::to_string(channels.size()) +
                  " channels; a " + std::to_string(inputs) + " -> " + std::to_string(outputs) +
                  " matrix needs inputs x outputs = " + std::to_string(inputs * outputs));
    reader.fail("dense: " + resolved.string() + " has " + std::to_string(channels.size()) +
                " channels; layout \"" + layout_name + "\" takes " +
                std::to_string(layout.channels) + " (" + layout.order + ")");
  }
  std::vector<MatrixPath> paths;
  for (const ChannelRoute& route : layout.routes) {
    const std::vector<float>& taps = channels[route.channel];
    bool silent = true;
    for (float t : taps) silent = silent && t == 0.0f;
    if (silent) continue;
    MatrixPath path;
    path.input = route.input;
    path.output = route.output;
    path.gain_db = gain_db;
    path.taps = taps;
    path.source = resolved.string() + " channel " + std::to_string(route.channel);
    path.file = resolved;
    paths.push_back(std::move(path));
  }
  if (paths.empty()) reader.fail("dense: every channel of " + resolved.string() + " is zero");
  return paths;
}

// A SOFA HRTF set rendering virtual sources binaurally: each source's input
// reaches output 0 (left ear) and output 1 (right ear) through the responses
// of the measured direction nearest to the source's, with the set's delays.
std::vector<MatrixPath> read_sofa(const Reader& reader, const toml::table& sofa, std::size_t inputs,
                                  std::size_t outputs, const MatrixFileOptions& options) {
  reader.check_known(sofa, "sofa", {"file", "gain_db", "interpolate", "source"});
  if (outputs != 2)
    reader.fail(
        "sofa: a SOFA set renders binaurally, to outputs 0 (left ear) and 1 (right ear); "
        "the file says outputs = " +
        std::to_string(outputs));
  const auto file = reader.string(sofa, "sofa", "file");
  if (!file) reader.fail("sofa: needs a file (a SOFA HRTF set)");
  // A set measured at each rate may be named by "$samplerate$"; none is resampled.
  const fs::path resolved =
      rate_file_of(reader, "sofa.file", *sofa.get("file"), *file, options, /*may_resample=*/false)
          .file;
  const double gain_db = reader.number(sofa, "sofa", "gain_db", -120.0, 40.0).value_or(0.0);
  const bool interpolate = reader.boolean(sofa, "sofa", "interpolate").value_or(false);
  const toml::node* sources = sofa.get("source");
  if (sources == nullptr)
    reader.fail(
        "sofa: needs [[sofa.source]] tables (input, azimuth, elevation), one per "
        "virtual source");
  if (!sources->is_array_of_tables() || sources->as_array()->empty())
    reader.fail("sofa.source", *sources,
                "expected [[sofa.source]] tables (input, azimuth, elevation), got " +
                    std::string(type_name(*sources)));
  SofaSet set;
  try {
    set = load_sofa_file(resolved);
  } catch (const std::exception& e) {
    reader.fail(std::string("sofa.file: ") + e.what());
  }
  if (options.sample_rate > 0 && set.sample_rate != options.sample_rate)
    reader.fail("sofa.file: " + resolved.string() + " is measured at " +
                std::to_string(set.sample_rate) + " Hz and the signal is at " +
                std::to_string(options.sample_rate) +
                " Hz; tapstream does not resample a SOFA set (use one measured at " +
                std::to_string(options.sample_rate) + " Hz)");
  if (set.taps > options.max_taps)
    reader.fail("sofa.file: " + resolved.string() + " has responses of " +
                std::to_string(set.taps) + " taps, more than the maximum of " +
                std::to_string(options.max_taps));
  std::vector<MatrixPath> paths;
  std::map<std::size_t, std::size_t> source_of_input;
  const toml::array& array = *sources->as_array();
  for (std::size_t i = 0; i < array.size(); ++i) {
    const toml::table& table = *array[i].as_table();
    const std::string name = "sofa.source[" + std::to_string(i) + "]";
    reader.check_known(table, name, {"input", "azimuth", "elevation", "gain_db"});
    const auto input = reader.integer(table, name, "input", 0, std::int64_t(inputs) - 1);
    const auto azimuth = reader.number(table, name, "azimuth", -360.0, 360.0);
    const auto elevation = reader.number(table, name, "elevation", -90.0, 90.0);
    if (!input || !azimuth || !elevation)
      reader.fail(name + ": needs input, azimuth and elevation (degrees)");
    const auto [earlier, fresh] = source_of_input.emplace(std::size_t(*input), i);
    if (!fresh)
      reader.fail(name + ": input " + std::to_string(*input) +
                  " already has a source (sofa.source[" + std::to_string(earlier->second) +
                  "]); one source per input");
    const double source_gain = reader.number(table, name, "gain_db", -120.0, 40.0).value_or(0.0);
    const SofaDirection wanted{*azimuth, *elevation};
    SofaSet::Blend blend;
    if (interpolate) {
      blend = set.interpolation(wanted);
    } else {
      blend.measurements = {set.nearest(wanted)};
      blend.weights = {1.0};
    }
    std::string taken;
    for (std::size_t b = 0; b < blend.measurements.size(); ++b) {
      const SofaDirection& got = set.directions[blend.measurements[b]];
      taken += fmt::format(
          "{}measurement {} (azimuth {}, elevation {}, {:.2f} degrees away{})", b == 0 ? "" : ", ",
          blend.measurements[b], got.azimuth, got.elevation, SofaSet::angle_between(wanted, got),
          blend.weights.size() > 1 ? fmt::format(", weight {:.3f}", blend.weights[b])
                                   : std::string());
    }
    spdlog::info("{}: {} (input {}, azimuth {}, elevation {}) takes {}", resolved.string(), name,
                 *input, *azimuth, *elevation, taken);
    for (std::size_t ear = 0; ear < 2; ++ear) {
      MatrixPath path;
      path.input = std::size_t(*input);
      path.output = ear;
      path.gain_db = gain_db + source_gain;
      // A blend of responses with different delays is not the response of any
      // direction: interpolation needs the neighbours' delays equal.
      path.delay_frames = set.delays[blend.measurements.front() * 2 + ear];
      for (std::size_t m : blend.measurements) {
        if (set.delays[m * 2 + ear] != path.delay_frames)
          reader.fail(name + ": interpolate = true blends measurements " +
                      std::to_string(blend.measurements.front()) + " and " + std::to_string(m) +
                      ", whose Data.Delay differ (" + std::to_string(path.delay_frames) + " and " +
                      std::to_string(set.delays[m * 2 + ear]) +
                      " frames); set interpolate = false to take the nearest");
      }
      std::vector<double> sum(set.taps, 0.0);
      for (std::size_t b = 0; b < blend.measurements.size(); ++b) {
        const float* response = set.response(blend.measurements[b], ear);
        for (std::size_t t = 0; t < set.taps; ++t) sum[t] += blend.weights[b] * double(response[t]);
      }
      path.taps.assign(sum.begin(), sum.end());
      path.source = resolved.string() +
                    (blend.measurements.size() == 1
                         ? " measurement " + std::to_string(blend.measurements.front())
                         : std::string(" interpolated")) +
                    (ear == 0 ? " left ear" : " right ear");
      path.file = resolved;
      paths.push_back(std::move(path));
    }
  }
  return paths;
}

}  // namespace

RoutingMatrix read_matrix(const Reader& reader, const toml::table& root,
                          const MatrixFileOptions& options) {
  const auto inputs = reader.integer(root, "", "inputs", 1, kMaxChannels);
  const auto outputs = reader.integer(root, "", "outputs", 1, kMaxChannels);
  if (!inputs || !outputs) reader.fail("a matrix needs both inputs and outputs");
  const toml::node* path = root.get("path");
  const toml::table* dense = reader.table(root, "dense");
  const toml::table* sofa = reader.table(root, "sofa");
  if (int(path != nullptr) + int(dense != nullptr) + int(sofa != nullptr) > 1)
    reader.fail("give one of [[path]] tables, a [dense] table or a [sofa] table, not several");
  if (path == nullptr && dense == nullptr && sofa == nullptr)
    reader.fail("a matrix needs [[path]] tables, a [dense] table or a [sofa] table");
  const std::size_t n_in = std::size_t(*inputs), n_out = std::size_t(*outputs);
  std::vector<MatrixPath> paths = path != nullptr ? read_sparse(reader, *path, n_in, n_out, options)
                                  : dense != nullptr
                                      ? read_dense(reader, *dense, n_in, n_out, options)
                                      : read_sofa(reader, *sofa, n_in, n_out, options);
  try {
    return RoutingMatrix::make(std::size_t(*inputs), std::size_t(*outputs), std::move(paths),
                               options.max_taps);
  } catch (const std::invalid_argument& e) {
    reader.fail(e.what());
  }
}

namespace {

toml::table parse_matrix_file(const fs::path& file) {
  std::string text;
  try {
    // A device or FIFO is refused by the open descriptor, before any read.
    RegularFile opened(file);
    text = opened.read_all(kMaxMatrixFileBytes, "as a matrix file");
  } catch (const RegularFileError& e) {
    throw ConfigError(std::string(e.what()) + " (the matrix file)");
  }
  toml::table root = parse_toml(text, file.string());
  Reader(file.string(), file.parent_path())
      .check_known(root, "", {"inputs", "outputs", "path", "dense", "sofa"});
  return root;
}

}  // namespace

namespace {

// The matrix file `file` names for `sample_rate` (see choose_rate_file).
RateFile matrix_file_for_rate(const fs::path& file, int sample_rate, bool nearest) {
  try {
    return choose_rate_file(file, sample_rate, nearest);
  } catch (const RateFileError& e) {
    throw ConfigError(std::string(e.what()) + " (the matrix file)");
  }
}

}  // namespace

RoutingMatrix load_matrix_file(const fs::path& pattern, const MatrixFileOptions& options) {
  const RateFile chosen = matrix_file_for_rate(pattern, options.sample_rate, options.resample);
  const fs::path& file = chosen.file;
  MatrixFileOptions within = options;
  if (chosen.named_rate != 0) within.named_rate = chosen.named_rate;
  const toml::table root = parse_matrix_file(file);
  return read_matrix(Reader(file.string(), file.parent_path()), root, within);
}

MatrixShape read_matrix_shape(const fs::path& pattern, int sample_rate) {
  const fs::path file = matrix_file_for_rate(pattern, sample_rate, true).file;
  const toml::table root = parse_matrix_file(file);
  const Reader reader(file.string(), file.parent_path());
  const auto inputs = reader.integer(root, "", "inputs", 1, kMaxChannels);
  const auto outputs = reader.integer(root, "", "outputs", 1, kMaxChannels);
  if (!inputs || !outputs) reader.fail("a matrix needs both inputs and outputs");
  return {std::size_t(*inputs), std::size_t(*outputs)};
}

std::vector<float> load_path_filter(const fs::path& pattern, const MatrixFileOptions& options) {
  const RateFile chosen = choose_rate_file(pattern, options.sample_rate, options.resample);
  const fs::path& file = chosen.file;
  std::vector<std::vector<float>> channels = load_filter_channels(file, options, chosen.named_rate);
  if (channels.size() != 1) {
    throw std::invalid_argument(file.string() + " has " + std::to_string(channels.size()) +
                                " channels; a path takes one filter");
  }
  return std::move(channels.front());
}

}  // namespace tapstream
