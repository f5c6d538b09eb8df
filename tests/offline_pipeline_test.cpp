// The offline pipeline (daemon/offline_pipeline): every input frame goes
// through the engine exactly once, in order, whatever the block size and
// however the source splits its reads; the tail is the filters' decay;
// progress and cancellation behave. A small float64 direct-form engine stands
// in for the real ones so that these tests check the pipeline alone; one test
// runs the real CPU engine too.

#include "daemon/pipeline/offline_pipeline.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "daemon/commands/progress.hpp"
#include "dsp/cpu/cpu_engine.hpp"
#include "dsp/cpu/cpu_matrix_engine.hpp"
#include "dsp/files/sound_file.hpp"
#include "dsp/model/diagonal_engine.hpp"
#include "tests/matrix_support.hpp"
#include "tests/process_support.hpp"
#include "tests/reference.hpp"
#include "tests/wait_for.hpp"

namespace tapstream {
namespace {

using testing::random_signal;
using testing::reference_convolution;
using testing::relative_error;
namespace fs = std::filesystem;

// Direct-form causal convolution with a float64 accumulator and the halo kept
// as the whole input history: obviously right, slow, for tests only.
class HistoryEngine final : public MatrixEngine {
 public:
  HistoryEngine(const FilterBank& bank, std::size_t max_block)
      : bank_(bank), max_block_(max_block), history_(bank.channels()) {}

  void process(std::span<const float> in, std::span<float> out, std::size_t frames,
               Layout layout) override {
    if (layout != Layout::interleaved) throw std::logic_error("test engine: interleaved only");
    if (frames == 0 || frames > max_block_) throw std::logic_error("test engine: bad block");
    const std::size_t channels = bank_.channels();
    if (in.size() != frames * channels || out.size() != frames * channels) {
      throw std::logic_error("test engine: span sizes do not match frames * channels");
    }
    ++blocks_;
    for (std::size_t c = 0; c < channels; ++c) {
      auto& h = history_[c];
      const auto taps = bank_.taps(c);
      for (std::size_t f = 0; f < frames; ++f) {
        h.push_back(in[f * channels + c]);
        double acc = 0.0;
        for (std::size_t k = 0; k < taps.size() && k < h.size(); ++k) {
          acc += double(taps[k]) * double(h[h.size() - 1 - k]);
        }
        out[f * channels + c] = float(acc);
      }
    }
  }
  void set_matrix(const RoutingMatrix& matrix, bool) override { bank_ = *matrix.diagonal_bank(); }
  void reset() override {
    for (auto& h : history_) h.clear();
  }
  std::size_t inputs() const override { return bank_.channels(); }
  std::size_t outputs() const override { return bank_.channels(); }
  std::size_t max_block_frames() const override { return max_block_; }
  std::size_t max_taps() const override { return bank_.max_taps(); }
  std::string name() const override { return "test"; }
  std::string description() const override { return "test: float64 direct form"; }

  std::size_t blocks() const { return blocks_; }

 private:
  FilterBank bank_;
  std::size_t max_block_;
  std::vector<std::vector<float>> history_;
  std::size_t blocks_ = 0;
};

// An in-memory interleaved source that hands out at most `chunk(rng)` frames
// a read, like a decoder that returns short reads.
struct MemorySource {
  const std::vector<float>* samples;
  std::size_t channels;
  std::size_t max_chunk;  // 0: as many as asked
  std::mt19937 rng{7};
  std::size_t position = 0;  // in frames

