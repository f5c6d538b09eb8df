#include "daemon/config/matrix_config.hpp"

#include <cstdint>
#include <map>
#include <stdexcept>
#include <utility>
#include <vector>

#include "dsp/files/coefficient_file.hpp"
#include "dsp/files/regular_file.hpp"

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
                                                     const MatrixFileOptions& options) {
  const std::size_t channels = read_coefficient_header(file).channels;
  CoefficientFileOptions load;
  load.channels = channels;
  load.max_taps = options.max_taps;
  load.sample_rate = options.sample_rate;
  const FilterBank bank = load_filter_bank(file, load);
  std::vector<std::vector<float>> out(channels);
  for (std::size_t c = 0; c < channels; ++c) {
    const auto taps = bank.taps(c);
    out[c].assign(taps.begin(), taps.end());
  }
  return out;
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
    const fs::path resolved = reader.resolve(*file);
    reader.require_file(Reader::qualified(name, "file"), *table.get("file"), resolved);
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
        it = loaded.emplace(resolved, load_filter_channels(resolved, options)).first;
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

std::vector<MatrixPath> read_dense(const Reader& reader, const toml::table& dense,
                                   std::size_t inputs, std::size_t outputs,
                                   const MatrixFileOptions& options) {
  reader.check_known(dense, "dense", {"file", "gain_db"});
  const auto file = reader.string(dense, "dense", "file");
  if (!file) reader.fail("dense: needs a file");
  const fs::path resolved = reader.resolve(*file);
  reader.require_file("dense.file", *dense.get("file"), resolved);
  const double gain_db = reader.number(dense, "dense", "gain_db", -120.0, 40.0).value_or(0.0);
  std::vector<std::vector<float>> channels;
  try {
    channels = load_filter_channels(resolved, options);
  } catch (const std::exception& e) {
    reader.fail(std::string("dense: ") + e.what());
  }
  if (channels.size() != inputs * outputs)
    reader.fail("dense: " + resolved.string() + " has " + std::to_string(channels.size()) +
                " channels; a " + std::to_string(inputs) + " -> " + std::to_string(outputs) +
                " matrix needs inputs x outputs = " + std::to_string(inputs * outputs));
  std::vector<MatrixPath> paths;
  for (std::size_t k = 0; k < channels.size(); ++k) {
    bool silent = true;
    for (float t : channels[k]) silent = silent && t == 0.0f;
    if (silent) continue;
    MatrixPath path;
    path.input = k % inputs;
    path.output = k / inputs;
    path.gain_db = gain_db;
    path.taps = std::move(channels[k]);
    path.source = resolved.string() + " channel " + std::to_string(k);
    path.file = resolved;
    paths.push_back(std::move(path));
  }
  if (paths.empty()) reader.fail("dense: every channel of " + resolved.string() + " is zero");
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
  if (path != nullptr && dense != nullptr)
    reader.fail("give either [[path]] tables or a [dense] table, not both");
  if (path == nullptr && dense == nullptr)
    reader.fail("a matrix needs [[path]] tables or a [dense] table");
  std::vector<MatrixPath> paths =
      path != nullptr
          ? read_sparse(reader, *path, std::size_t(*inputs), std::size_t(*outputs), options)
          : read_dense(reader, *dense, std::size_t(*inputs), std::size_t(*outputs), options);
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
      .check_known(root, "", {"inputs", "outputs", "path", "dense"});
  return root;
}

}  // namespace

RoutingMatrix load_matrix_file(const fs::path& file, const MatrixFileOptions& options) {
  const toml::table root = parse_matrix_file(file);
  return read_matrix(Reader(file.string(), file.parent_path()), root, options);
}

MatrixShape read_matrix_shape(const fs::path& file) {
  const toml::table root = parse_matrix_file(file);
  const Reader reader(file.string(), file.parent_path());
  const auto inputs = reader.integer(root, "", "inputs", 1, kMaxChannels);
  const auto outputs = reader.integer(root, "", "outputs", 1, kMaxChannels);
  if (!inputs || !outputs) reader.fail("a matrix needs both inputs and outputs");
  return {std::size_t(*inputs), std::size_t(*outputs)};
}

std::vector<float> load_path_filter(const fs::path& file, const MatrixFileOptions& options) {
  std::vector<std::vector<float>> channels = load_filter_channels(file, options);
  if (channels.size() != 1) {
    throw std::invalid_argument(file.string() + " has " + std::to_string(channels.size()) +
                                " channels; a path takes one filter");
  }
  return std::move(channels.front());
}

}  // namespace tapstream
