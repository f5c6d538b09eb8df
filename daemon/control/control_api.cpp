#include "daemon/control/control_api.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <toml++/toml.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "daemon/config/config_keys.hpp"
#include "daemon/control/file_text.hpp"
#include "daemon/control/trace_document.hpp"
#include "daemon/pipeline/live_pipeline.hpp"

namespace tapstream {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

const char* to_string(ApiErrorType type) {
  switch (type) {
    case ApiErrorType::bad_request:
      return "bad_request";
    case ApiErrorType::unknown_request:
      return "unknown_request";
    case ApiErrorType::invalid_value:
      return "invalid_value";
    case ApiErrorType::rejected:
      return "rejected";
    case ApiErrorType::not_allowed:
      return "not_allowed";
    case ApiErrorType::internal:
      break;
  }
  return "internal";
}

namespace {

constexpr const char* known_requests[] = {
    "list_requests",    "get_state",          "get_info",      "get_stats",  "get_meters",
    "subscribe_meters", "unsubscribe_meters", "get_volume",    "set_volume", "set_mute",
    "list_filters",     "get_filter",         "upload_filter", "get_config", "validate_config",
    "apply_config",     "patch_config",       "undo_config",   "get_log",    "get_status",
    "get_trace",        "set_paths",          "load",          "reload",     "stop"};

[[noreturn]] void fail(ApiErrorType type, const std::string& message) {
  throw ApiError(type, message);
}

const json& field(const json& request, const char* name) {
  const auto it = request.find(name);
  if (it == request.end()) fail(ApiErrorType::bad_request, fmt::format("missing field '{}'", name));
  return *it;
}

std::string string_field(const json& request, const char* name) {
  const json& value = field(request, name);
  if (!value.is_string())
    fail(ApiErrorType::bad_request, fmt::format("'{}' must be a string", name));
  return value.get<std::string>();
}

double number_field(const json& request, const char* name) {
  const json& value = field(request, name);
  if (!value.is_number())
    fail(ApiErrorType::bad_request, fmt::format("'{}' must be a number", name));
  return value.get<double>();
}

// "master" / "all" (nullopt) or a channel number.
std::optional<std::size_t> channel_field(const json& request, std::size_t channels,
                                         const char* word) {
  const json& value = field(request, "channel");
  if (value.is_string() && value.get<std::string>() == word) return std::nullopt;
  if (!value.is_number_unsigned()) {
    fail(ApiErrorType::bad_request,
         fmt::format("'channel' must be \"{}\" or a channel number from 0", word));
  }
  const auto channel = value.get<std::uint64_t>();
  if (channel >= channels) {
    fail(ApiErrorType::invalid_value,
         fmt::format("channel {} does not exist (0..{})", channel, channels - 1));
  }
  return static_cast<std::size_t>(channel);
}

json levels_json(const std::vector<ChannelLevels>& levels) {
  json out = json::array();
  for (const auto& l : levels) {
    out.push_back({{"peak", l.peak},
                   {"rms", l.rms},
                   {"peak_since", l.peak_since},
                   {"rms_since", l.rms_since},
                   {"clipped", l.clipped},
                   {"clipped_total", l.clipped_total}});
  }
  return out;
}

std::string base64_decode(std::string_view text, const std::string& what = "'data_base64'") {
  static constexpr std::string_view alphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve(text.size() * 3 / 4);
  std::uint32_t bits = 0;
  int count = 0;
  for (char c : text) {
    if (c == '=' || c == '\n' || c == '\r') continue;
    const auto index = alphabet.find(c);
    if (index == std::string_view::npos) fail(ApiErrorType::bad_request, what + " is not base64");
    bits = (bits << 6) | static_cast<std::uint32_t>(index);
    count += 6;
    if (count >= 8) {
      count -= 8;
      out.push_back(static_cast<char>((bits >> count) & 0xff));
    }
  }
  return out;
}

// Little-endian float32 samples, whatever the host's byte order.
std::vector<float> little_endian_floats(std::string_view bytes) {
  std::vector<float> out(bytes.size() / 4);
  for (std::size_t i = 0; i < out.size(); ++i) {
    std::uint32_t word = 0;
    for (int b = 3; b >= 0; --b)
      word = (word << 8) | static_cast<unsigned char>(bytes[4 * i + std::size_t(b)]);
    out[i] = std::bit_cast<float>(word);
  }
  return out;
}

std::string safe_file_name(const std::string& name) {
  std::string out;
  for (char c : fs::path(name).filename().string()) {
    const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
    out.push_back(ok ? c : '_');
  }
  if (out.empty() || out.front() == '.' || out.size() > 100) {
    fail(ApiErrorType::invalid_value,
         "'name' must be a file name of 1..100 characters not starting with '.'");
  }
  return out;
}

// JSON patch values into TOML: objects merge, null removes, the rest replaces.
void merge_into(toml::table& table, const json& patch, const std::string& where) {
  for (const auto& [key, value] : patch.items()) {
    const std::string name = where.empty() ? key : where + "." + key;
    if (value.is_null()) {
      table.erase(key);
    } else if (value.is_object()) {
      if (!table.contains(key) || !table[key].is_table())
        table.insert_or_assign(key, toml::table{});
      merge_into(*table[key].as_table(), value, name);
    } else if (value.is_array()) {
      toml::array array;
      for (const auto& item : value) {
        if (item.is_string()) {
          array.push_back(item.get<std::string>());
        } else if (item.is_number_integer()) {
          array.push_back(item.get<std::int64_t>());
        } else if (item.is_number()) {
          array.push_back(item.get<double>());
        } else if (item.is_boolean()) {
          array.push_back(item.get<bool>());
        } else {
          fail(ApiErrorType::bad_request,
               fmt::format("patch {}: arrays hold only plain values", name));
        }
      }
      table.insert_or_assign(key, std::move(array));
    } else if (value.is_string()) {
      table.insert_or_assign(key, value.get<std::string>());
    } else if (value.is_boolean()) {
      table.insert_or_assign(key, value.get<bool>());
    } else if (value.is_number_integer()) {
      table.insert_or_assign(key, value.get<std::int64_t>());
    } else {
      table.insert_or_assign(key, value.get<double>());
    }
  }
}

// Removes a dotted key ("filter.max_taps") from a table; false if absent.
bool erase_dotted(toml::table& root, const std::string& dotted) {
  toml::table* table = &root;
  std::string rest = dotted;
  for (auto dot = rest.find('.'); dot != std::string::npos; dot = rest.find('.')) {
    toml::node* node = table->get(rest.substr(0, dot));
    if (node == nullptr || !node->is_table()) return false;
    table = node->as_table();
    rest = rest.substr(dot + 1);
  }
  return table->erase(rest) > 0;
}

// The key a ConfigError message names ("filter.max_taps = 0: ..." or
// "unknown key 'x' in [filter] ..."); "" when it names none.
std::string key_of(const std::string& message) {
  if (message.rfind("unknown key '", 0) == 0) {
    const auto end = message.find('\'', 13);
    if (end == std::string::npos) return {};
    std::string key = message.substr(13, end - 13);
    const auto table = message.find(" in [", end);
    if (table == end + 1) {
      const auto close = message.find(']', table);
      key = message.substr(table + 5, close - table - 5) + "." + key;
    }
    return key;
  }
  const auto equals = message.find(" = ");
  if (equals == std::string::npos) return {};
  const std::string key = message.substr(0, equals);
  return key.find_first_of(" '\"[") == std::string::npos ? key : std::string();
}

// True when `path` lies inside `folder`, both with their symlinks resolved
// (a file that does not exist yet is resolved as far as it exists).
bool lies_inside(const fs::path& path, const fs::path& folder) {
  std::error_code error;
  const fs::path file = fs::weakly_canonical(path, error);
  if (error) return false;
  const fs::path root = fs::weakly_canonical(folder, error);
  if (error) return false;
  const fs::path relative = file.lexically_relative(root);
  return !relative.empty() && relative != "." && *relative.begin() != "..";
}

std::string shortened(const std::string& text) {
  return text.size() <= 200 ? text : text.substr(0, 197) + "...";
}

std::string read_text(const fs::path& file) {
  std::ifstream stream(file, std::ios::binary);
  std::ostringstream text;
  text << stream.rdbuf();
  return text.str();
}

}  // namespace

struct ControlApi::Impl {
  LivePipeline& pipeline;
  ApiHooks hooks;
  fs::path upload_dir;

