#pragma once
// When a change of each configuration key takes effect, and who may make it:
// the one table that SIGHUP / `ctl reload`, the control API's apply_config
// and the start from a state file consult (docs/api.md, "What the API may
// change").
//
//   reload     taken by a reload or an API apply_config: filters, their gain,
//              watch, ignore_sample_rate, resample
//   restart    read only when the daemon starts (rate, block, engine, ...);
//              a change is reported in `restart_needed`
//   file_only  where audio comes from and goes to, what listens, and which
//              files the daemon writes: [input], [output], [web], [state],
//              [log] file, [jack], [control]. Only the configuration file on
//              disk changes them (then a restart); the API is refused them by
//              name.

#include <string>
#include <string_view>
#include <vector>

#include "daemon/config/config.hpp"

namespace tapstream {

enum class KeyEffect { reload, restart, file_only };
const char* to_string(KeyEffect effect);

struct ConfigKey {
  const char* name;  // dotted, as written in the file: "filter.gain_db"
  KeyEffect effect;
  bool (*same)(const LiveConfig& a, const LiveConfig& b);
};

// Every key of the configuration (filter.file stands for file and files).
const std::vector<ConfigKey>& config_keys();

// The keys whose values differ between two configurations, by effect, in the
// table's order.
struct ConfigChanges {
  std::vector<std::string> reload;
  std::vector<std::string> restart;
  std::vector<std::string> file_only;
  // What waits for a restart: restart and file_only keys alike.
  std::vector<std::string> restart_needed() const;
};
ConfigChanges config_changes(const LiveConfig& running, const LiveConfig& next);

// `running` with the reload keys of `next`: what a reload makes of the
// running configuration (the rest keeps describing what runs until a restart).
LiveConfig with_reloaded_keys(const LiveConfig& running, const LiveConfig& next);

// "a, b and c" for messages.
std::string join_keys(const std::vector<std::string>& keys);

}  // namespace tapstream