  std::size_t operator()(std::span<float> buffer) {
    const std::size_t total = samples->size() / channels;
    std::size_t frames = std::min(buffer.size() / channels, total - position);
    if (max_chunk > 0 && frames > 0) {
      frames = std::min(frames, std::uniform_int_distribution<std::size_t>(1, max_chunk)(rng));
    }
    std::copy_n(samples->begin() + std::ptrdiff_t(position * channels), frames * channels,
                buffer.begin());
    position += frames;
    return frames;
  }
};

std::vector<float> channel_of(const std::vector<float>& interleaved, std::size_t channels,
                              std::size_t c) {
  std::vector<float> out(interleaved.size() / channels);
  for (std::size_t f = 0; f < out.size(); ++f) out[f] = interleaved[f * channels + c];
  return out;
}

FilterBank three_channel_bank(std::uint64_t seed) {
  std::vector<std::vector<float>> taps = {random_signal(17, seed), random_signal(5, seed + 1),
                                          random_signal(33, seed + 2)};
  return FilterBank::per_channel(std::move(taps));
}

TEST(OfflinePipeline, OutputEqualsWholeStreamConvolutionForAnyBlockSizeAndShortReads) {
  constexpr std::size_t kChannels = 3, kFrames = 2001;
  const std::uint64_t seed = 20261122;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const FilterBank bank = three_channel_bank(seed);
  const std::vector<float> input = random_signal(kFrames * kChannels, seed + 10);

  for (std::size_t block :
       {std::size_t(1), std::size_t(7), std::size_t(64), std::size_t(1000), kFrames, kFrames + 5}) {
    for (std::size_t max_chunk : {std::size_t(0), std::size_t(13)}) {
      SCOPED_TRACE("block " + std::to_string(block) + ", source chunk " +
                   std::to_string(max_chunk));
      HistoryEngine engine(bank, block);
      MemorySource source{&input, kChannels, max_chunk};
      std::vector<float> output;
      OfflineOptions options;
      options.block_frames = block;
      const OfflineResult result = run_offline(
          engine, std::ref(source),
          [&output](std::span<const float> s) { output.insert(output.end(), s.begin(), s.end()); },
          options);
      EXPECT_EQ(result.input_frames, kFrames);
      EXPECT_EQ(result.output_frames, kFrames);
      ASSERT_EQ(output.size(), input.size());
      for (std::size_t c = 0; c < kChannels; ++c) {
        const auto want = reference_convolution(channel_of(input, kChannels, c), bank.taps(c));
        EXPECT_LE(relative_error(channel_of(output, kChannels, c), want), 1e-6) << "channel " << c;
      }
    }
  }
}

TEST(OfflinePipeline, TailWritesTheFiltersDecay) {
  constexpr std::size_t kChannels = 3, kFrames = 100;
  const FilterBank bank = three_channel_bank(99);
  const std::size_t tail = bank.max_taps() - 1;
  const std::vector<float> input = random_signal(kFrames * kChannels, 98);

  HistoryEngine engine(bank, 16);
  MemorySource source{&input, kChannels, 0};
  std::vector<float> output;
  OfflineOptions options;
  options.block_frames = 16;
  options.tail_frames = tail;
  const OfflineResult result = run_offline(
      engine, std::ref(source),
      [&output](std::span<const float> s) { output.insert(output.end(), s.begin(), s.end()); },
      options);
  EXPECT_EQ(result.input_frames, kFrames);
  EXPECT_EQ(result.output_frames, kFrames + tail);
  ASSERT_EQ(output.size(), (kFrames + tail) * kChannels);
  for (std::size_t c = 0; c < kChannels; ++c) {
    std::vector<float> padded = channel_of(input, kChannels, c);
    padded.resize(kFrames + tail, 0.0f);
    const auto want = reference_convolution(padded, bank.taps(c));
    EXPECT_LE(relative_error(channel_of(output, kChannels, c), want), 1e-6) << "channel " << c;
    // The shorter filters have fully decayed before the end of the tail.
    if (bank.tap_count(c) < bank.max_taps()) {
      EXPECT_EQ(output[output.size() - kChannels + c], 0.0f);
    }
  }
}

TEST(OfflinePipeline, ProgressCountsEveryFrameWrittenInOrder) {
  const FilterBank bank = FilterBank::shared({1.0f, 0.5f}, 2);
  const std::vector<float> input = random_signal(2 * 1000, 5);
  HistoryEngine engine(bank, 64);
  MemorySource source{&input, 2, 0};
  std::vector<std::uint64_t> reports;
  OfflineOptions options;
  options.block_frames = 64;
  options.tail_frames = 1;
  options.on_progress = [&reports](std::uint64_t done) { reports.push_back(done); };
  const OfflineResult result = run_offline(
      engine, std::ref(source), [](std::span<const float>) {}, options);
  ASSERT_FALSE(reports.empty());
  EXPECT_TRUE(std::is_sorted(reports.begin(), reports.end()));
  EXPECT_EQ(reports.back(), result.output_frames);
  EXPECT_EQ(result.output_frames, 1001u);
  EXPECT_EQ(reports.size(), engine.blocks());
}

// A run cancelled after 30 frames (blocks of 10), reading on a thread of its
// own or on the caller's: throws and has written exactly those frames.
void expect_cancel_at_the_next_block(bool read_on_caller) {
  const FilterBank bank = FilterBank::shared({1.0f}, 1);
  const std::vector<float> input = random_signal(1000, 6);
  HistoryEngine engine(bank, 10);
  MemorySource source{&input, 1, 0};
  std::atomic<bool> cancel{false};
  std::size_t written = 0;
  OfflineOptions options;
  options.block_frames = 10;
  options.cancel = &cancel;
  options.read_on_caller = read_on_caller;
  options.on_progress = [&cancel](std::uint64_t done) {
    if (done >= 30) cancel.store(true);
  };
  EXPECT_THROW(run_offline(
                   engine, std::ref(source),
                   [&written](std::span<const float> s) { written += s.size(); }, options),
               std::runtime_error);
  EXPECT_EQ(written, 30u);
}

TEST(OfflinePipeline, CancelStopsAtTheNextBlockWithAnError) {
  expect_cancel_at_the_next_block(false);
}

TEST(OfflinePipeline, RefusesBlocksTheEngineCannotTake) {
  const FilterBank bank = FilterBank::shared({1.0f}, 1);
  HistoryEngine engine(bank, 10);
  const std::vector<float> input(100, 0.0f);
  MemorySource source{&input, 1, 0};
  for (std::size_t block : {std::size_t(0), std::size_t(11)}) {
    OfflineOptions options;
    options.block_frames = block;
    EXPECT_THROW(run_offline(
                     engine, std::ref(source), [](std::span<const float>) {}, options),
                 std::invalid_argument)
        << "block " << block;
  }
}

TEST(OfflinePipeline, RealCpuEngineMatchesTheReferenceOnInterleavedChannels) {
  constexpr std::size_t kChannels = 2, kFrames = 20000;
  const std::uint64_t seed = 424242;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  // One short (direct-form) and one long (FFT-sized) filter.
  const FilterBank bank =
      FilterBank::per_channel({random_signal(31, seed), random_signal(3000, seed + 1)});
  const std::vector<float> input = random_signal(kFrames * kChannels, seed + 2);
  EngineOptions engine_options;
  engine_options.max_block_frames = 1500;
  const auto engine = std::make_unique<DiagonalEngine>(make_cpu_engine(bank, engine_options));
  MemorySource source{&input, kChannels, 0};
  std::vector<float> output;
  OfflineOptions options;
  options.block_frames = 1500;
  run_offline(
      *engine, std::ref(source),
      [&output](std::span<const float> s) { output.insert(output.end(), s.begin(), s.end()); },
      options);
  ASSERT_EQ(output.size(), input.size());
  for (std::size_t c = 0; c < kChannels; ++c) {
    const auto want = reference_convolution(channel_of(input, kChannels, c), bank.taps(c));
    EXPECT_LE(relative_error(channel_of(output, kChannels, c), want), 1e-5) << "channel " << c;
  }
}

// An interleaved sink into memory that records whether it was finished and
// when it was destroyed (a sound file's sink removes its file then).
struct MemorySink {
  std::vector<float> samples;
  bool finished = false;
  std::size_t fail_on_write = 0;  // throw on this write (1-based); 0: never
  std::size_t writes = 0;
};

OfflineJob memory_job(const std::vector<float>* input, std::size_t channels, MemorySink* sink,
                      std::size_t fail_after_frames = 0, std::size_t max_chunk = 0) {
  return {
      [=] {
        auto source = std::make_shared<MemorySource>(MemorySource{input, channels, max_chunk});
        return OfflineSource{[source, fail_after_frames](std::span<float> buffer) {
                               if (fail_after_frames > 0 && source->position >= fail_after_frames) {
                                 throw std::runtime_error("in.wav: read failed: bad sector");
                               }
                               return (*source)(buffer);
                             },
                             0};
      },
      [sink] {
        return OfflineSink{[sink](std::span<const float> s) {
                             if (++sink->writes == sink->fail_on_write) {
                               throw std::runtime_error("out.wav: write failed: disk full");
                             }
                             sink->samples.insert(sink->samples.end(), s.begin(), s.end());
                           },
                           [sink] { sink->finished = true; }};
      },
  };
}

TEST(OfflinePipeline, JobsGoThroughOneEngineResetBetweenThem) {
  constexpr std::size_t kChannels = 3;
  const std::uint64_t seed = 7001;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const FilterBank bank = three_channel_bank(seed);
  const std::vector<std::vector<float>> inputs = {random_signal(300 * kChannels, seed + 1),
                                                  random_signal(5 * kChannels, seed + 2),
                                                  random_signal(1000 * kChannels, seed + 3)};
  HistoryEngine engine(bank, 64);
  std::vector<MemorySink> sinks(inputs.size());
  std::vector<OfflineJob> jobs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    jobs.push_back(memory_job(&inputs[i], kChannels, &sinks[i]));
  }
  std::vector<std::size_t> done_order;
  OfflineOptions options;
  options.block_frames = 64;
  options.on_job_done = [&](std::size_t job, const OfflineJobResult&) {
    done_order.push_back(job);
  };
  const auto results = run_offline_jobs(engine, jobs, options);
  EXPECT_EQ(done_order, (std::vector<std::size_t>{0, 1, 2}));
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    SCOPED_TRACE("job " + std::to_string(i));
    EXPECT_FALSE(results[i].error);
    EXPECT_EQ(results[i].input_frames, inputs[i].size() / kChannels);
    EXPECT_TRUE(sinks[i].finished);
    ASSERT_EQ(sinks[i].samples.size(), inputs[i].size());
    // Each file starts from silence: nothing of the previous file leaks in.
    for (std::size_t c = 0; c < kChannels; ++c) {
      const auto want = reference_convolution(channel_of(inputs[i], kChannels, c), bank.taps(c));
      EXPECT_LE(relative_error(channel_of(sinks[i].samples, kChannels, c), want), 1e-6);
    }
  }
}