  mutable std::mutex mutex;
  std::mutex upload_mutex;                  // one upload at a time (room is made for it)
  std::vector<std::string> config_history;  // texts applied through the API, newest last
  std::string stop_reason;
  std::uint64_t last_blocks = 0;
  Clock::time_point last_progress = Clock::now();

  Impl(LivePipeline& p, ApiHooks h, fs::path dir)
      : pipeline(p), hooks(std::move(h)), upload_dir(std::move(dir)) {}

  fs::path base_dir() const {
    const LiveConfig config = hooks.config();
    return config.config_file.empty() ? fs::current_path() : config.config_file.parent_path();
  }

  std::string current_config_text() const {
    {
      std::lock_guard lock(mutex);
      if (!config_history.empty()) return config_history.back();
    }
    const LiveConfig config = hooks.config();
    return config.config_file.empty() ? std::string() : read_text(config.config_file);
  }

  // What the daemon is doing: running, paused (the master mute silences the
  // output, processing goes on), stalled (no block for a while) or stopping.
  json state_keys(std::uint64_t blocks) {
    std::lock_guard lock(mutex);
    const auto now = Clock::now();
    if (blocks != last_blocks) {
      last_blocks = blocks;
      last_progress = now;
    }
    const double since = std::chrono::duration<double>(now - last_progress).count();
    const double block_s = double(pipeline.block_frames()) / pipeline.sample_rate();
    std::string state = "running";
    if (!stop_reason.empty()) {
      state = "stopping";
    } else if (pipeline.output_stage().muted(std::nullopt)) {
      state = "paused";
    } else if (since > std::max(0.5, 20 * block_s)) {
      state = "stalled";
    }
    return {{"state", state}, {"stop_reason", stop_reason}, {"seconds_since_last_block", since}};
  }

