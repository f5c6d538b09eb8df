#include "daemon/commands/shard.hpp"

#include <charconv>
#include <cstdlib>
#include <stdexcept>

namespace tapstream {

namespace {

// At most this many shards: beyond it a typo is likelier than a cluster.
constexpr std::size_t kMaxShards = 1'000'000;

// A whole decimal number, nothing around it.
std::optional<std::size_t> whole_number(const std::string& text) {
  std::size_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end) return std::nullopt;
  return value;
}

std::size_t count_from(const std::string& text, const std::string& what) {
  const auto count = whole_number(text);
  if (!count || *count == 0 || *count > kMaxShards) {
    throw std::invalid_argument(what + " '" + text + "' is not a shard count from 1 to " +
                                std::to_string(kMaxShards));
  }
  return *count;
}

// The variable's value as a whole number; throws naming it when unset or not one.
std::size_t variable(const EnvironmentLookup& environment, const std::string& name) {
  const std::optional<std::string> value = environment(name);
  if (!value) {
    throw std::invalid_argument("--shard: " + name + " is not set (not inside an array task?)");
  }
  const auto number = whole_number(*value);
  if (!number) {
    throw std::invalid_argument("--shard: " + name + "='" + *value +
                                "' is not a whole number from 0");
  }
  return *number;
}

Shard slurm_shard(const EnvironmentLookup& environment) {
  const std::size_t id = variable(environment, "SLURM_ARRAY_TASK_ID");
  const std::size_t count = variable(environment, "SLURM_ARRAY_TASK_COUNT");
  if (count == 0 || count > kMaxShards) {
    throw std::invalid_argument("--shard: SLURM_ARRAY_TASK_COUNT=" + std::to_string(count) +
                                " is not a shard count from 1 to " + std::to_string(kMaxShards));
  }
  std::size_t min = 0;
  if (environment("SLURM_ARRAY_TASK_MIN")) min = variable(environment, "SLURM_ARRAY_TASK_MIN");
  std::size_t step = 1;
  if (environment("SLURM_ARRAY_TASK_STEP")) step = variable(environment, "SLURM_ARRAY_TASK_STEP");
  const std::string where = "SLURM_ARRAY_TASK_ID=" + std::to_string(id) +
                            " with SLURM_ARRAY_TASK_MIN=" + std::to_string(min) +
                            ", SLURM_ARRAY_TASK_STEP=" + std::to_string(step) +
                            " and SLURM_ARRAY_TASK_COUNT=" + std::to_string(count);
  if (id < min || step == 0 || (id - min) % step != 0 || (id - min) / step >= count) {
    throw std::invalid_argument("--shard slurm: " + where +
                                " is not one of COUNT evenly spaced tasks from MIN: give the "
                                "array as a range, e.g. --array=0-" +
                                std::to_string(count - 1));
  }
  return {(id - min) / step, count};
}

}  // namespace

std::string Shard::describe() const {
  std::string items = std::to_string(index);
  if (count > 1) items += ", " + std::to_string(index + count) + ", ...";
  return "shard " + std::to_string(index) + " of " + std::to_string(count) + " (items " + items +
         ")";
}

std::optional<std::string> process_environment(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr) return std::nullopt;
  return std::string(value);
}

Shard parse_shard(const std::string& spec, const EnvironmentLookup& environment) {
  if (spec == "slurm") return slurm_shard(environment);
  const std::size_t slash = spec.find('/');
  if (slash == std::string::npos) {
    throw std::invalid_argument("--shard '" + spec +
                                "': expected K/N (0 <= K < N), slurm, or k8s/N");
  }
  const std::string left = spec.substr(0, slash);
  const std::size_t count = count_from(spec.substr(slash + 1), "--shard " + spec + ": N");
  if (left == "k8s" || left == "indexed") {
    const std::size_t index = variable(environment, "JOB_COMPLETION_INDEX");
    if (index >= count) {
      throw std::invalid_argument(
          "--shard " + spec + ": JOB_COMPLETION_INDEX=" + std::to_string(index) +
          " is not below the count " + std::to_string(count) + " (the Job's completions)");
    }
    return {index, count};
  }
  const auto index = whole_number(left);
  if (!index || *index >= count) {
    throw std::invalid_argument("--shard " + spec + ": K '" + left +
                                "' is not a whole number from 0 to " + std::to_string(count - 1));
  }
  return {*index, count};
}

}  // namespace tapstream
