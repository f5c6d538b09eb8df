// The CPU matrix engine's real-time face (RealtimeMatrixEngine): run inside
// the live pipeline's audio callback in same-period mode (no engine thread),
// its output is the float64 reference of the matrix on a stream of periods
// of random size, across a crossfaded swap and a per-path update; and the
// callback neither allocates nor frees, while another thread posts matrices
// and path updates as fast as it can build them. A swap or path update
// whose worst call would not fit the callback is refused, naming the numbers,
// and the running filters play on.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "daemon/pipeline/live_pipeline.hpp"
#include "dsp/cpu/cpu_matrix_engine.hpp"
#include "dsp/cpu/cpu_matrix_plan.hpp"
#include "tests/allocation_counter.hpp"
#include "tests/matrix_support.hpp"

namespace tapstream {
namespace {

using testing::make_path;
using testing::random_signal;
using testing::reference_output;

constexpr std::size_t kBlock = 64;
constexpr std::size_t kMaxTaps = 4096;

// 8 -> 2 (7.1 to binaural, as HeSuVi's layout): every input to both ears,
// paths of 200..2600 taps, gains, an inverted path, and delays, one of them
// longer than a partition (its input read segments back).
RoutingMatrix eight_to_two(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> length(200, 2600);
  std::vector<MatrixPath> paths;
  for (std::size_t i = 0; i < 8; ++i) {
    for (std::size_t o = 0; o < 2; ++o) {
      const std::size_t k = 2 * i + o;
      const std::size_t delay = k == 5 ? 700 : (k == 12 ? 9 : 0);
      paths.push_back(make_path(i, o, random_signal(length(rng), seed + 10 + k),
                                -6.0 + double(k % 3), delay, k == 7));
    }
  }
  return RoutingMatrix::make(8, 2, std::move(paths));
}

// The CPU matrix engine as the daemon builds it for same-period mode at 48 kHz.
std::unique_ptr<MatrixEngine> callback_engine(const RoutingMatrix& matrix) {
  EngineOptions options;
  options.max_block_frames = kBlock;
  options.max_taps = kMaxTaps;
  options.realtime_calls = true;
  options.sample_rate = 48000;
  return make_cpu_matrix_engine(matrix, options);
}

// The whole stream's inputs, planar, and interleaved for the callback.
struct Stream {
  std::vector<std::vector<float>> inputs;
  std::vector<float> interleaved;
};

Stream random_stream(std::size_t channels, std::size_t frames, std::uint64_t seed) {
  Stream s;
  for (std::size_t c = 0; c < channels; ++c) s.inputs.push_back(random_signal(frames, seed + c));
  s.interleaved.resize(channels * frames);
  for (std::size_t f = 0; f < frames; ++f)
    for (std::size_t c = 0; c < channels; ++c) s.interleaved[f * channels + c] = s.inputs[c][f];
  return s;
}

// The relative error (norm of the difference over the norm of `want`) of
// `got` (interleaved, `outputs` channels) against `want[o]` over frames
// [first, last); the exactness bound of the matrix suites is 1e-5.
double relative_error(const std::vector<float>& got, std::size_t outputs,
                      const std::vector<std::vector<double>>& want, std::size_t first,
                      std::size_t last) {
  double worst = 0.0;
  for (std::size_t o = 0; o < outputs; ++o) {
    double difference = 0.0, reference = 0.0;
    for (std::size_t f = first; f < last; ++f) {
      const double d = double(got[f * outputs + o]) - want[o][f];
      difference += d * d;
      reference += want[o][f] * want[o][f];
    }
    worst = std::max(worst,
                     reference > 0.0 ? std::sqrt(difference / reference) : std::sqrt(difference));
  }
  return worst;
}

// `from` fading into `to` over frames [first, last) (the one-call crossfade),
// `from` before, `to` after.
std::vector<std::vector<double>> faded(const std::vector<std::vector<double>>& from,
                                       const std::vector<std::vector<double>>& to,
                                       std::size_t first, std::size_t last) {
  std::vector<std::vector<double>> blend = from;
  for (std::size_t o = 0; o < blend.size(); ++o) {
    for (std::size_t f = first; f < last; ++f) {
      const double w = double(f - first + 1) / double(last - first);
      blend[o][f] = from[o][f] + w * (to[o][f] - from[o][f]);
    }
    for (std::size_t f = last; f < blend[o].size(); ++f) blend[o][f] = to[o][f];
  }
  return blend;
}

std::vector<std::vector<double>> reference(const RoutingMatrix& matrix, const Stream& stream) {
  std::vector<std::vector<double>> out;
  for (std::size_t o = 0; o < matrix.outputs(); ++o)
    out.push_back(reference_output(matrix, stream.inputs, o));
  return out;
}

TEST(CpuMatrixRealtime, InTheCallbackTheOutputIsTheReferenceAcrossACrossfadedSwapAndAPathUpdate) {
  const std::uint64_t seed = 2401;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const RoutingMatrix first = eight_to_two(seed);
  // The same paths with other filters, gains and delays: a swap.
  RoutingMatrix swapped_in = eight_to_two(seed + 100);
  // Then new taps for paths 2 and 9 alone (the engine transforms those only).
  const std::vector<float> taps2 = random_signal(3000, seed + 50),
                           taps9 = random_signal(40, seed + 51);
  const auto updated = std::make_shared<const RoutingMatrix>(
      with_path_taps(swapped_in, std::vector<PathTaps>{{2, taps2}, {9, taps9}}, kMaxTaps, 65536));

  LivePipelineOptions options;
  options.latency = LatencyMode::zero;
  options.block_frames = kBlock;
  options.margin_frames = 0;
  options.realtime = false;  // a test process: no real-time priority needed
  // Generous deadlines (a 64-frame period of 250 Hz is 256 ms): the test
  // asserts exactness and no late period on a loaded machine, not speed.
  options.sample_rate = 250;
  options.zero_deadline_fraction = 1.0;
  LivePipeline pipeline(callback_engine(first), options);
  ASSERT_TRUE(pipeline.engine_in_callback()) << pipeline.engine_description();
  pipeline.start();

  // Periods of random size (1..64 frames, one engine call each).
  std::mt19937_64 rng(seed + 1);
  std::uniform_int_distribution<std::size_t> period_size(1, kBlock);
  std::vector<std::size_t> periods(700);
  for (auto& p : periods) p = period_size(rng);
  std::size_t frames = 0;
  for (const std::size_t p : periods) frames += p;
  const Stream stream = random_stream(8, frames, seed + 2);
  std::vector<float> out(2 * frames, 0.0f);

  // Each post is acknowledged (the swap thread has handed it to the engine)
  // before the next callback, which therefore takes it: the swap's call is
  // known exactly.
  constexpr std::size_t swap_period = 200, update_period = 450;
  std::size_t swap_frame = 0, update_frame = 0, swap_frames = 0, update_frames = 0;
  std::size_t allocations = 0, frees = 0;
  std::size_t at = 0;
  for (std::size_t p = 0; p < periods.size(); ++p) {
    if (p == swap_period) {
      const std::uint64_t sequence =
          pipeline.post(std::make_shared<const RoutingMatrix>(swapped_in));
      ASSERT_TRUE(pipeline.mailbox().wait_acknowledged(sequence, std::chrono::seconds(30)));
      swap_frame = at;
      swap_frames = periods[p];
    }
    if (p == update_period) {
      const std::uint64_t sequence =
          pipeline.post(updated, {{2, updated->paths()[2].taps}, {9, updated->paths()[9].taps}});
      ASSERT_TRUE(pipeline.mailbox().wait_acknowledged(sequence, std::chrono::seconds(30)));
      update_frame = at;
      update_frames = periods[p];
    }
    {
      testing::CountAllocations counting;
      LivePipeline::device_callback(stream.interleaved.data() + 8 * at, out.data() + 2 * at,
                                    periods[p], &pipeline);
      allocations += counting.allocations();
      frees += counting.frees();
    }
    at += periods[p];
  }
  pipeline.stop();

  const LiveStats stats = pipeline.stats();
  EXPECT_EQ(stats.late_periods, 0u);
  EXPECT_EQ(stats.swaps, 2u);
  EXPECT_EQ(stats.rejected_swaps, 0u);
  EXPECT_EQ(stats.frames_out, frames);
  if (testing::counting_available()) {
    EXPECT_EQ(allocations, 0u) << "the callback allocated";
    EXPECT_EQ(frees, 0u) << "the callback freed";
  }

  const auto want_first = reference(first, stream);
  const auto want_swapped = reference(swapped_in, stream);
  const auto want_updated = reference(*updated, stream);
  std::printf("swap at frame %zu (%zu frames), update at frame %zu (%zu frames)\n", swap_frame,
              swap_frames, update_frame, update_frames);
  EXPECT_LE(relative_error(out, 2, want_first, 0, swap_frame), 1e-5) << "before the swap";
  const auto swap = faded(want_first, want_swapped, swap_frame, swap_frame + swap_frames);
  EXPECT_LE(relative_error(out, 2, swap, swap_frame, swap_frame + swap_frames), 1e-5)
      << "the swap's crossfade";
  EXPECT_LE(relative_error(out, 2, want_swapped, swap_frame + swap_frames, update_frame), 1e-5)
      << "between the swap and the update";
  const auto update = faded(want_swapped, want_updated, update_frame, update_frame + update_frames);
  EXPECT_LE(relative_error(out, 2, update, update_frame, update_frame + update_frames), 1e-5)
      << "the update's crossfade";
  EXPECT_LE(relative_error(out, 2, want_updated, update_frame + update_frames, frames), 1e-5)
      << "after the update";
}

TEST(CpuMatrixRealtime, TheCallbackNeitherAllocatesNorFreesWhileMatricesAndPathUpdatesArePosted) {
  // An audio thread calls process_by() back to back in calls of random size
  // while this thread posts whole matrices and per-path updates, each
  // superseding or following the last at random. The audio thread counts
  // its own allocations and frees: none. Once the posts end, the next call
  // takes the last one and every call after it is exact: nothing posted
  // was lost, no sample either. (Under a sanitizer, which replaces the
  // allocator, nothing is counted; the race and the exactness remain, for
  // ThreadSanitizer to watch.)
  if (testing::counting_available()) {
    // The counter counts (a vector's buffer is one allocation and one free).
    testing::CountAllocations probe;
    std::vector<float> buffer(1000, 1.0f);
    std::printf("probe %g\n", double(buffer[999]));
    std::vector<float>().swap(buffer);
    EXPECT_GE(probe.allocations(), 1u);
    EXPECT_GE(probe.frees(), 1u);
  }
  const std::uint64_t seed = 2402;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const RoutingMatrix a = eight_to_two(seed), b = eight_to_two(seed + 100);
  auto engine = callback_engine(a);
  RealtimeMatrixEngine* realtime = engine->realtime();
  ASSERT_NE(realtime, nullptr) << engine->description();

  const std::size_t frames = 64000, exact_frames = 24000;
  const Stream stream = random_stream(8, frames, seed + 2);
  std::vector<float> out(2 * frames, 0.0f);
  std::atomic<bool> posting_done{false};
  std::size_t settled_frame = frames;  // the audio thread's: where exactness begins
  std::size_t allocations = 0, frees = 0, calls = 0, late = 0;
  std::thread audio([&] {
    std::mt19937_64 rng(seed + 3);
    std::uniform_int_distribution<std::size_t> call_size(1, kBlock);
    // No deadline to meet: the test asserts allocation, not speed.
    const timespec far{std::numeric_limits<time_t>::max() / 2, 0};
    testing::CountAllocations counting;
    bool done_seen = false;
    for (std::size_t at = 0; at < frames;) {
      // Read before the call: a post that ended before it is taken by it.
      const bool done_before = posting_done.load(std::memory_order_acquire);
      if (!done_before && at + exact_frames + kBlock >= frames) {
        // Pacing: the stream's last frames are kept for after the posts.
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        continue;
      }
      const std::size_t n = std::min(call_size(rng), frames - at);
      if (!realtime->process_by(std::span<const float>(stream.interleaved.data() + 8 * at, 8 * n),
                                std::span<float>(out.data() + 2 * at, 2 * n), n,
                                Layout::interleaved, far))
        ++late;
      at += n;
      ++calls;
      if (done_before && !done_seen) {
        done_seen = true;
        settled_frame = at;  // this call took the last post (and crossfaded)
      }
      // Pacing, not a wait: a device's calls come apart, which gives the
      // poster time to build banks while the stream runs.
      if (!done_seen) std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    allocations = counting.allocations();
    frees = counting.frees();
  });

  std::mt19937_64 rng(seed + 4);
  RoutingMatrix last = a;
  std::size_t posts = 0;
  for (int round = 0; round < 60; ++round) {
    if (rng() % 2 == 0) {
      last = (posts % 2 == 0) ? b : a;
      realtime->post_matrix(last, rng() % 4 != 0);
    } else {
      const std::size_t path = rng() % last.paths().size();
      const std::vector<float> taps = random_signal(1 + rng() % 3000, seed + 1000 + posts);
      const std::vector<PathTaps> update{{path, taps}};
      realtime->post_paths(update, true);
      last = with_path_taps(last, update, kMaxTaps, 65536);
    }
    ++posts;
    // Pacing, not a wait: some posts are taken, some superseded.
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
  }
  posting_done.store(true, std::memory_order_release);
  audio.join();
  std::printf("%zu posts over %zu calls; exact from frame %zu\n", posts, calls, settled_frame);

  if (testing::counting_available()) {
    EXPECT_EQ(allocations, 0u) << "the audio thread allocated";
    EXPECT_EQ(frees, 0u) << "the audio thread freed";
  }
  EXPECT_EQ(late, 0u);
  ASSERT_LE(settled_frame + exact_frames, frames) << "too little stream after the last post";
  EXPECT_LE(relative_error(out, 2, reference(last, stream), settled_frame, frames), 1e-5)
      << "after the last post";
}

TEST(CpuMatrixRealtime,
     ASwapOrUpdateWhoseWorstCallWouldNotFitTheCallbackIsRefusedNamingTheNumbers) {
  // Placed in the callback for 8 -> 2 paths of 64 taps; max_taps lets a
  // swap bring 65536 taps a path, whose tails would take more than the
  // callback's share of a 64-frame call at every segment boundary.
  const std::uint64_t seed = 2403;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  constexpr std::size_t kLong = 65536, kPartition = 128;
  const auto matrix = [&](std::size_t taps, std::uint64_t s) {
    std::vector<MatrixPath> paths;
    for (std::size_t i = 0; i < 8; ++i)
      for (std::size_t o = 0; o < 2; ++o)
        paths.push_back(make_path(i, o, random_signal(taps, s + 2 * i + o), -12.0));
    return RoutingMatrix::make(8, 2, std::move(paths), kLong);
  };
  const RoutingMatrix running = matrix(64, seed), longer = matrix(kLong, seed + 100);
  EngineOptions options;
  options.max_block_frames = kBlock;
  options.max_taps = kLong;
  options.realtime_calls = true;
  options.sample_rate = 48000;
  options.cpu.matrix_partition = kPartition;  // the plan priced below
  // The premise, by the engine's own cost model: the running matrix fits
  // half of the call twice over (a crossfade runs two banks), the longer one
  // does not.
  const double half_call_ns = 0.5 * 1e9 * double(kBlock) / 48000.0;
  ASSERT_LE(2 * cpu_matrix_worst_call_ns(CpuMatrixShape::of(running), kBlock, kPartition),
            half_call_ns);
  ASSERT_GT(2 * cpu_matrix_worst_call_ns(CpuMatrixShape::of(longer), kBlock, kPartition),
            half_call_ns);

  auto engine = make_cpu_matrix_engine(running, options);
  RealtimeMatrixEngine* realtime = engine->realtime();
  ASSERT_NE(realtime, nullptr) << engine->description();
  const auto refused = [](const auto& post) {
    try {
      post();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(taken)");
  };
  const std::string whole = refused([&] { realtime->post_matrix(longer, true); });
  std::printf("%s\n", whole.c_str());
  EXPECT_NE(whole.find("worst call"), std::string::npos) << whole;
  EXPECT_NE(whole.find("64-frame call (1333 us)"), std::string::npos) << whole;
  EXPECT_NE(whole.find("running filters keep running"), std::string::npos) << whole;
  std::vector<PathTaps> update;
  for (std::size_t p = 0; p < longer.paths().size(); ++p)
    update.push_back({p, longer.paths()[p].taps});
  const std::string paths = refused([&] { realtime->post_paths(update, true); });
  EXPECT_NE(paths.find("worst call"), std::string::npos) << paths;
  // A few paths made longer fit, and are taken.
  EXPECT_NO_THROW(realtime->post_paths(std::span<const PathTaps>(update).first(1), false));
  const RoutingMatrix taken =
      with_path_taps(running, std::span<const PathTaps>(update).first(1), kLong, 65536);

  // The refused posts changed nothing: the stream is the taken matrix's, exactly.
  const std::size_t frames = 6000;
  const Stream stream = random_stream(8, frames, seed + 2);
  std::vector<float> out(2 * frames, 0.0f);
  const timespec far{std::numeric_limits<time_t>::max() / 2, 0};
  for (std::size_t at = 0; at < frames; at += kBlock) {
    const std::size_t n = std::min(kBlock, frames - at);
    ASSERT_TRUE(realtime->process_by(
        std::span<const float>(stream.interleaved.data() + 8 * at, 8 * n),
        std::span<float>(out.data() + 2 * at, 2 * n), n, Layout::interleaved, far));
  }
  EXPECT_LE(relative_error(out, 2, reference(taken, stream), 0, frames), 1e-5);
}

}  // namespace
}  // namespace tapstream