  // The one status document (get_status; `ctl status` prints it): the
  // daemon's (daemon/control/daemon_status.hpp), with what only the API and
  // the pipeline know. get_state, get_info and get_stats are views of it.
  json status_now() {
    if (!hooks.status) fail(ApiErrorType::internal, "status is not available");
    json document = json::parse(json_line(status_document(hooks.status())));
    const LiveStats s = pipeline.stats();
    document.update(state_keys(document.value("blocks", std::uint64_t{0})));
    document["max_taps"] = pipeline.engine_max_taps();
    document["max_gain_db"] = hooks.config().api_max_gain_db;
    document["realtime"] = pipeline.realtime_granted();
    document["ramp_ms"] =
        1000.0 * double(pipeline.output_stage().ramp_frames()) / pipeline.sample_rate();
    document["frames_in"] = s.frames_in;
    document["frames_out"] = s.frames_out;
    document["late_frames"] = s.underrun_frames;
    document["lost_frames"] = s.overrun_frames;
    document["clipped"] = pipeline.output_stage().clipped_total();
    document["engine_errors"] = s.engine_errors;
    // The web API's names for processing_us (engine time per block), from it.
    const json& processing = document["processing_us"];
    const double period_us = processing.value("block_period", 0.0);
    const double mean_us = processing.value("mean", 0.0);
    document["load"] = period_us > 0 ? mean_us / period_us : 0.0;
    document["block_us"] = {{"period", period_us},
                            {"mean", mean_us},
                            {"p50", processing.value("p50", 0.0)},
                            {"p99", processing.value("p99", 0.0)},
                            {"max", processing.value("max", 0.0)}};
    return document;
  }

  static json view(const json& document, std::initializer_list<const char*> keys) {
    json out = json::object();
    for (const char* key : keys) {
      if (document.contains(key)) out[key] = document[key];
    }
    return out;
  }
  json state() {
    return view(status_now(), {"state", "stop_reason", "seconds_since_last_block", "blocks"});
  }
  json info() {
    return view(status_now(),
                {"backend", "engine", "input", "output", "sample_rate", "channels", "block_frames",
                 "latency_frames", "latency_ms", "max_taps", "max_gain_db", "realtime", "ramp_ms"});
  }
  json stats() {
    return view(status_now(),
                {"blocks", "frames_in", "frames_out", "underruns", "late_frames", "late_periods",
                 "late_unstarted", "nonfinite_inputs", "overruns", "lost_frames", "clipped",
                 "swaps", "rejected_swaps", "engine_errors", "load", "block_us"});
  }

  json volume() const {
    const OutputStage& stage = pipeline.output_stage();
    json channels = json::array();
    for (std::size_t c = 0; c < stage.channels(); ++c) {
      channels.push_back({{"db", stage.volume_db(c)}, {"muted", stage.muted(c)}});
    }
    return {
        {"master", {{"db", stage.volume_db(std::nullopt)}, {"muted", stage.muted(std::nullopt)}}},
        {"channels", channels}};
  }

  // One entry a path of the running matrix; its index is get_filter's
  // "channel" (a filter per channel: path c is channel c -> c).
  json filters() const {
    json out = json::array();
    const auto matrix = hooks.matrix();
    for (std::size_t p = 0; p < matrix->paths().size(); ++p) {
      const MatrixPath& path = matrix->paths()[p];
      out.push_back({{"channel", p},
                     {"path", p},
                     {"input", path.input},
                     {"output", path.output},
                     {"taps", path.taps.size()},
                     {"source", path.source},
                     {"gain_db", path.gain_db},
                     {"delay_frames", path.delay_frames},
                     {"invert", path.invert}});
    }
    return out;
  }

  // A path's effective filter (delay, gain and polarity folded in).
  json filter(const json& request) const {
    const auto matrix = hooks.matrix();
    const auto channel = channel_field(request, matrix->paths().size(), "none");
    if (!channel) fail(ApiErrorType::bad_request, "'channel' must be a channel number");
    const MatrixPath& path = matrix->paths()[*channel];
    const std::vector<float> taps = path.effective_taps();
    constexpr std::size_t limit = 1 << 16;
    const std::size_t count = std::min(taps.size(), limit);
    return {{"channel", *channel},
            {"source", path.source},
            {"sample_rate", pipeline.sample_rate()},
            {"taps", std::vector<float>(taps.begin(), taps.begin() + count)},
            {"truncated", taps.size() > limit}};
  }

  json upload(const json& request) {
    const auto channel = channel_field(request, pipeline.channels(), "all");
    const std::string name = safe_file_name(string_field(request, "name"));
    std::string data;
    if (request.contains("data_base64")) {
      data = base64_decode(string_field(request, "data_base64"));
    } else {
      data = string_field(request, "data");
    }
    if (data.empty()) fail(ApiErrorType::invalid_value, "the uploaded file is empty");
    if (data.size() > max_upload_bytes) {
      fail(ApiErrorType::invalid_value, fmt::format("the uploaded file has {} bytes, more than {}",
                                                    data.size(), max_upload_bytes));
    }
    std::lock_guard lock(upload_mutex);
    std::error_code error;
    fs::create_directories(upload_dir, error);
    const fs::path file = upload_dir / name;
    make_room(file, data.size());
    write_file_atomically(file, data);
    const std::string refused =
        hooks.load(channel ? LoadRequest::channel(*channel, file) : LoadRequest::all(file));
    if (!refused.empty()) {
      fs::remove(file, error);
      fail(ApiErrorType::rejected, name + ": " + refused);
    }
    if (hooks.state_changed) hooks.state_changed();
    return {{"file", file.string()}, {"swaps", pipeline.stats().swaps}, {"filters", filters()}};
  }

