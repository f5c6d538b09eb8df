#include "daemon/control/state_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "dsp/realtime/output_stage.hpp"

namespace tapstream {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json level_json(const DaemonState::Level& level) {
  return {{"db", level.db}, {"muted", level.muted}};
}

DaemonState::Level level_from(const json& value) {
  DaemonState::Level level;
  level.db = value.at("db").get<double>();
  level.muted = value.at("muted").get<bool>();
  return level;
}

}  // namespace

std::optional<DaemonState> StateFile::load() const {
  std::ifstream stream(path_, std::ios::binary);
  if (!stream) {
    if (!fs::exists(path_)) return std::nullopt;
    throw std::runtime_error("state file " + path_.string() + ": cannot read it");
  }
  std::ostringstream text;
  text << stream.rdbuf();
  try {
    const json root = json::parse(text.str());
    if (root.at("version").get<int>() != 1) throw std::runtime_error("unknown version");
    DaemonState state;
    state.master = level_from(root.at("master"));
    for (const auto& channel : root.at("channels")) state.channels.push_back(level_from(channel));
    state.config_text = root.value("config_text", std::string());
    state.filters = root.value("filters", std::vector<std::string>());
    return state;
  } catch (const std::exception& e) {
    throw std::runtime_error("state file " + path_.string() + ": " + e.what());
  }
}

void StateFile::save(const DaemonState& state) {
  json channels = json::array();
  for (const auto& level : state.channels) channels.push_back(level_json(level));
  const json root = {{"version", 1},
                     {"master", level_json(state.master)},
                     {"channels", channels},
                     {"config_text", state.config_text},
                     {"filters", state.filters}};
  const std::string text = root.dump(2) + "\n";

  std::lock_guard lock(mutex_);
  const fs::path temporary = path_.string() + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw std::runtime_error("state file " + temporary.string() + ": " + std::strerror(errno));
  }
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    written += static_cast<std::size_t>(n);
  }
  const bool ok = written == text.size() && ::fsync(fd) == 0;
  const int error = errno;
  ::close(fd);
  if (!ok || ::rename(temporary.c_str(), path_.c_str()) != 0) {
    const std::string reason = std::strerror(ok ? errno : error);
    ::unlink(temporary.c_str());
    throw std::runtime_error("state file " + path_.string() + ": cannot write it: " + reason);
  }
}

DaemonState::Level level_of(const OutputStage& stage, std::optional<std::size_t> channel) {
  return {stage.volume_db(channel), stage.muted(channel)};
}

void apply_levels(const DaemonState& state, OutputStage& stage) {
  stage.set_volume_db(std::nullopt, state.master.db);
  stage.set_mute(std::nullopt, state.master.muted);
  for (std::size_t c = 0; c < state.channels.size() && c < stage.channels(); ++c) {
    stage.set_volume_db(c, state.channels[c].db);
    stage.set_mute(c, state.channels[c].muted);
  }
}

}  // namespace tapstream