TEST(OfflinePipeline, TwoRunsSharingOneListEachRunTheJobsTheyClaimAndNoOther) {
  // Two engines (two GPUs in a batch) over one list: each job is claimed by
  // the first run to reach it and done by that run alone, exactly.
  constexpr std::size_t kChannels = 3;
  const std::uint64_t seed = 7002;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const FilterBank bank = three_channel_bank(seed);
  std::vector<std::vector<float>> inputs;
  for (std::size_t i = 0; i < 9; ++i) {
    inputs.push_back(random_signal((50 + 97 * i) * kChannels, seed + 1 + i));
  }
  std::vector<MemorySink> sinks(inputs.size());
  std::vector<OfflineJob> jobs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    jobs.push_back(memory_job(&inputs[i], kChannels, &sinks[i]));
  }
  std::vector<std::atomic<int>> owner(inputs.size());
  for (auto& o : owner) o = -1;
  std::vector<std::vector<std::size_t>> done(2);
  const auto run = [&](int device) {
    HistoryEngine engine(bank, 64);
    OfflineOptions options;
    options.block_frames = 64;
    options.claim = [&, device](std::size_t job) {
      int unclaimed = -1;
      return owner[job].compare_exchange_strong(unclaimed, device);
    };
    options.on_job_done = [&, device](std::size_t job, const OfflineJobResult& result) {
      EXPECT_FALSE(result.error);
      done[std::size_t(device)].push_back(job);
    };
    run_offline_jobs(engine, jobs, options);
  };
  std::thread second(run, 1);
  run(0);
  second.join();
  std::vector<std::size_t> all = done[0];
  all.insert(all.end(), done[1].begin(), done[1].end());
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<std::size_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    SCOPED_TRACE("job " + std::to_string(i));
    const int device = owner[i];
    ASSERT_TRUE(device == 0 || device == 1);
    const auto& mine = done[std::size_t(device)];
    EXPECT_NE(std::find(mine.begin(), mine.end(), i), mine.end());
    EXPECT_TRUE(sinks[i].finished);
    for (std::size_t c = 0; c < kChannels; ++c) {
      const auto want = reference_convolution(channel_of(inputs[i], kChannels, c), bank.taps(c));
      EXPECT_LE(relative_error(channel_of(sinks[i].samples, kChannels, c), want), 1e-6);
    }
  }
}

