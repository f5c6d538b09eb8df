#include "daemon/config/config.hpp"

#include <regex.h>
#include <toml++/toml.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <optional>

#include "daemon/config/gain_range.hpp"
#include "daemon/config/matrix_config.hpp"
#include "daemon/config/toml_reader.hpp"
#include "daemon/control/http_request_policy.hpp"
#include "dsp/files/rate_file_name.hpp"
#include "dsp/files/regular_file.hpp"
#include "dsp/model/engine_tuning.hpp"
#include "dsp/model/routing_matrix.hpp"

namespace tapstream {
namespace {

using namespace toml_reading;

namespace fs = std::filesystem;

// A configuration is a few kilobytes; a file far larger is not one.
constexpr std::uint64_t kMaxConfigFileBytes = std::uint64_t(4) << 20;
constexpr std::size_t max_socket_path = 107;  // sizeof(sockaddr_un::sun_path) - 1 on Linux

EndpointConfig read_endpoint(const Reader& reader, const toml::table& root, std::string_view name,
                             bool is_input) {
  EndpointConfig endpoint;
  const toml::table* table = reader.table(root, name);
  if (table == nullptr) return endpoint;
  if (is_input) {
    reader.check_known(*table, name, {"device", "file", "realtime"});
  } else {
    reader.check_known(*table, name, {"device", "file"});
  }
  const toml::node* device = table->get("device");
  const toml::node* file = table->get("file");
  if (device != nullptr && file != nullptr) {
    reader.fail(std::string(name) + ": give either device or file, not both");
  }
  if (device != nullptr) {
    const std::string key = Reader::qualified(name, "device");
    if (device->is_integer()) {
      endpoint.device_index = static_cast<int>(*reader.integer(*table, name, "device", 0, 4095));
    } else if (device->is_string()) {
      const std::string value = *reader.string(*table, name, "device");
      if (value != "default") endpoint.device_name = value;
    } else {
      reader.fail(key, *device,
                  std::string("expected a device name or index, got ") + type_name(*device));
    }
  }
  if (file != nullptr) {
    const std::string key = Reader::qualified(name, "file");
    endpoint.file = reader.resolve(*reader.string(*table, name, "file"));
    if (is_input) {
      reader.require_file(key, *file, endpoint.file);
    } else {
      reader.require_parent_directory(key, *file, endpoint.file);
      std::error_code error;
      if (fs::is_directory(endpoint.file, error)) reader.fail(key, *file, "is a directory");
    }
  }
  if (is_input) {
    if (auto realtime = reader.boolean(*table, name, "realtime")) {
      if (file == nullptr) {
        reader.fail(Reader::qualified(name, "realtime"), *table->get("realtime"),
                    "only applies to input.file");
      }
      endpoint.realtime = *realtime;
    }
  }
  return endpoint;
}

// [filter] matrix = "m.toml": the routing-matrix file `process --matrix`
// takes. Its inputs and outputs are the stream's channels; its paths are read
// (and every one checked) when the daemon starts or reloads.
// A filter or matrix file the configuration names (`key`): one that exists,
// or with "$samplerate$" in it one for the rate (any rate with sample_rate =
// "device"; the nearest one too when [filter] resample is on). Checked
// again, for the rate in force, whenever the filters are read.
void require_filter_file(const Reader& reader, const LiveConfig& config, std::string_view key,
                         const toml::node& node, const fs::path& path) {
  if (!names_sample_rate(path)) {
    reader.require_file(key, node, path);
    return;
  }
  try {
    const int rate = config.sample_rate_from_device ? 0 : config.sample_rate;
    reader.require_file(key, node, choose_rate_file(path, rate, config.resample_filters).file);
  } catch (const RateFileError& e) {
    reader.fail(key, node, e.what());
  }
}

void read_matrix_file(const Reader& reader, const toml::table& root, const toml::table& table,
                      LiveConfig& config) {
  const toml::node& node = *table.get("matrix");
  if (const toml::node* channels = root.get("channels")) {
    reader.fail("channels", *channels,
                "not with filter.matrix: the matrix file gives the inputs and outputs");
  }
  const auto name = reader.string(table, "filter", "matrix");
  config.matrix_file = reader.resolve(*name);
  require_filter_file(reader, config, "filter.matrix", node, config.matrix_file);
  const MatrixShape shape = read_matrix_shape(
      config.matrix_file, config.sample_rate_from_device ? 0 : config.sample_rate);
  config.matrix_inputs = shape.inputs;
  config.channels = shape.outputs;
}

void read_filter(const Reader& reader, const toml::table& root, LiveConfig& config) {
  const toml::table* table = reader.table(root, "filter");
  if (table == nullptr) {
    reader.fail("missing [filter] table with file = \"...\", files = [...] or matrix = \"m.toml\"");
  }
  reader.check_known(*table, "filter",
                     {"file", "files", "matrix", "gain_db", "watch", "max_taps", "max_delay_frames",
                      "ignore_sample_rate", "resample"});
  const toml::node* file = table->get("file");
  const toml::node* files = table->get("files");
  const toml::node* matrix = table->get("matrix");
  if (int(file != nullptr) + int(files != nullptr) + int(matrix != nullptr) > 1) {
    reader.fail(
        "filter: give one of file (one filter for all channels), files (one per channel) or "
        "matrix (a routing-matrix file)");
  }
  if (file == nullptr && files == nullptr && matrix == nullptr) {
    reader.fail(
        "filter: missing file = \"...\" (one filter for all channels), files = [...] (one per "
        "channel) or matrix = \"m.toml\" (a routing-matrix file)");
  }
  // Before the files: it says whether a missing rate's file may be another's.
  if (auto resample = reader.boolean(*table, "filter", "resample")) {
    config.resample_filters = *resample;
  }
  if (matrix != nullptr) {
    read_matrix_file(reader, root, *table, config);
  } else if (file != nullptr) {
    const fs::path path = reader.resolve(*reader.string(*table, "filter", "file"));
    require_filter_file(reader, config, "filter.file", *file, path);
    config.filter_files = {path};
  } else {
    const toml::array* array = files->as_array();
    if (array == nullptr) {
      reader.fail("filter.files", *files,
                  std::string("expected an array of file names, got ") + type_name(*files));
    }
    if (array->size() != config.channels) {
      reader.fail("filter.files", *files,
                  "has " + std::to_string(array->size()) +
                      " entries but channels = " + std::to_string(config.channels) +
                      " (one file per channel, or filter.file for one filter for all)");
    }
    for (std::size_t i = 0; i < array->size(); ++i) {
      const toml::node& entry = *array->get(i);
      const std::string key = "filter.files[" + std::to_string(i) + "]";
      if (!entry.is_string() || entry.as_string()->get().empty()) {
        reader.fail(key, entry, "expected a non-empty file name");
      }
      const fs::path path = reader.resolve(entry.as_string()->get());
      require_filter_file(reader, config, key, entry, path);
      config.filter_files.push_back(path);
    }
  }
  if (auto gain = reader.number(*table, "filter", "gain_db", min_gain_db, max_gain_db))
    config.gain_db = *gain;
  if (auto watch = reader.boolean(*table, "filter", "watch")) config.watch_filters = *watch;
  if (auto ignore = reader.boolean(*table, "filter", "ignore_sample_rate")) {
    config.ignore_filter_sample_rate = *ignore;
  }
  if (auto max_taps = reader.integer(*table, "filter", "max_taps", 0, 1 << 20)) {
    config.engine.max_taps = static_cast<std::size_t>(*max_taps);
    config.max_taps_given = true;
  }
  if (auto max_delay = reader.integer(*table, "filter", "max_delay_frames", 0,
                                      std::int64_t(RoutingMatrix::kMaxDelayFrames))) {
    config.engine.max_delay_frames = static_cast<std::size_t>(*max_delay);
  }
}

void read_engine(const Reader& reader, const toml::table& root, LiveConfig& config) {
  const toml::table* table = reader.table(root, "engine");
  if (table == nullptr) return;
  std::vector<std::string_view> known = {"backend", "algorithm", "streams", "kernel",
                                         "device",  "devices",   "spin_us"};
  for (const auto& key : engine_tuning_keys()) known.push_back(key.name);
  reader.check_known(*table, "engine", known);
  // Not parse_backend(): that would link the engines into everything that reads a config.
  const std::string backend =
      reader.one_of(*table, "engine", "backend", {"auto", "cpu", "cuda"}, "auto");
  config.backend = backend == "cpu"    ? Backend::cpu
                   : backend == "cuda" ? Backend::cuda
                                       : Backend::automatic;
  const std::string algorithm =
      reader.one_of(*table, "engine", "algorithm", {"auto", "direct", "fft"}, "auto");
  config.engine.algorithm = algorithm == "direct" ? Algorithm::direct
                            : algorithm == "fft"  ? Algorithm::fft
                                                  : Algorithm::automatic;
  if (auto streams = reader.integer(*table, "engine", "streams", 1, 16)) {
    config.engine.streams = static_cast<int>(*streams);
  }
  if (auto kernel = reader.string(*table, "engine", "kernel")) config.engine.kernel = *kernel;
  if (auto device = reader.integer(*table, "engine", "device", 0, 255)) {
    config.engine.device = static_cast<int>(*device);
  }
  if (const toml::node* devices = table->get("devices")) {
    if (table->contains("device")) {
      reader.fail("engine.devices", *devices,
                  "give engine.device (one GPU) or engine.devices (several), not both");
    }
    try {
      if (const auto* text = devices->as_string()) {
        config.devices = parse_device_list(text->get());
      } else if (const auto* list = devices->as_array()) {
        std::vector<long long> ordinals;
        for (const toml::node& item : *list) {
          const auto* ordinal = item.as_integer();
          if (ordinal == nullptr) {
            throw std::invalid_argument("expected GPU numbers, got " +
                                        std::string(toml_reading::type_name(item)));
          }
          ordinals.push_back(ordinal->get());
        }
        config.devices = device_list_of(ordinals);
      } else {
        throw std::invalid_argument(std::string("expected \"all\" or a list of GPU numbers, got ") +
                                    toml_reading::type_name(*devices));
      }
    } catch (const std::invalid_argument& e) {
      reader.fail("engine.devices", *devices, e.what());
    }
  }
  if (auto spin = reader.integer(*table, "engine", "spin_us", 0, 1'000'000)) {
    config.engine_spin = std::chrono::microseconds(*spin);
  }
  for (const auto& [key, value] : *table) {
    if (!is_engine_tuning_key(key.str())) continue;
    // The tuning table parses text: a TOML string as its words, anything
    // else as TOML writes it (true, 200).
    const std::string text =
        value.is_string() ? value.as_string()->get() : toml_reading::render(value);
    try {
      set_engine_tuning(config.engine, key.str(), text);
    } catch (const std::invalid_argument& e) {
      reader.fail(std::string("engine.") + e.what());
    }
  }
}

void read_control(const Reader& reader, const toml::table& root, LiveConfig& config) {
  config.control_socket = default_control_socket();
  const toml::table* table = reader.table(root, "control");
  if (table == nullptr) return;
  reader.check_known(*table, "control",
                     {"socket", "max_gain_db", "max_upload_files", "max_upload_mib"});
  if (auto socket = reader.string(*table, "control", "socket", /*allow_empty=*/true)) {
    if (socket->empty()) {
      config.control_socket.clear();
    } else {
      config.control_socket = reader.resolve(*socket);
      if (config.control_socket.string().size() > max_socket_path) {
        reader.fail("control.socket", *table->get("socket"),
                    "path longer than " + std::to_string(max_socket_path) +
                        " bytes, too long for a Unix socket");
      }
      if (!config.control_socket.has_filename()) {
        reader.fail("control.socket", *table->get("socket"),
                    "names a directory, not a socket file");
      }
    }
  }
  // The API's ceiling for volume and gains: 0 dB unless raised here, never
  // beyond the output stage's own +20 dB.
  if (auto gain = reader.number(*table, "control", "max_gain_db", 0.0, 20.0)) {
    config.api_max_gain_db = *gain;
  }
  if (auto files = reader.integer(*table, "control", "max_upload_files", 1, 1024)) {
    config.api_max_upload_files = static_cast<std::size_t>(*files);
  }
  if (auto mib = reader.integer(*table, "control", "max_upload_mib", 1, 4096)) {
    config.api_max_upload_bytes = static_cast<std::size_t>(*mib) << 20;
  }
}

// [web] hosts = ["studio.local", "192.168.1.20"]: the names, besides the
// loopback ones, that requests to the web server may carry (lower-cased).
void read_web_hosts(const Reader& reader, const toml::node& hosts, LiveConfig& config) {
  const toml::array* array = hosts.as_array();
  if (array == nullptr) {
    reader.fail("web.hosts", hosts,
                std::string("expected an array of host names, got ") + type_name(hosts));
  }
  for (std::size_t i = 0; i < array->size(); ++i) {
    const toml::node& entry = *array->get(i);
    const std::string key = "web.hosts[" + std::to_string(i) + "]";
    if (!entry.is_string()) reader.fail(key, entry, "expected a host name");
    std::string name = entry.as_string()->get();
    for (char& c : name) c = c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    if (const std::string problem = host_name_problem(name); !problem.empty()) {
      reader.fail(key, entry, problem);
    }
    config.web_hosts.push_back(name);
  }
}

void read_web(const Reader& reader, const toml::table& root, LiveConfig& config) {
  if (const toml::table* table = reader.table(root, "web")) {
    reader.check_known(
        *table, "web",
        {"port", "address", "token", "root", "idle_timeout_s", "hosts", "requests_per_second"});
    if (auto port = reader.integer(*table, "web", "port", 0, 65535)) {
      config.web_port = static_cast<int>(*port);
    }
    if (auto address = reader.string(*table, "web", "address")) config.web_address = *address;
    if (auto token = reader.string(*table, "web", "token", /*allow_empty=*/true)) {
      config.web_token = *token;
    }
    if (auto idle = reader.integer(*table, "web", "idle_timeout_s", 2, 3600)) {
      config.web_idle_timeout = std::chrono::seconds(*idle);
    }
    if (auto rate = reader.integer(*table, "web", "requests_per_second", 1, 100000)) {
      config.web_requests_per_second = static_cast<int>(*rate);
    }
    if (auto web_root = reader.string(*table, "web", "root", /*allow_empty=*/true)) {
      if (!web_root->empty()) config.web_root = reader.resolve(*web_root);
    }
    if (const toml::node* hosts = table->get("hosts")) read_web_hosts(reader, *hosts, config);
    const bool loopback = config.web_address == "127.0.0.1" || config.web_address == "::1" ||
                          config.web_address == "localhost";
    if (config.web_port != 0 && !loopback && config.web_token.size() < 16) {
      reader.fail("web.address", *table->get("address"),
                  "is not a loopback address, so web.token must be set (16 characters or more)");
    }
  }
  if (const toml::table* table = reader.table(root, "state")) {
    reader.check_known(*table, "state", {"file"});
    if (auto file = reader.string(*table, "state", "file", /*allow_empty=*/true)) {
      if (!file->empty()) {
        config.state_file = reader.resolve(*file);
        reader.require_parent_directory("state.file", *table->get("file"), config.state_file);
      }
    }
  }
}

// [jack] connect_inputs / connect_outputs: "none", one pattern spread over
// the channels, or one pattern per channel.
JackPortPatterns read_port_patterns(const Reader& reader, const toml::table& table,
                                    std::string_view key, std::size_t channels) {
  JackPortPatterns result;
  const toml::node* node = table.get(key);
  if (node == nullptr) return result;
  const std::string name = Reader::qualified("jack", key);
  const auto check = [&](const toml::node& entry, const std::string& entry_key) {
    if (!entry.is_string() || entry.as_string()->get().empty()) {
      reader.fail(entry_key, entry,
                  "expected a JACK port name or pattern (e.g. \"system:capture_.*\")");
    }
    const std::string& pattern = entry.as_string()->get();
    regex_t compiled;
    const int error = regcomp(&compiled, pattern.c_str(), REG_EXTENDED | REG_NOSUB);
    if (error != 0) {
      char text[256];
      regerror(error, &compiled, text, sizeof text);
      reader.fail(entry_key, entry, std::string("not a valid pattern: ") + text);
    }
    regfree(&compiled);
    return pattern;
  };
  if (const toml::array* array = node->as_array()) {
    if (array->size() != channels) {
      reader.fail(name, *node,
                  "has " + std::to_string(array->size()) +
                      " entries but channels = " + std::to_string(channels) +
                      " (one pattern per channel, or one pattern for all, or \"none\")");
    }
    result.mode = JackPortPatterns::Mode::per_channel;
    for (std::size_t i = 0; i < array->size(); ++i) {
      result.patterns.push_back(check(*array->get(i), name + "[" + std::to_string(i) + "]"));
    }
    return result;
  }
  const std::string pattern = check(*node, name);
  if (pattern == "none") {
    result.mode = JackPortPatterns::Mode::none;
  } else {
    result.mode = JackPortPatterns::Mode::spread;
    result.patterns = {pattern};
  }
  return result;
}

void read_jack(const Reader& reader, const toml::table& root, LiveConfig& config) {
  const toml::table* table = reader.table(root, "jack");
  if (table == nullptr) return;
  reader.check_known(*table, "jack",
                     {"client_name", "autoconnect", "connect_inputs", "connect_outputs"});
  if (auto name = reader.string(*table, "jack", "client_name")) {
    if (name->size() > max_jack_client_name || name->find(':') != std::string::npos) {
      reader.fail(
          "jack.client_name", *table->get("client_name"),
          "must be 1 to " + std::to_string(max_jack_client_name) + " characters without ':'");
    }
    config.jack.client_name = *name;
  }
  if (auto autoconnect = reader.boolean(*table, "jack", "autoconnect")) {
    config.jack.autoconnect = *autoconnect;
  }
  config.jack.inputs =
      read_port_patterns(reader, *table, "connect_inputs", config.input_channels());
  config.jack.outputs =
      read_port_patterns(reader, *table, "connect_outputs", config.output_channels());
}

void read_log(const Reader& reader, const toml::table& root, LiveConfig& config) {
  const toml::table* table = reader.table(root, "log");
  if (table == nullptr) return;
  reader.check_known(*table, "log", {"level", "file"});
  const std::string level =
      reader.one_of(*table, "log", "level",
                    {"trace", "debug", "info", "warn", "error", "critical", "off"}, "info");
  config.log_level = spdlog::level::from_str(level);
  if (auto file = reader.string(*table, "log", "file", /*allow_empty=*/true)) {
    if (!file->empty()) {
      config.log_file = reader.resolve(*file);
      reader.require_parent_directory("log.file", *table->get("file"), config.log_file);
    }
  }
}

}  // namespace

std::string EndpointConfig::describe() const {
  if (is_file()) return "file " + file.string();
  if (!device_name.empty()) return "device '" + device_name + "'";
  if (device_index >= 0) return "device #" + std::to_string(device_index);
  return "default device";
}

fs::path default_control_socket() {
  const char* runtime_dir = std::getenv("XDG_RUNTIME_DIR");
  if (runtime_dir != nullptr && runtime_dir[0] == '/') {
    return fs::path(runtime_dir) / "tapstream" / "control.sock";
  }
  return fs::path("/tmp") / ("tapstream-" + std::to_string(::getuid())) / "control.sock";
}

LiveConfig parse_live_config(std::string_view text, const fs::path& base_dir,
                             std::string_view name) {
  const Reader reader(std::string(name), base_dir);
  const toml::table root = parse_toml(text, name);

  reader.check_known(
      root, "",
      {"sample_rate", "block_frames", "channels", "ring_margin_frames", "latency", "input",
       "output", "filter", "engine", "control", "web", "state", "jack", "log"});
  LiveConfig config;
  // An integer, or "device": the rate the device or JACK server runs at.
  if (const toml::node* rate = root.get("sample_rate"); rate != nullptr && rate->is_string()) {
    if (rate->as_string()->get() != "device") {
      reader.fail("sample_rate", *rate,
                  "expected a rate in Hz (1000 to 768000) or \"device\" (the device's own rate)");
    }
    config.sample_rate_from_device = true;
  } else if (auto value = reader.integer(root, "", "sample_rate", 1000, 768000)) {
    config.sample_rate = static_cast<int>(*value);
  }
  if (auto block = reader.integer(root, "", "block_frames", 1, 65536)) {
    config.block_frames = static_cast<std::size_t>(*block);
  }
  if (auto channels = reader.integer(root, "", "channels", 1, 256)) {
    config.channels = static_cast<std::size_t>(*channels);
  }
  if (auto margin = reader.integer(root, "", "ring_margin_frames", 0, 1 << 20)) {
    config.ring_margin_frames = static_cast<std::size_t>(*margin);
  }
  config.latency = reader.one_of(root, "", "latency", {"buffered", "zero"}, "buffered") == "zero"
                       ? LatencyMode::zero
                       : LatencyMode::buffered;
  config.input = read_endpoint(reader, root, "input", /*is_input=*/true);
  config.output = read_endpoint(reader, root, "output", /*is_input=*/false);
  if (config.input.is_file() && config.output.is_file() &&
      config.input.file == config.output.file) {
    reader.fail("output.file", *root["output"]["file"].node(),
                "is the same file as input.file; the input would be overwritten");
  }
  read_filter(reader, root, config);
  config.engine.max_block_frames = config.block_frames;
  read_engine(reader, root, config);
  read_control(reader, root, config);
  read_web(reader, root, config);
  read_jack(reader, root, config);
  read_log(reader, root, config);
  return config;
}

LiveConfig load_live_config(const fs::path& file) {
  std::string text;
  try {
    // A device or FIFO is refused by the open descriptor, before any read.
    RegularFile opened(file);
    text = opened.read_all(kMaxConfigFileBytes, "as a configuration file");
  } catch (const RegularFileError& e) {
    throw ConfigError(std::string(e.what()) + " (the configuration file)");
  }
  const fs::path absolute = fs::absolute(file).lexically_normal();
  LiveConfig config = parse_live_config(text, absolute.parent_path(), file.string());
  config.config_file = absolute;
  return config;
}

}  // namespace tapstream
