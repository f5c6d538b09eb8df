#include "daemon/config/config_keys.hpp"

namespace tapstream {

const char* to_string(KeyEffect effect) {
  switch (effect) {
    case KeyEffect::reload:
      return "reload";
    case KeyEffect::restart:
      return "restart";
    case KeyEffect::file_only:
      break;
  }
  return "file_only";
}

namespace {

using C = const LiveConfig&;

bool same_device(const EndpointConfig& a, const EndpointConfig& b) {
  return a.device_name == b.device_name && a.device_index == b.device_index;
}

}  // namespace

const std::vector<ConfigKey>& config_keys() {
  using enum KeyEffect;
  static const std::vector<ConfigKey> keys = {
      // "device" both times is the same key whatever the device runs at now.
      {"sample_rate", restart,
       [](C a, C b) {
         return a.sample_rate_from_device == b.sample_rate_from_device &&
                (a.sample_rate_from_device || a.sample_rate == b.sample_rate);
       }},
      {"block_frames", restart, [](C a, C b) { return a.block_frames == b.block_frames; }},
      {"channels", restart,
       [](C a, C b) { return a.channels == b.channels && a.matrix_inputs == b.matrix_inputs; }},
      {"ring_margin_frames", restart,
       [](C a, C b) { return a.ring_margin_frames == b.ring_margin_frames; }},
      {"latency", restart, [](C a, C b) { return a.latency == b.latency; }},
      {"input.device", file_only, [](C a, C b) { return same_device(a.input, b.input); }},
      {"input.file", file_only, [](C a, C b) { return a.input.file == b.input.file; }},
      {"input.realtime", file_only, [](C a, C b) { return a.input.realtime == b.input.realtime; }},
      {"output.device", file_only, [](C a, C b) { return same_device(a.output, b.output); }},
      {"output.file", file_only, [](C a, C b) { return a.output.file == b.output.file; }},
      {"filter.file", reload, [](C a, C b) { return a.filter_files == b.filter_files; }},
      {"filter.matrix", reload, [](C a, C b) { return a.matrix_file == b.matrix_file; }},
      {"filter.gain_db", reload, [](C a, C b) { return a.gain_db == b.gain_db; }},
      {"filter.watch", reload, [](C a, C b) { return a.watch_filters == b.watch_filters; }},
      {"filter.ignore_sample_rate", reload,
       [](C a, C b) { return a.ignore_filter_sample_rate == b.ignore_filter_sample_rate; }},
      {"filter.resample", reload,
       [](C a, C b) { return a.resample_filters == b.resample_filters; }},
      {"filter.max_taps", restart,
       [](C a, C b) {
         return a.max_taps_given == b.max_taps_given && a.engine.max_taps == b.engine.max_taps;
       }},
      {"filter.max_delay_frames", restart,
       [](C a, C b) { return a.engine.max_delay_frames == b.engine.max_delay_frames; }},
      {"engine.backend", restart, [](C a, C b) { return a.backend == b.backend; }},
      {"engine.algorithm", restart,
       [](C a, C b) { return a.engine.algorithm == b.engine.algorithm; }},
      {"engine.streams", restart, [](C a, C b) { return a.engine.streams == b.engine.streams; }},
      {"engine.kernel", restart, [](C a, C b) { return a.engine.kernel == b.engine.kernel; }},
      {"engine.device", restart, [](C a, C b) { return a.engine.device == b.engine.device; }},
      {"engine.devices", restart, [](C a, C b) { return a.devices == b.devices; }},
      {"engine.spin_us", restart, [](C a, C b) { return a.engine_spin == b.engine_spin; }},
      // The engines' tuning (dsp/model/engine_tuning): the engine is built at the start.
      {"engine.cpu_threads", restart,
       [](C a, C b) { return a.engine.cpu.threads == b.engine.cpu.threads; }},
      {"engine.cuda_small_calls", restart,
       [](C a, C b) { return a.engine.cuda.small_calls == b.engine.cuda.small_calls; }},
      {"engine.cuda_persistent_idle_ms", restart,
       [](C a, C b) { return a.engine.cuda.persistent_idle == b.engine.cuda.persistent_idle; }},
      {"engine.cuda_persistent_answer_us", restart,
       [](C a, C b) { return a.engine.cuda.persistent_answer == b.engine.cuda.persistent_answer; }},
      {"engine.cuda_persistent_trace", restart,
       [](C a, C b) { return a.engine.cuda.persistent_trace == b.engine.cuda.persistent_trace; }},
      {"engine.cuda_persistent_loads", restart,
       [](C a, C b) { return a.engine.cuda.persistent_loads == b.engine.cuda.persistent_loads; }},
      {"engine.cuda_partitioned", restart,
       [](C a, C b) { return a.engine.cuda.partitioned == b.engine.cuda.partitioned; }},
      {"engine.cuda_zero_copy_samples", restart,
       [](C a, C b) { return a.engine.cuda.zero_copy_samples == b.engine.cuda.zero_copy_samples; }},
      {"engine.cuda_stream_tiles", restart,
       [](C a, C b) { return a.engine.cuda.stream_tiles == b.engine.cuda.stream_tiles; }},
      {"engine.fft_partition", restart,
       [](C a, C b) { return a.engine.cuda.fft_partition == b.engine.cuda.fft_partition; }},
      {"engine.fft_fused", restart,
       [](C a, C b) { return a.engine.cuda.fft_fused == b.engine.cuda.fft_fused; }},
      {"engine.matrix_kernel", restart,
       [](C a, C b) { return a.engine.cuda.matrix_kernel == b.engine.cuda.matrix_kernel; }},
      {"engine.matrix_graphs", restart,
       [](C a, C b) { return a.engine.cuda.matrix_graphs == b.engine.cuda.matrix_graphs; }},
      {"control.socket", file_only, [](C a, C b) { return a.control_socket == b.control_socket; }},
      {"control.max_gain_db", file_only,
       [](C a, C b) { return a.api_max_gain_db == b.api_max_gain_db; }},
      {"control.max_upload_files", file_only,
       [](C a, C b) { return a.api_max_upload_files == b.api_max_upload_files; }},
      {"control.max_upload_mib", file_only,
       [](C a, C b) { return a.api_max_upload_bytes == b.api_max_upload_bytes; }},
      {"web.port", file_only, [](C a, C b) { return a.web_port == b.web_port; }},
      {"web.address", file_only, [](C a, C b) { return a.web_address == b.web_address; }},
      {"web.token", file_only, [](C a, C b) { return a.web_token == b.web_token; }},
      {"web.root", file_only, [](C a, C b) { return a.web_root == b.web_root; }},
      {"web.hosts", file_only, [](C a, C b) { return a.web_hosts == b.web_hosts; }},
      {"web.idle_timeout_s", file_only,
       [](C a, C b) { return a.web_idle_timeout == b.web_idle_timeout; }},
      {"web.requests_per_second", file_only,
       [](C a, C b) { return a.web_requests_per_second == b.web_requests_per_second; }},
      {"state.file", file_only, [](C a, C b) { return a.state_file == b.state_file; }},
      {"jack.client_name", file_only,
       [](C a, C b) { return a.jack.client_name == b.jack.client_name; }},
      {"jack.autoconnect", file_only,
       [](C a, C b) { return a.jack.autoconnect == b.jack.autoconnect; }},
      {"jack.connect_inputs", file_only, [](C a, C b) { return a.jack.inputs == b.jack.inputs; }},
      {"jack.connect_outputs", file_only,
       [](C a, C b) { return a.jack.outputs == b.jack.outputs; }},
      {"log.level", restart, [](C a, C b) { return a.log_level == b.log_level; }},
      {"log.file", file_only, [](C a, C b) { return a.log_file == b.log_file; }},
  };
  return keys;
}

std::vector<std::string> ConfigChanges::restart_needed() const {
  std::vector<std::string> keys = restart;
  keys.insert(keys.end(), file_only.begin(), file_only.end());
  return keys;
}

ConfigChanges config_changes(const LiveConfig& running, const LiveConfig& next) {
  ConfigChanges changes;
  for (const ConfigKey& key : config_keys()) {
    if (key.same(running, next)) continue;
    switch (key.effect) {
      case KeyEffect::reload:
        changes.reload.emplace_back(key.name);
        break;
      case KeyEffect::restart:
        changes.restart.emplace_back(key.name);
        break;
      case KeyEffect::file_only:
        changes.file_only.emplace_back(key.name);
        break;
    }
  }
  return changes;
}

LiveConfig with_reloaded_keys(const LiveConfig& running, const LiveConfig& next) {
  LiveConfig result = running;
  result.filter_files = next.filter_files;
  // Going from per-channel filters to a matrix or back is refused by the
  // swapper (a restart); the matrix's shape is the running one's either way.
  result.matrix_file = next.matrix_file;
  result.gain_db = next.gain_db;
  result.watch_filters = next.watch_filters;
  result.ignore_filter_sample_rate = next.ignore_filter_sample_rate;
  result.resample_filters = next.resample_filters;
  return result;
}

std::string join_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (std::size_t i = 0; i < keys.size(); ++i) {
    if (i > 0) out += i + 1 == keys.size() ? " and " : ", ";
    out += keys[i];
  }
  return out;
}

}  // namespace tapstream