TEST(OfflinePipeline, AMatrixTakesItsInputsAndGivesItsOutputsJobAfterJobWithTheTail) {
  const std::uint64_t seed = 7011;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const RoutingMatrix matrix =
      RoutingMatrix::make(3, 5,
                          {testing::make_path(0, 0, random_signal(40, seed)),
                           testing::make_path(2, 0, random_signal(300, seed + 1), -6.0, 7, true),
                           testing::make_path(1, 3, random_signal(1, seed + 2), 3.0),
                           testing::make_path(2, 1, random_signal(129, seed + 3))});
  EngineOptions engine_options;
  engine_options.max_block_frames = 100;
  const auto engine = make_cpu_matrix_engine(matrix, engine_options);
  const std::vector<std::vector<float>> inputs = {random_signal(1000 * 3, seed + 4),
                                                  random_signal(2 * 3, seed + 5)};
  const std::size_t tail = matrix.max_taps() - 1;
  std::vector<MemorySink> sinks(inputs.size());
  std::vector<OfflineJob> jobs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    OfflineJob job = memory_job(&inputs[i], 3, &sinks[i]);
    job.open_source = [open = job.open_source, tail] {
      OfflineSource source = open();
      source.tail_frames = tail;
      return source;
    };
    jobs.push_back(std::move(job));
  }
  OfflineOptions options;
  options.block_frames = 100;
  const auto results = run_offline_jobs(*engine, jobs, options);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    SCOPED_TRACE("job " + std::to_string(i));
    ASSERT_FALSE(results[i].error);
    const std::size_t frames = inputs[i].size() / 3 + tail;
    EXPECT_EQ(results[i].output_frames, frames);
    ASSERT_EQ(sinks[i].samples.size(), frames * 5);
    std::vector<std::vector<float>> planar;
    for (std::size_t c = 0; c < 3; ++c) {
      planar.push_back(channel_of(inputs[i], 3, c));
      planar.back().resize(frames, 0.0f);
    }
    for (std::size_t o = 0; o < 5; ++o) {
      const auto want = testing::reference_output(matrix, planar, o);
      const auto got = channel_of(sinks[i].samples, 5, o);
      if (o == 2 || o == 4) {
        EXPECT_EQ(got, std::vector<float>(frames, 0.0f)) << "output " << o << " has no path";
      } else {
        EXPECT_LE(relative_error(got, want), 1e-5) << "output " << o;
      }
    }
  }
}

