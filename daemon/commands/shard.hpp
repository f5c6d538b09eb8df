#pragma once
// `process --shard`: which share of a batch's inputs or a job list's rows this
// process does, so that an array of N processes (a Slurm job array, a
// Kubernetes Indexed Job, N shells) covers every one exactly once. Shard K of
// N takes the items whose index i (in the order every process computes alike:
// the batch's input list as expanded, directories sorted; the job list's rows
// in file order) has i mod N == K. Striding rather than cutting the list in N
// runs keeps the shares even when long and short files cluster.

#include <cstddef>
#include <functional>
#include <optional>
#include <string>

namespace tapstream {

struct Shard {
  std::size_t index = 0;  // K, from 0 to count - 1
  std::size_t count = 1;  // N
  bool takes(std::size_t item) const { return item % count == index; }
  std::string describe() const;  // "shard 2 of 4 (items 2, 6, 10, ...)"
};

// The environment as the shard spec reads it: a variable's value, or nothing.
using EnvironmentLookup = std::function<std::optional<std::string>(const std::string& name)>;

// The process environment (getenv).
std::optional<std::string> process_environment(const std::string& name);

// Parses --shard: "K/N" (0 <= K < N); "slurm" (SLURM_ARRAY_TASK_ID minus
// SLURM_ARRAY_TASK_MIN, divided by SLURM_ARRAY_TASK_STEP where set, of
// SLURM_ARRAY_TASK_COUNT); "k8s/N" or "indexed/N" (JOB_COMPLETION_INDEX of N).
// Throws std::invalid_argument naming the spec, or the variable and its value.
Shard parse_shard(const std::string& spec, const EnvironmentLookup& environment);

}  // namespace tapstream