  // {"paths": [{"path": P or "input": I, "output": O, "taps_base64": B64 or
  // "binary_taps": N}, ...]}: new taps for some paths, from the request
  // itself (base64 of little-endian float32) or from the binary frame's
  // data after the header, N floats each, in the order of the list.
  json set_paths(const json& request, std::string_view binary) {
    if (!hooks.set_paths || !hooks.matrix)
      fail(ApiErrorType::internal, "set_paths is not available");
    const json& list = field(request, "paths");
    if (!list.is_array() || list.empty()) {
      fail(ApiErrorType::bad_request,
           "'paths' must be a non-empty array of {\"path\": P (or \"input\": I, \"output\": O), "
           "\"taps_base64\": ... (or \"binary_taps\": N)}");
    }
    const auto matrix = hooks.matrix();
    const auto& paths = matrix->paths();
    if (list.size() > paths.size()) {
      fail(ApiErrorType::invalid_value,
           fmt::format("{} paths named; the running matrix has {}", list.size(), paths.size()));
    }
    const auto index_of = [&](const json& entry, const char* name, std::size_t end,
                              const std::string& where) {
      const double value = number_field(entry, name);
      if (!(value >= 0 && value < double(end) && value == std::floor(value))) {
        fail(ApiErrorType::invalid_value,
             fmt::format("{}: '{}' = {} is not one of 0..{}", where, name, value, end - 1));
      }
      return static_cast<std::size_t>(value);
    };
    std::vector<std::pair<std::size_t, std::vector<float>>> taps;
    std::size_t used = 0;  // bytes of `binary` taken so far
    for (std::size_t e = 0; e < list.size(); ++e) {
      const json& entry = list[e];
      const std::string where = fmt::format("paths[{}]", e);
      if (!entry.is_object()) fail(ApiErrorType::bad_request, where + " must be an object");
      std::size_t path = 0;
      if (entry.contains("path")) {
        path = index_of(entry, "path", paths.size(), where);
      } else {
        const std::size_t input = index_of(entry, "input", matrix->inputs(), where);
        const std::size_t output = index_of(entry, "output", matrix->outputs(), where);
        const auto found = std::find_if(paths.begin(), paths.end(), [&](const MatrixPath& p) {
          return p.input == input && p.output == output;
        });
        if (found == paths.end()) {
          fail(ApiErrorType::invalid_value,
               fmt::format("{}: input {} -> output {} is not a path of the running matrix", where,
                           input, output));
        }
        path = std::size_t(found - paths.begin());
      }
      const std::string name = where + " (" + RoutingMatrix::describe_path(path, paths[path]) + ")";
      const bool in_text = entry.contains("taps_base64"), in_frame = entry.contains("binary_taps");
      if (in_text == in_frame) {
        fail(ApiErrorType::bad_request,
             name + ": give exactly one of 'taps_base64' and 'binary_taps'");
      }
      if (in_text) {
        const std::string bytes =
            base64_decode(string_field(entry, "taps_base64"), name + ": 'taps_base64'");
        if (bytes.size() % 4 != 0) {
          fail(ApiErrorType::invalid_value,
               fmt::format("{}: 'taps_base64' holds {} bytes, not whole float32 taps", name,
                           bytes.size()));
        }
        taps.emplace_back(path, little_endian_floats(bytes));
      } else {
        const double count = number_field(entry, "binary_taps");
        const double left = double(binary.size() - used) / 4.0;
        if (!(count >= 1 && count == std::floor(count) && count <= left)) {
          fail(ApiErrorType::invalid_value,
               fmt::format("{}: 'binary_taps' = {}, but the binary frame has {} taps left{}", name,
                           count, std::size_t(left),
                           binary.empty() ? " (a request sent as text has none)" : ""));
        }
        const std::size_t bytes = std::size_t(count) * 4;
        taps.emplace_back(path, little_endian_floats(binary.substr(used, bytes)));
        used += bytes;
      }
    }
    if (used != binary.size()) {
      fail(ApiErrorType::invalid_value,
           fmt::format("the binary frame holds {} bytes of taps; the paths take {}", binary.size(),
                       used));
    }
    const std::string refused = hooks.set_paths(
        taps, fmt::format("set_paths of {} path{}", taps.size(), taps.size() == 1 ? "" : "s"));
    if (!refused.empty()) fail(ApiErrorType::rejected, refused);
    const LiveStats stats = pipeline.stats();
    return {{"paths", taps.size()}, {"swaps", stats.swaps}, {"block", stats.last_swap_block}};
  }

  // An upload is in use while a channel runs it or the running configuration names it.
  bool upload_in_use(const fs::path& file) const {
    const LiveConfig config = hooks.config();
    if (std::find(config.filter_files.begin(), config.filter_files.end(), file) !=
        config.filter_files.end()) {
      return true;
    }
    const auto matrix = hooks.matrix();
    for (const MatrixPath& path : matrix->paths()) {
      if (path.source == file.string() || path.source.rfind(file.string() + " ", 0) == 0) {
        return true;
      }
    }
    return false;
  }