TEST(OfflinePipeline, AReadErrorMidFileFailsOnlyThatJobUnfinishedAndNamesIt) {
  const FilterBank bank = FilterBank::shared({1.0f, -0.5f}, 2);
  const std::vector<float> input = random_signal(2 * 500, 31);
  HistoryEngine engine(bank, 16);
  std::vector<MemorySink> sinks(3);
  const std::vector<OfflineJob> jobs = {memory_job(&input, 2, &sinks[0]),
                                        memory_job(&input, 2, &sinks[1], 100),
                                        memory_job(&input, 2, &sinks[2])};
  OfflineOptions options;
  options.block_frames = 16;
  const auto results = run_offline_jobs(engine, jobs, options);
  ASSERT_TRUE(results[1].error);
  try {
    std::rethrow_exception(results[1].error);
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "in.wav: read failed: bad sector");
  }
  EXPECT_FALSE(sinks[1].finished);
  EXPECT_FALSE(results[0].error);
  EXPECT_FALSE(results[2].error);
  EXPECT_TRUE(sinks[0].finished);
  EXPECT_TRUE(sinks[2].finished);
  EXPECT_EQ(sinks[2].samples, sinks[0].samples);  // the failure left no trace in the engine
}

TEST(OfflinePipeline, AWriteErrorMidFileFailsOnlyThatJobUnfinishedAndNamesIt) {
  const FilterBank bank = FilterBank::shared({0.5f}, 1);
  const std::vector<float> input = random_signal(400, 32);
  HistoryEngine engine(bank, 10);
  std::vector<MemorySink> sinks(2);
  sinks[0].fail_on_write = 3;
  const std::vector<OfflineJob> jobs = {memory_job(&input, 1, &sinks[0]),
                                        memory_job(&input, 1, &sinks[1])};
  OfflineOptions options;
  options.block_frames = 10;
  const auto results = run_offline_jobs(engine, jobs, options);
  ASSERT_TRUE(results[0].error);
  try {
    std::rethrow_exception(results[0].error);
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "out.wav: write failed: disk full");
  }
  EXPECT_FALSE(sinks[0].finished);
  EXPECT_EQ(sinks[0].writes, 3u);  // nothing more was offered to the failed sink
  EXPECT_TRUE(sinks[1].finished);
  EXPECT_EQ(sinks[1].samples.size(), input.size());
}

