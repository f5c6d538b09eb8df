// The offline pipeline on the CUDA engine as `tapstream process` uses it: the
// engine from the factory (the CUDA module, loaded on demand) and the blocks
// in page-locked memory from block_allocator(). Its output must match the
// CPU engine's at any block size, and a list of jobs must start each from
// silence. Skips where there is no usable GPU.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "daemon/engine_factory.hpp"
#include "daemon/pipeline/offline_pipeline.hpp"
#include "tests/reference.hpp"

namespace tapstream {
namespace {

using testing::random_signal;
using testing::relative_error;

std::unique_ptr<MatrixEngine> cuda_engine_or_skip_reason(const FilterBank& bank, std::size_t block,
                                                         std::string* reason) {
  EngineOptions options;
  options.max_block_frames = block;
  try {
    return make_engine(Backend::cuda, RoutingMatrix::diagonal(bank), options);
  } catch (const std::exception& e) {
    *reason = e.what();
    return nullptr;
  }
}

std::vector<float> run(MatrixEngine& engine, const std::vector<float>& input, std::size_t block,
                       bool pinned) {
  std::size_t position = 0;
  const std::size_t channels = engine.inputs();
  std::vector<float> output;
  OfflineOptions options;
  options.block_frames = block;
  if (pinned) options.allocate = block_allocator(engine);
  run_offline(
      engine,
      [&](std::span<float> buffer) {
        const std::size_t n = std::min(buffer.size(), input.size() - position);
        std::copy_n(input.begin() + std::ptrdiff_t(position), n, buffer.begin());
        position += n;
        return n / channels;
      },
      [&](std::span<const float> s) { output.insert(output.end(), s.begin(), s.end()); }, options);
  return output;
}

TEST(CudaOfflinePipeline, PinnedBlocksThroughTheCudaModuleMatchTheCpuEngineAtAnyBlockSize) {
  constexpr std::size_t kChannels = 4, kFrames = 200000;
  const std::uint64_t seed = 909;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  for (const std::size_t taps : {std::size_t(64), std::size_t(8192)}) {
    const FilterBank bank = FilterBank::shared(random_signal(taps, seed + taps), kChannels);
    const std::vector<float> input = random_signal(kFrames * kChannels, seed + 1);
    EngineOptions cpu_options;
    cpu_options.max_block_frames = 4096;
    const auto cpu = make_engine(Backend::cpu, RoutingMatrix::diagonal(bank), cpu_options);
    const std::vector<float> want = run(*cpu, input, 4096, false);
    for (const std::size_t block : {std::size_t(1000), std::size_t(65536)}) {
      for (const bool pinned : {true, false}) {
        SCOPED_TRACE(std::to_string(taps) + " taps, block " + std::to_string(block) +
                     (pinned ? ", pinned" : ", pageable"));
        std::string reason;
        const auto cuda = cuda_engine_or_skip_reason(bank, block, &reason);
        if (!cuda) GTEST_SKIP() << "no usable CUDA engine: " << reason;
        EXPECT_EQ(cuda->name(), "cuda");
        const std::vector<float> got = run(*cuda, input, block, pinned);
        ASSERT_EQ(got.size(), want.size());
        EXPECT_LE(relative_error(got, want), 1e-5);
      }
    }
  }
}

TEST(CudaOfflinePipeline, JobsOnOneCudaEngineEachStartFromSilence) {
  constexpr std::size_t kChannels = 2;
  const FilterBank bank = FilterBank::shared(random_signal(3000, 77), kChannels);
  std::string reason;
  const auto cuda = cuda_engine_or_skip_reason(bank, 8192, &reason);
  if (!cuda) GTEST_SKIP() << "no usable CUDA engine: " << reason;
  const std::vector<float> input = random_signal(50000 * kChannels, 78);
  const std::vector<float> first = run(*cuda, input, 8192, true);
  // The same input again as a second job of one run: identical output.
  std::vector<std::vector<float>> outputs(2);
  std::vector<std::size_t> positions(2, 0);
  std::vector<OfflineJob> jobs;
  for (std::size_t j = 0; j < 2; ++j) {
    jobs.push_back({[&, j] {
                      return OfflineSource{[&, j](std::span<float> buffer) {
                        const std::size_t n = std::min(buffer.size(), input.size() - positions[j]);
                        std::copy_n(input.begin() + std::ptrdiff_t(positions[j]), n,
                                    buffer.begin());
                        positions[j] += n;
                        return n / kChannels;
                      }};
                    },
                    [&, j] {
                      return OfflineSink{[&, j](std::span<const float> s) {
                                           outputs[j].insert(outputs[j].end(), s.begin(), s.end());
                                         },
                                         {}};
                    }});
  }
  OfflineOptions options;
  options.block_frames = 8192;
  options.allocate = block_allocator(*cuda);
  cuda->reset();  // the pipeline resets between jobs; the first starts as the engine is
  const auto results = run_offline_jobs(*cuda, jobs, options);
  for (std::size_t j = 0; j < 2; ++j) {
    EXPECT_FALSE(results[j].error) << "job " << j;
    EXPECT_LE(relative_error(outputs[j], first), 1e-6) << "job " << j;
  }
}

}  // namespace
}  // namespace tapstream