  // Keeps the uploads within [control] max_upload_files and max_upload_mib
  // with `file` of `bytes` added: the oldest uploads not in use are removed;
  // refuses when those in use leave no room.
  void make_room(const fs::path& file, std::size_t bytes) {
    const LiveConfig config = hooks.config();
    struct Kept {
      fs::path file;
      std::uintmax_t bytes;
      fs::file_time_type written;
    };
    std::vector<Kept> kept;
    std::size_t count = 1;
    std::uintmax_t total = bytes;
    std::error_code error;
    for (const auto& entry : fs::directory_iterator(upload_dir, error)) {
      std::error_code entry_error;
      if (!entry.is_regular_file(entry_error) || entry.path() == file) continue;
      if (entry.path().extension() == ".part") continue;
      const Kept one{entry.path(), entry.file_size(entry_error),
                     entry.last_write_time(entry_error)};
      kept.push_back(one);
      ++count;
      total += one.bytes;
    }
    std::sort(kept.begin(), kept.end(),
              [](const Kept& a, const Kept& b) { return a.written < b.written; });
    const auto fits = [&] {
      return count <= config.api_max_upload_files && total <= config.api_max_upload_bytes;
    };
    for (const Kept& old : kept) {
      if (fits()) return;
      if (upload_in_use(old.file)) continue;
      if (fs::remove(old.file, error)) {
        --count;
        total -= old.bytes;
        spdlog::info("upload {} removed to make room for {} (the oldest not in use)",
                     old.file.string(), file.filename().string());
      }
    }
    if (fits()) return;
    fail(ApiErrorType::rejected,
         fmt::format("no room for {} ({} bytes): with it the uploads would be {} files of {} "
                     "bytes, more than [control] max_upload_files = {} or max_upload_mib = {} "
                     "allow, and the others are in use (running, or named by the running "
                     "configuration)",
                     file.filename().string(), bytes, count, total, config.api_max_upload_files,
                     config.api_max_upload_bytes >> 20));
  }

  static void write_file_atomically(const fs::path& file, const std::string& data) {
    const fs::path temporary = file.string() + ".part";
    {
      std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
      out.write(data.data(), static_cast<std::streamsize>(data.size()));
      out.flush();
      if (!out) fail(ApiErrorType::internal, "cannot write " + temporary.string());
    }
    fs::rename(temporary, file);
  }

  json apply(const std::string& text, bool remember) {
    std::optional<LiveConfig> parsed;
    const auto errors = validate(text, &parsed);
    if (!errors.empty()) {
      throw ApiError(
          ApiErrorType::rejected,
          "configuration refused: " + errors.front() +
              (errors.size() > 1 ? fmt::format(" (and {} more)", errors.size() - 1) : ""));
    }
    std::vector<std::string> restart_needed;
    std::string summary;
    const std::string refused = hooks.apply_config(*parsed, restart_needed, summary);
    if (!refused.empty()) fail(ApiErrorType::rejected, shown(refused));
    if (remember) {
      std::lock_guard lock(mutex);
      config_history.push_back(text);
      if (config_history.size() > 32) config_history.erase(config_history.begin());
    }
    if (hooks.state_changed) hooks.state_changed();
    return {{"restart_needed", restart_needed}, {"filters", filters()}, {"summary", summary}};
  }

  // A message about files: as it is when it names an upload, else without
  // the text of the file it quotes.
  std::string shown(const std::string& message) const {
    return message.rfind(upload_dir.string(), 0) == 0 ? message : without_file_text(message);
  }

  // What `text` is compared with for the keys only the file changes: the
  // configuration the API holds (its last, or the file's), as written.
  LiveConfig reference_config(const fs::path& base) const {
    try {
      LiveConfig reference = parse_live_config(current_config_text(), base, "config");
      reference.config_file = hooks.config().config_file;
      return reference;
    } catch (const std::exception&) {
      return hooks.config();
    }
  }

  // The files `text` names in [filter], before any is read: one that the
  // reference does not name already must be an upload (a filter, not a
  // matrix) or lie inside the configuration file's folder.
  void check_named_files(const std::string& text, const fs::path& base, const LiveConfig& reference,
                         std::vector<std::string>& errors) const {
    toml::table root;
    try {
      root = toml::parse(text);
    } catch (const std::exception&) {
      return;  // parse_live_config says why
    }
    const toml::table* filter = root["filter"].as_table();
    if (filter == nullptr) return;
    const auto check = [&](const std::string& key, const toml::node* node, bool matrix) {
      if (node == nullptr || !node->is_string()) return;
      const std::string& value = node->as_string()->get();
      fs::path path(value);
      if (path.is_relative()) path = base / path;
      path = path.lexically_normal();
      const auto& named = reference.filter_files;
      if (matrix ? path == reference.matrix_file
                 : std::find(named.begin(), named.end(), path) != named.end()) {
        return;
      }
      const bool uploaded = lies_inside(path, upload_dir);
      if (matrix ? lies_inside(path, base) && !uploaded : uploaded || lies_inside(path, base)) {
        return;
      }
      errors.push_back(fmt::format(
          "{} = \"{}\": the API may name only {} inside {} (the configuration file's folder, "
          "symlinks resolved); other files are named in the configuration file on disk",
          key, shortened(value), matrix ? "a matrix file" : "a filter it uploaded or a file",
          base.string()));
    };
    check("filter.file", filter->get("file"), false);
    check("filter.matrix", filter->get("matrix"), true);
    if (const toml::array* files = filter->get_as<toml::array>("files")) {
      for (std::size_t i = 0; i < files->size(); ++i) {
        check(fmt::format("filter.files[{}]", i), files->get(i), false);
      }
    }
  }