TEST(OfflinePipeline, ASoundFileThatFailsMidFileLeavesNothingBehind) {
  // A read error after some blocks were already written: the writer's
  // temporary file goes with it, and the destination never appears.
  testing::TempDir dir;
  const FilterBank bank = FilterBank::shared({1.0f}, 2);
  const std::vector<float> input = random_signal(2 * 5000, 33);
  HistoryEngine engine(bank, 256);
  MemorySource source{&input, 2, 0};
  OfflineOptions options;
  options.block_frames = 256;
  {
    SoundFileWriter writer(dir / "out.wav", 48000, 2, SF_FORMAT_WAV | SF_FORMAT_FLOAT);
    std::size_t blocks = 0;
    EXPECT_THROW(
        {
          try {
            run_offline(
                engine,
                [&](std::span<float> buffer) {
                  if (source.position > 2000) throw SoundFileError("in.wav: read failed");
                  return source(buffer);
                },
                [&](std::span<const float> s) {
                  writer.write(s);
                  ++blocks;
                },
                options);
          } catch (const SoundFileError& e) {
            EXPECT_STREQ(e.what(), "in.wav: read failed");
            throw;
          }
        },
        SoundFileError);
    EXPECT_GT(blocks, 0u);
  }
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(OfflinePipeline, MemoryIsAllocatedOnceWhateverTheInputsLength) {
  const FilterBank bank = FilterBank::shared({1.0f}, 1);
  for (const std::size_t frames : {std::size_t(10), std::size_t(100000)}) {
    const std::vector<float> input = random_signal(frames, 34);
    HistoryEngine engine(bank, 64);
    MemorySource source{&input, 1, 0};
    std::size_t allocations = 0, floats = 0;
    OfflineOptions options;
    options.block_frames = 64;
    options.blocks_in_flight = 3;
    options.allocate = [&](std::size_t n) {
      ++allocations;
      floats += n;
      return ordinary_block_memory(n);
    };
    std::size_t written = 0;
    run_offline(
        engine, std::ref(source), [&](std::span<const float> s) { written += s.size(); }, options);
    EXPECT_EQ(written, frames);
    EXPECT_EQ(allocations, 6u) << frames << " frames";  // 3 input and 3 output blocks
    EXPECT_EQ(floats, 6u * 64u) << frames << " frames";
  }
}

TEST(OfflinePipeline, ACancelSeenWhileEveryStageWaitsStillStopsTheRun) {
  // The source blocks until cancel is set from another thread, as a signal
  // handler would (which cannot wake anyone): the run must still end.
  const FilterBank bank = FilterBank::shared({1.0f}, 1);
  HistoryEngine engine(bank, 8);
  std::atomic<bool> cancel{false};
  OfflineOptions options;
  options.block_frames = 8;
  options.cancel = &cancel;
  std::atomic<std::size_t> reads{0};
  std::thread canceller([&] {
    // Cancel once the source blocks (and the stages behind it wait).
    EXPECT_TRUE(testing::wait_until(
        testing::long_wait, [&] { return reads.load() > 3; }, "the source blocking"));
    cancel.store(true);
  });
  EXPECT_THROW(run_offline(
                   engine,
                   [&](std::span<float> buffer) -> std::size_t {
                     if (++reads > 3) {
                       // The source blocks (polling, as it cannot be woken) until cancel.
                       while (!cancel.load())
                         std::this_thread::sleep_for(std::chrono::milliseconds(1));
                     }
                     std::fill(buffer.begin(), buffer.end(), 0.0f);
                     return buffer.size();
                   },
                   [](std::span<const float>) {}, options),
               std::runtime_error);
  canceller.join();
}

// What a run of jobs gave: each sink's samples and whether it finished, and
// each job's frames and error message.
struct JobsOutcome {
  std::vector<std::vector<float>> samples;
  std::vector<bool> finished;
  std::vector<std::uint64_t> frames;
  std::vector<std::string> errors;
  bool operator==(const JobsOutcome&) const = default;
};

JobsOutcome run_jobs_reading(bool read_on_caller, std::size_t block, std::size_t max_chunk,
                             std::uint64_t seed, std::vector<std::thread::id>* reader_threads) {
  constexpr std::size_t kChannels = 3;
  const FilterBank bank = three_channel_bank(seed);
  const std::vector<std::vector<float>> inputs = {
      random_signal(300 * kChannels, seed + 1), random_signal(5 * kChannels, seed + 2),
      random_signal(1000 * kChannels, seed + 3), random_signal(2500 * kChannels, seed + 4)};
  HistoryEngine engine(bank, block);
  std::vector<MemorySink> sinks(inputs.size());
  sinks[3].fail_on_write = 2;
  std::vector<OfflineJob> jobs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    OfflineJob job = memory_job(&inputs[i], kChannels, &sinks[i], i == 2 ? 400 : 0, max_chunk);
    job.open_source = [open = job.open_source, reader_threads] {
      OfflineSource source = open();
      source.read = [read = source.read, reader_threads](std::span<float> buffer) {
        reader_threads->push_back(std::this_thread::get_id());
        return read(buffer);
      };
      return source;
    };
    jobs.push_back(std::move(job));
  }
  OfflineOptions options;
  options.block_frames = block;
  options.read_on_caller = read_on_caller;
  const auto results = run_offline_jobs(engine, jobs, options);
  JobsOutcome outcome;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    outcome.samples.push_back(sinks[i].samples);
    outcome.finished.push_back(sinks[i].finished);
    outcome.frames.push_back(results[i].output_frames);
    std::string error;
    if (results[i].error) {
      try {
        std::rethrow_exception(results[i].error);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    outcome.errors.push_back(error);
  }
  return outcome;
}

TEST(OfflinePipeline, ReadingOnTheCallersThreadGivesTheSameJobsOutputsAndErrors) {
  const std::uint64_t seed = 7301;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  for (const std::size_t block : {1, 7, 64, 1001}) {
    for (const std::size_t max_chunk : {0, 13}) {
      SCOPED_TRACE("block " + std::to_string(block) + ", source chunk " +
                   std::to_string(max_chunk));
      std::vector<std::thread::id> threaded_readers, caller_readers;
      const JobsOutcome threaded =
          run_jobs_reading(false, block, max_chunk, seed, &threaded_readers);
      const JobsOutcome on_caller = run_jobs_reading(true, block, max_chunk, seed, &caller_readers);
      EXPECT_EQ(on_caller, threaded);
      EXPECT_EQ(on_caller.errors[2], "in.wav: read failed: bad sector");
      EXPECT_EQ(on_caller.errors[3], "out.wav: write failed: disk full");
      EXPECT_EQ(on_caller.finished, (std::vector<bool>{true, true, false, false}));
      // Every read on the caller's thread, and none there without the option.
      ASSERT_FALSE(caller_readers.empty());
      for (const auto& id : caller_readers) ASSERT_EQ(id, std::this_thread::get_id());
      for (const auto& id : threaded_readers) ASSERT_NE(id, std::this_thread::get_id());
    }
  }
}

// Passes blocks through until its `fail_at`th call, which throws.
class FailingEngine final : public MatrixEngine {
 public:
  explicit FailingEngine(std::size_t fail_at) : fail_at_(fail_at) {}
  void process(std::span<const float> in, std::span<float> out, std::size_t frames,
               Layout) override {
    if (++calls_ == fail_at_) throw std::runtime_error("engine: out of device memory");
    std::copy_n(in.begin(), frames, out.begin());
  }
  void set_matrix(const RoutingMatrix&, bool) override {}
  void reset() override {}
  std::size_t inputs() const override { return 1; }
  std::size_t outputs() const override { return 1; }
  std::size_t max_block_frames() const override { return 16; }
  std::size_t max_taps() const override { return 1; }
  std::string name() const override { return "failing"; }
  std::string description() const override { return "test: fails on a given call"; }

 private:
  std::size_t fail_at_;
  std::size_t calls_ = 0;
};

TEST(OfflinePipeline, AnEngineErrorEndsTheWholeRunWhenTheCallerReadsToo) {
  // Unlike a source's error (that job's alone), the engine's is the run's.
  const std::vector<float> input = random_signal(200, 33);
  std::vector<MemorySink> sinks(2);
  const std::vector<OfflineJob> jobs = {memory_job(&input, 1, &sinks[0]),
                                        memory_job(&input, 1, &sinks[1])};
  for (const bool read_on_caller : {false, true}) {
    SCOPED_TRACE(read_on_caller ? "read on the caller's thread" : "reader thread");
    FailingEngine engine(4);
    OfflineOptions options;
    options.block_frames = 16;
    options.read_on_caller = read_on_caller;
    try {
      run_offline_jobs(engine, jobs, options);
      ADD_FAILURE() << "the run went on after the engine failed";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "engine: out of device memory");
    }
    EXPECT_FALSE(sinks[0].finished);
    EXPECT_FALSE(sinks[1].finished);
  }
}

