// --shard (daemon/commands/shard.hpp): K/N, a Slurm array task and a
// Kubernetes Indexed Job each give the share they name; together the shards
// take every item exactly once; and bad values are refused naming the spec, or
// the variable and its value. The environment is a map here, not the process's.

#include "daemon/commands/shard.hpp"

#include <gtest/gtest.h>

#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace tapstream {
namespace {

EnvironmentLookup environment(std::map<std::string, std::string> variables) {
  return [variables](const std::string& name) -> std::optional<std::string> {
    const auto found = variables.find(name);
    if (found == variables.end()) return std::nullopt;
    return found->second;
  };
}

const EnvironmentLookup no_environment = environment({});

// The message of the std::invalid_argument that parsing `spec` throws ("" if none).
std::string refusal(const std::string& spec, const EnvironmentLookup& lookup) {
  try {
    parse_shard(spec, lookup);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(Shard, KOfNTakesTheItemsWhoseIndexModNIsK) {
  const Shard shard = parse_shard("2/3", no_environment);
  EXPECT_EQ(shard.index, 2u);
  EXPECT_EQ(shard.count, 3u);
  std::vector<std::size_t> taken;
  for (std::size_t i = 0; i < 10; ++i) {
    if (shard.takes(i)) taken.push_back(i);
  }
  EXPECT_EQ(taken, (std::vector<std::size_t>{2, 5, 8}));
}

TEST(Shard, TheShardsOfAnArrayTakeEveryItemExactlyOnce) {
  for (std::size_t count : {1u, 2u, 4u, 7u}) {
    std::vector<int> taken(50, 0);
    for (std::size_t k = 0; k < count; ++k) {
      const Shard shard =
          parse_shard(std::to_string(k) + "/" + std::to_string(count), no_environment);
      for (std::size_t i = 0; i < taken.size(); ++i) taken[i] += shard.takes(i) ? 1 : 0;
    }
    for (std::size_t i = 0; i < taken.size(); ++i) {
      EXPECT_EQ(taken[i], 1) << "item " << i << " of " << count << " shards";
    }
  }
}

TEST(Shard, SlurmReadsTheArrayTaskFromItsFirstId) {
  const Shard zero_based = parse_shard(
      "slurm", environment({{"SLURM_ARRAY_TASK_ID", "3"}, {"SLURM_ARRAY_TASK_COUNT", "4"}}));
  EXPECT_EQ(zero_based.index, 3u);
  EXPECT_EQ(zero_based.count, 4u);
  // --array=1-4: ids 1 to 4.
  const Shard one_based = parse_shard("slurm", environment({{"SLURM_ARRAY_TASK_ID", "1"},
                                                            {"SLURM_ARRAY_TASK_COUNT", "4"},
                                                            {"SLURM_ARRAY_TASK_MIN", "1"}}));
  EXPECT_EQ(one_based.index, 0u);
  // --array=10-16:2: ids 10, 12, 14, 16.
  const Shard stepped = parse_shard("slurm", environment({{"SLURM_ARRAY_TASK_ID", "14"},
                                                          {"SLURM_ARRAY_TASK_COUNT", "4"},
                                                          {"SLURM_ARRAY_TASK_MIN", "10"},
                                                          {"SLURM_ARRAY_TASK_STEP", "2"}}));
  EXPECT_EQ(stepped.index, 2u);
  EXPECT_EQ(stepped.count, 4u);
}

TEST(Shard, KubernetesIndexedJobsReadTheCompletionIndexOfTheGivenCount) {
  for (const char* kind : {"k8s", "indexed"}) {
    const Shard shard =
        parse_shard(std::string(kind) + "/5", environment({{"JOB_COMPLETION_INDEX", "4"}}));
    EXPECT_EQ(shard.index, 4u);
    EXPECT_EQ(shard.count, 5u);
  }
}

TEST(Shard, BadSpecsAreRefusedNamingThem) {
  for (const std::string spec : {"3/3", "-1/3", "1/0", "a/3", "1/b", "1/3x", "13", "", "1/",
                                 "slurm/2", "k8s", "1/2000000"}) {
    const std::string message = refusal(spec, no_environment);
    EXPECT_NE(message, "") << "'" << spec << "' was taken";
    EXPECT_NE(message.find(spec), std::string::npos) << message;
  }
}

TEST(Shard, BadVariablesAreRefusedNamingTheVariableAndItsValue) {
  struct Case {
    std::string spec;
    std::map<std::string, std::string> variables;
    std::string named;  // what the message must say
  };
  const std::vector<Case> cases = {
      {"slurm", {{"SLURM_ARRAY_TASK_COUNT", "4"}}, "SLURM_ARRAY_TASK_ID is not set"},
      {"slurm", {{"SLURM_ARRAY_TASK_ID", "1"}}, "SLURM_ARRAY_TASK_COUNT is not set"},
      {"slurm",
       {{"SLURM_ARRAY_TASK_ID", "x1"}, {"SLURM_ARRAY_TASK_COUNT", "4"}},
       "SLURM_ARRAY_TASK_ID='x1'"},
      {"slurm",
       {{"SLURM_ARRAY_TASK_ID", "1"}, {"SLURM_ARRAY_TASK_COUNT", "0"}},
       "SLURM_ARRAY_TASK_COUNT=0"},
      {"slurm",
       {{"SLURM_ARRAY_TASK_ID", "4"}, {"SLURM_ARRAY_TASK_COUNT", "4"}},
       "SLURM_ARRAY_TASK_ID=4"},
      // --array=1,5,9: not evenly spaced from the first id.
      {"slurm",
       {{"SLURM_ARRAY_TASK_ID", "5"},
        {"SLURM_ARRAY_TASK_COUNT", "3"},
        {"SLURM_ARRAY_TASK_MIN", "1"}},
       "SLURM_ARRAY_TASK_ID=5"},
      {"slurm",
       {{"SLURM_ARRAY_TASK_ID", "0"},
        {"SLURM_ARRAY_TASK_COUNT", "3"},
        {"SLURM_ARRAY_TASK_MIN", "1"}},
       "SLURM_ARRAY_TASK_MIN=1"},
      {"k8s/4", {}, "JOB_COMPLETION_INDEX is not set"},
      {"k8s/4", {{"JOB_COMPLETION_INDEX", "4"}}, "JOB_COMPLETION_INDEX=4"},
      {"indexed/4", {{"JOB_COMPLETION_INDEX", " 1"}}, "JOB_COMPLETION_INDEX=' 1'"},
  };
  for (const Case& c : cases) {
    const std::string message = refusal(c.spec, environment(c.variables));
    EXPECT_NE(message.find(c.named), std::string::npos)
        << c.spec << ": '" << message << "' does not say " << c.named;
  }
}

}  // namespace
}  // namespace tapstream