  // What the API may not do with a configuration that parses: change a key
  // only the file changes, raise a gain above [control] max_gain_db, or
  // store one that the next start would refuse.
  void check_parsed(const LiveConfig& config, const LiveConfig& reference,
                    std::vector<std::string>& errors) const {
    const ConfigChanges changes = config_changes(reference, config);
    if (!changes.file_only.empty()) {
      errors.push_back(fmt::format(
          "{}: only the configuration file on disk changes {} (then restart tapstream); the "
          "API may not",
          join_keys(changes.file_only), changes.file_only.size() == 1 ? "it" : "them"));
    }
    const double limit = hooks.config().api_max_gain_db;
    if (config.gain_db > limit && config.gain_db != reference.gain_db) {
      errors.push_back(fmt::format(
          "filter.gain_db = {}: above the API's limit of {} dB ([control] max_gain_db in the "
          "configuration file raises it)",
          config.gain_db, limit));
    }
    if (errors.empty() && hooks.check_start) {
      const std::string refused = hooks.check_start(config);
      if (!refused.empty()) errors.push_back(shown(refused));
    }
  }

  std::vector<std::string> validate(const std::string& text,
                                    std::optional<LiveConfig>* parsed) const {
    std::vector<std::string> errors;
    const fs::path base = base_dir();
    const LiveConfig reference = reference_config(base);
    // Before anything is read: a file outside the folder is not even opened.
    check_named_files(text, base, reference, errors);
    if (!errors.empty()) return errors;
    std::string current = text;
    const std::string prefix = "config: ";
    for (int round = 0; round < 64; ++round) {
      try {
        LiveConfig config = parse_live_config(current, base, "config");
        config.config_file = hooks.config().config_file;
        if (config.channels != pipeline.channels()) {
          errors.push_back(
              fmt::format("channels = {}: the running stream has {} (restart to change)",
                          config.channels, pipeline.channels()));
        }
        if (errors.empty()) check_parsed(config, reference, errors);
        if (errors.empty() && parsed != nullptr) *parsed = std::move(config);
        return errors;
      } catch (const ConfigError& e) {
        std::string message = e.what();
        // "config: ..." is about the text itself; anything else about a file it names.
        if (message.rfind("config:", 0) != 0) {
          errors.push_back(shown(message));
          return errors;
        }
        if (message.rfind(prefix, 0) == 0) message = message.substr(prefix.size());
        errors.push_back(message);
        // Take the culprit out and look for the next problem.
        const std::string key = key_of(message);
        if (key.empty()) return errors;
        try {
          toml::table root = toml::parse(current);
          if (!erase_dotted(root, key)) return errors;
          std::ostringstream out;
          out << root;
          current = out.str();
        } catch (const std::exception&) {
          return errors;
        }
      }
    }
    return errors;
  }

  // The owner's requests (ApiSession::owner): the control socket's alone.
  static void owner_only(const ApiSession& session, const std::string& verb) {
    if (session.owner) return;
    fail(ApiErrorType::not_allowed,
         fmt::format("'{}' is for the control socket's owner (tapstream ctl {}); over the "
                     "websocket, upload_filter loads a filter and apply_config the configuration",
                     verb, verb));
  }

  // The owner's load: {"channel": C or "all", "file"}, {"input", "output",
  // "file"} (a path) or {"matrix"} (a whole matrix file); FILE absolute.
  json owner_load(const json& request) {
    const auto absolute = [](const char* name, const json& request) {
      const std::string file = string_field(request, name);
      if (file.empty() || file.front() != '/') {
        fail(ApiErrorType::invalid_value,
             fmt::format("'{}' = \"{}\" is not an absolute path", name, shortened(file)));
      }
      return fs::path(file);
    };
    const auto number = [](const json& request, const char* name) {
      const json& value = field(request, name);
      if (!value.is_number_unsigned()) {
        fail(ApiErrorType::bad_request, fmt::format("'{}' must be a number from 0", name));
      }
      return static_cast<std::size_t>(value.get<std::uint64_t>());
    };
    const bool has_path = request.contains("input") || request.contains("output");
    const int forms =
        int(request.contains("channel")) + int(has_path) + int(request.contains("matrix"));
    if (forms != 1 || (request.contains("matrix") && request.contains("file"))) {
      fail(ApiErrorType::bad_request,
           "load takes one of {\"channel\": C or \"all\", \"file\"}, {\"input\", "
           "\"output\", \"file\"} or {\"matrix\"}");
    }
    LoadRequest load;
    if (request.contains("matrix")) {
      load = LoadRequest::whole_matrix(absolute("matrix", request));
    } else if (has_path) {
      const std::size_t input = number(request, "input");
      const std::size_t output = number(request, "output");
      load = LoadRequest::path(input, output, absolute("file", request));
    } else {
      const json& channel = request["channel"];
      if (channel.is_string() && channel.get<std::string>() == "all") {
        load = LoadRequest::all(absolute("file", request));
      } else if (channel.is_number_unsigned()) {
        load = LoadRequest::channel(number(request, "channel"), absolute("file", request));
      } else {
        fail(ApiErrorType::bad_request, "'channel' must be \"all\" or a channel number from 0");
      }
    }
    const std::string refused = hooks.load(load);
    if (!refused.empty()) fail(ApiErrorType::rejected, refused);
    const std::uint64_t block = pipeline.stats().last_swap_block;
    const std::string file = load.file.string();
    switch (load.target) {
      case LoadRequest::Target::channel:
        return {{"message",
                 fmt::format("{} installed for channel {} at block {}", file, load.input, block)}};
      case LoadRequest::Target::all_channels:
        return {{"message", fmt::format("{} installed for all channels at block {}", file, block)}};
      case LoadRequest::Target::path:
        return {{"message", fmt::format("{} installed for input {} -> output {} at block {}", file,
                                        load.input, load.output, block)}};
      case LoadRequest::Target::matrix:
        break;
    }
    return {{"message", fmt::format("matrix {} installed at block {}", file, block)}};
  }