TEST(OfflinePipeline, ACancelStopsARunThatReadsOnTheCallersThreadAtTheNextBlock) {
  expect_cancel_at_the_next_block(true);
}

TEST(ProgressBar, AppearsOnlyForJobsProjectedToTakeMoreThanTwoSeconds) {
  EXPECT_FALSE(ProgressBar::worth_showing(0.1, 0.01));  // too early to tell
  EXPECT_FALSE(ProgressBar::worth_showing(0.5, 0.5));   // about 1 s in all
  EXPECT_TRUE(ProgressBar::worth_showing(0.5, 0.1));    // about 5 s in all
  EXPECT_TRUE(ProgressBar::worth_showing(1.0, 0.0));    // no progress after a second
  EXPECT_FALSE(ProgressBar::worth_showing(10.0, 1.0));  // finished
}

TEST(ProgressBar, DrawsNothingWhenNotATerminal) {
  std::FILE* sink = std::tmpfile();
  ASSERT_NE(sink, nullptr);
  {
    ProgressBar bar(100, /*enabled=*/false, sink);
    for (std::uint64_t i = 0; i <= 100; ++i) bar.update(i);
    EXPECT_FALSE(bar.drawn());
  }
  EXPECT_EQ(std::ftell(sink), 0L);
  std::fclose(sink);
}

}  // namespace
}  // namespace tapstream
