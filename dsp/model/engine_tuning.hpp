#pragma once
// The engines' tuning options (EngineOptions::cpu and ::cuda) by name: one
// table for the configuration's [engine] keys and the command line's
// `--engine-option KEY=VALUE`, so that every knob is checked in one place,
// with its key, value and reason, before an engine is built.

#include <string>
#include <string_view>
#include <vector>

#include "dsp/model/engine.hpp"

namespace tapstream {

struct EngineTuningKey {
  std::string_view name;           // e.g. "cuda_small_calls"
  std::string_view default_value;  // as written in config/live-default.toml
  std::string_view meaning;        // one line, for --help and docs
};

// Every key, in the order config/live-default.toml lists them.
const std::vector<EngineTuningKey>& engine_tuning_keys();
bool is_engine_tuning_key(std::string_view name);

// Sets `name` from `value` as written (a boolean is true/false, a number in
// decimal, a word as itself). Throws std::invalid_argument
// "NAME = VALUE: reason" for an unknown key or a bad value.
void set_engine_tuning(EngineOptions& options, std::string_view name, std::string_view value);

// "KEY=VALUE" as the command line gives it; same errors.
void set_engine_tuning(EngineOptions& options, std::string_view assignment);

// The CUDA options checked as set_engine_tuning checks them (for options made
// in code): throws std::invalid_argument naming the key.
void check_cuda_options(const CudaEngineOptions& options);

}  // namespace tapstream