  json dispatch(const std::string& verb, const json& request, ApiSession& session,
                std::string_view binary = {}) {
    if (verb == "set_paths") return set_paths(request, binary);
    if (!binary.empty()) {
      fail(ApiErrorType::bad_request,
           "a binary frame carries set_paths' taps; '" + verb.substr(0, 64) + "' goes as text");
    }
    OutputStage& stage = pipeline.output_stage();
    if (verb == "get_status") return status_now();
    if (verb == "get_trace") {
      // Owner only: megabytes of JSON per answer, and timing nobody else needs.
      owner_only(session, verb);
      std::size_t records = 4096;
      if (request.contains("records")) {
        const double wanted = number_field(request, "records");
        if (!(wanted >= 1 && wanted <= double(PeriodTrace::kRecords))) {
          fail(ApiErrorType::invalid_value,
               fmt::format("records must be between 1 and {}", PeriodTrace::kRecords));
        }
        records = static_cast<std::size_t>(wanted);
      }
      return trace_document(pipeline, records);
    }
    if (verb == "load" || verb == "reload" || verb == "stop") {
      owner_only(session, verb);
      if (verb == "load") return owner_load(request);
      const auto& act = verb == "reload" ? hooks.reload : hooks.stop;
      if (!act) fail(ApiErrorType::internal, verb + " is not available");
      try {
        return {{"message", act()}};
      } catch (const ApiError&) {
        throw;
      } catch (const std::exception& e) {
        fail(ApiErrorType::rejected, e.what());
      }
    }
    if (verb == "list_requests") return known_requests;
    if (verb == "get_state") return state();
    if (verb == "get_info") return info();
    if (verb == "get_stats") return stats();
    if (verb == "get_meters") return {{"levels", levels_json(stage.read_levels(session.meters))}};
    if (verb == "subscribe_meters") {
      if (!session.can_subscribe) {
        fail(ApiErrorType::not_allowed, "subscriptions need a websocket connection");
      }
      const double interval = number_field(request, "interval_ms");
      if (!(interval >= double(min_meter_interval.count()) && interval <= 10000)) {
        fail(ApiErrorType::invalid_value,
             fmt::format("interval_ms must be between {} and 10000", min_meter_interval.count()));
      }
      session.meter_interval = std::chrono::milliseconds(static_cast<int>(interval));
      return {{"interval_ms", session.meter_interval->count()}};
    }
    if (verb == "unsubscribe_meters") {
      session.meter_interval.reset();
      return json::object();
    }
    if (verb == "get_volume") return volume();
    if (verb == "set_volume" || verb == "set_mute") {
      const auto channel = channel_field(request, stage.channels(), "master");
      if (verb == "set_volume") {
        const double db = number_field(request, "db");
        const double limit = hooks.config().api_max_gain_db;
        if (db > limit) {
          fail(ApiErrorType::invalid_value,
               fmt::format("db = {}: above the API's limit of {} dB ([control] max_gain_db in the "
                           "configuration file raises it)",
                           db, limit));
        }
        stage.set_volume_db(channel, db);
      } else {
        const json& muted = field(request, "muted");
        if (!muted.is_boolean()) fail(ApiErrorType::bad_request, "'muted' must be true or false");
        stage.set_mute(channel, muted.get<bool>());
      }
      if (hooks.state_changed) hooks.state_changed();
      return volume();
    }
    if (verb == "list_filters") return {{"filters", filters()}};
    if (verb == "get_filter") return filter(request);
    if (verb == "upload_filter") return upload(request);
    if (verb == "get_config") {
      const LiveConfig config = hooks.config();
      return {{"file", config.config_file.string()}, {"text", current_config_text()}};
    }
    if (verb == "validate_config") {
      const auto errors = validate(string_field(request, "text"), nullptr);
      return {{"valid", errors.empty()}, {"errors", errors}};
    }
    if (verb == "apply_config") return apply(string_field(request, "text"), true);
    if (verb == "patch_config") {
      const json& patch = field(request, "patch");
      if (!patch.is_object()) fail(ApiErrorType::bad_request, "'patch' must be an object");
      toml::table root;
      try {
        root = toml::parse(current_config_text());
      } catch (const std::exception& e) {
        fail(ApiErrorType::internal,
             std::string("the running configuration does not parse: ") + e.what());
      }
      merge_into(root, patch, "");
      std::ostringstream out;
      out << root;
      json result = apply(out.str(), true);
      result["text"] = out.str();
      return result;
    }
    if (verb == "undo_config") {
      std::string previous;
      {
        std::lock_guard lock(mutex);
        if (config_history.empty()) fail(ApiErrorType::invalid_value, "nothing to undo");
        config_history.pop_back();
        if (!config_history.empty()) previous = config_history.back();
      }
      if (previous.empty()) {
        const LiveConfig config = hooks.config();
        previous = read_text(config.config_file);
      }
      json result = apply(previous, false);
      result["text"] = previous;
      return result;
    }
    if (verb == "get_log") {
      std::size_t lines = 200;
      if (request.contains("lines")) {
        const double wanted = number_field(request, "lines");
        if (!(wanted >= 1 && wanted <= 10000)) {
          fail(ApiErrorType::invalid_value, "lines must be between 1 and 10000");
        }
        lines = static_cast<std::size_t>(wanted);
      }
      return {{"lines", hooks.log ? hooks.log(lines) : std::vector<std::string>()}};
    }
    fail(ApiErrorType::unknown_request,
         fmt::format("unknown request '{}' (list_requests lists them)", verb.substr(0, 64)));
  }
};

ControlApi::ControlApi(LivePipeline& pipeline, ApiHooks hooks, fs::path upload_dir)
    : impl_(std::make_unique<Impl>(pipeline, std::move(hooks), std::move(upload_dir))) {}

ControlApi::~ControlApi() = default;

std::string ControlApi::handle(std::string_view text, ApiSession& session) {
  return handle(text, session, {});
}

std::string ControlApi::handle_binary(std::string_view message, ApiSession& session) {
  if (message.size() < 4) {
    return handle({}, session, message, "a binary frame starts with the header's length (4 bytes)");
  }
  std::uint32_t length = 0;
  for (int b = 3; b >= 0; --b)
    length = (length << 8) | static_cast<unsigned char>(message[std::size_t(b)]);
  if (length > message.size() - 4) {
    return handle({}, session, message,
                  fmt::format("the binary frame's header is {} bytes long, but the frame holds {}",
                              length, message.size() - 4));
  }
  // The taps after the header, empty when there are none (handle then treats
  // it as text, and set_paths counts what 'binary_taps' asks for against it).
  return handle(message.substr(4, length), session, message.substr(4 + length));
}

std::string ControlApi::handle(std::string_view text, ApiSession& session, std::string_view binary,
                               const std::string& framing_error) {
  json reply = json::object();
  try {
    if (!framing_error.empty()) fail(ApiErrorType::bad_request, framing_error);
    json request;
    try {
      request = json::parse(text);
    } catch (const json::parse_error& e) {
      fail(ApiErrorType::bad_request, std::string("not JSON: ") + e.what());
    }
    if (!request.is_object()) fail(ApiErrorType::bad_request, "a request is a JSON object");
    if (request.contains("id")) reply["id"] = request["id"];
    const std::string verb = string_field(request, "request");
    // Echoed, but not at any length: a reply is not an amplifier.
    reply["request"] = verb.size() <= 64 ? verb : verb.substr(0, 61) + "...";
    reply["result"] = impl_->dispatch(verb, request, session, binary);
    reply["ok"] = true;
  } catch (const ApiError& e) {
    reply.erase("result");
    reply["ok"] = false;
    reply["error"] = {{"type", to_string(e.type())}, {"message", e.what()}};
  } catch (const std::out_of_range& e) {
    reply.erase("result");
    reply["ok"] = false;
    reply["error"] = {{"type", "invalid_value"}, {"message", e.what()}};
  } catch (const std::exception& e) {
    reply.erase("result");
    reply["ok"] = false;
    reply["error"] = {{"type", "internal"}, {"message", e.what()}};
  }
  return reply.dump(-1, ' ', false, json::error_handler_t::replace);
}

const OutputStage& ControlApi::output_stage() const {
  return impl_->pipeline.output_stage();
}

std::string ControlApi::applied_config_text() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->config_history.empty() ? std::string() : impl_->config_history.back();
}

void ControlApi::set_state_changed(std::function<void()> changed) {
  impl_->hooks.state_changed = std::move(changed);
}

void ControlApi::remember_applied_config(std::string text) {
  std::lock_guard lock(impl_->mutex);
  impl_->config_history.push_back(std::move(text));
}

void ControlApi::set_stop_reason(const std::string& reason) {
  std::lock_guard lock(impl_->mutex);
  impl_->stop_reason = reason;
}

std::vector<std::string> ControlApi::validate_config(const std::string& text,
                                                     std::optional<LiveConfig>* parsed) const {
  return impl_->validate(text, parsed);
}

}  // namespace tapstream
