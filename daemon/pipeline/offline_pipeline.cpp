// The offline pipeline's three stages and their hand-off.
//
// Threads and memory ordering: the reader thread fills input blocks, the
// caller's thread (the engine stage) turns input blocks into output blocks,
// the writer thread drains output blocks. With read_on_caller there is no
// reader thread: the caller's thread fills an input block and turns it into
// an output block at once (pass_on), the input ring's queues then only
// taking the block back. A block belongs to exactly one
// stage at a time; it changes hands only through the four queues below (free
// and full, input and output), which are guarded by one mutex. Unlocking the
// mutex after a push and locking it before the pop orders everything the
// giver wrote (the samples, the block's header, the reader's error for a
// failed job) before everything the taker reads, so the samples themselves
// need no atomics. Blocks are large (thousands of frames), so one lock and
// one condition variable cost nothing measurable. `stop_` ends every stage:
// set (under the mutex) on cancel or on an error that ends the whole run.
// Waits time out every 50 ms so that a cancel set by a signal handler (which
// cannot notify) is seen even by a stage that waits.

#include "daemon/pipeline/offline_pipeline.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "dsp/files/sound_file.hpp"

namespace tapstream {

namespace {

enum class Mark {
  data,        // frames of the job (possibly with its end: see job_end)
  job_failed,  // the job's source failed; nothing more of it comes
  all_done,    // no more jobs
};

struct Block {
  BlockMemory samples{nullptr, [](float*) {}};
  std::size_t job = 0;
  std::size_t frames = 0;
  std::size_t input_frames = 0;  // of `frames`, those from the input (the rest are tail)
  Mark mark = Mark::data;
  bool job_end = false;  // the job's last frames (with its tail) are in this block
};

class OfflineRun {
 public:
  OfflineRun(MatrixEngine& engine, std::span<const OfflineJob> jobs, const OfflineOptions& options)
      : engine_(engine),
        jobs_(jobs),
        options_(options),
        input_channels_(engine_.inputs()),
        output_channels_(engine_.outputs()),
        block_frames_(options.block_frames),
        blocks_(std::max<std::size_t>(options.blocks_in_flight, 2)),
        source_errors_(jobs.size()),
        results_(jobs.size()) {
    if (block_frames_ == 0 || block_frames_ > engine_.max_block_frames()) {
      throw std::invalid_argument("block of " + std::to_string(block_frames_) +
                                  " frames: the engine takes 1 to " +
                                  std::to_string(engine_.max_block_frames()));
    }
    const BlockAllocator allocate =
        options.allocate ? options.allocate : BlockAllocator(ordinary_block_memory);
    for (std::size_t i = 0; i < 2 * blocks_; ++i) {
      Block block;
      block.samples = allocate(block_frames_ * (i < blocks_ ? input_channels_ : output_channels_));
      (i < blocks_ ? free_in_ : free_out_).push_back(std::move(block));
    }
  }

  std::vector<OfflineJobResult> run() {
    std::thread writer([this] { guarded([this] { write_all(); }); });
    if (options_.read_on_caller) {
      guarded([this] { read_all(); });
    } else {
      std::thread reader([this] { guarded([this] { read_all(); }); });
      guarded([this] { filter_all(); });
      reader.join();
    }
    writer.join();
    if (fatal_) std::rethrow_exception(fatal_);
    return std::move(results_);
  }

 private:
  using Queue = std::deque<Block>;

  // Runs a stage; an exception that escapes it ends the whole run.
  template <typename Stage>
  void guarded(Stage stage) {
    try {
      stage();
    } catch (...) {
      stop_on_exception();
    }
  }

  // Ends the run with the exception being handled; however a stage noticed
  // the cancel, the run ends as interrupted.
  void stop_on_exception() {
    stop(cancelled() ? std::make_exception_ptr(std::runtime_error("interrupted"))
                     : std::current_exception());
  }

  void stop(std::exception_ptr error) {
    const std::lock_guard lock(mutex_);
    if (!fatal_) fatal_ = error;
    stop_ = true;
    changed_.notify_all();
  }

  bool cancelled() const {
    return options_.cancel != nullptr && options_.cancel->load(std::memory_order_relaxed);
  }

  void check_cancel() {
    if (cancelled()) throw std::runtime_error("interrupted");
  }

  // The next block from `queue`, or nothing once the run stops.
  std::optional<Block> take(Queue& queue) {
    std::unique_lock lock(mutex_);
    for (;;) {
      if (stop_) return std::nullopt;
      if (!queue.empty()) break;
      if (cancelled()) {
        lock.unlock();
        check_cancel();
      }
      changed_.wait_for(lock, std::chrono::milliseconds(50));
    }
    Block block = std::move(queue.front());
    queue.pop_front();
    return block;
  }

  void give(Queue& queue, Block block) {
    const std::lock_guard lock(mutex_);
    queue.push_back(std::move(block));
    changed_.notify_all();
  }

  static std::span<float> samples(Block& block, std::size_t channels, std::size_t from,
                                  std::size_t to) {
    return {block.samples.get() + from * channels, (to - from) * channels};
  }

  // Reader thread: every job's frames, then its tail of zeros, in blocks.
  void read_all() {
    for (std::size_t job = 0; job < jobs_.size(); ++job) {
      check_cancel();
      if (options_.claim && !options_.claim(job)) continue;
      if (!read_job(job)) return;
    }
    std::optional<Block> block = take(free_in_);
    if (!block) return;
    block->mark = Mark::all_done;
    block->frames = 0;
    block->input_frames = 0;
    pass_on(std::move(*block));
  }

  // A block the reader has filled goes to the engine stage: to its thread,
  // or (read_on_caller) through the engine here. False once the run stops.
  // An engine's error ends the whole run (not the job, as a source's does).
  bool pass_on(Block block) {
    if (!options_.read_on_caller) {
      give(full_in_, std::move(block));
      return true;
    }
    try {
      return filter_block(std::move(block));
    } catch (...) {
      stop_on_exception();
      return false;
    }
  }

  // False once the run stops.
  bool read_job(std::size_t job) {
    OfflineSource source;
    std::optional<Block> block;
    try {
      source = jobs_[job].open_source();
      std::size_t tail = source.tail_frames;
      bool at_end = false;
      for (;;) {
        check_cancel();
        block = take(free_in_);
        if (!block) return false;
        block->job = job;
        block->mark = Mark::data;
        std::size_t frames = 0;
        while (!at_end && frames < block_frames_) {
          const std::size_t got =
              source.read(samples(*block, input_channels_, frames, block_frames_));
          if (got > block_frames_ - frames) {
            throw std::logic_error("source returned more frames than asked for");
          }
          if (got == 0) at_end = true;
          frames += got;
        }
        block->input_frames = frames;
        if (at_end) {
          const std::size_t zeros = std::min(tail, block_frames_ - frames);
          std::fill_n(block->samples.get() + frames * input_channels_, zeros * input_channels_,
                      0.0f);
          frames += zeros;
          tail -= zeros;
        }
        block->frames = frames;
        block->job_end = at_end && tail == 0;
        const bool done = block->job_end;
        const bool going_on = pass_on(std::move(*block));
        block.reset();
        if (!going_on) return false;
        if (done) return true;
      }
    } catch (...) {
      if (cancelled()) throw;
      source_errors_[job] = std::current_exception();
    }
    // The job failed: a marker tells the writer to drop its sink.
    if (!block) block = take(free_in_);
    if (!block) return false;
    block->job = job;
    block->mark = Mark::job_failed;
    block->frames = 0;
    block->input_frames = 0;
    block->job_end = true;
    return pass_on(std::move(*block));
  }

  // The caller's thread: input blocks through the engine into output blocks.
  void filter_all() {
    for (;;) {
      check_cancel();
      std::optional<Block> in = take(full_in_);
      if (!in || !filter_block(std::move(*in))) return;
    }
  }

  // One input block through the engine into an output block for the writer;
  // the input block goes back to the reader. False when the run stops or
  // `in` was the last (all_done). On the caller's thread only.
  bool filter_block(Block in) {
    std::optional<Block> out = take(free_out_);
    if (!out) return false;
    out->job = in.job;
    out->frames = in.frames;
    out->input_frames = in.input_frames;
    out->mark = in.mark;
    out->job_end = in.job_end;
    if (in.mark == Mark::data && in.frames > 0) {
      if (current_job_ && *current_job_ != in.job) engine_.reset();
      current_job_ = in.job;
      engine_.process(samples(in, input_channels_, 0, in.frames),
                      samples(*out, output_channels_, 0, in.frames), in.frames,
                      Layout::interleaved);
    }
    const bool done = in.mark == Mark::all_done;
    give(free_in_, std::move(in));
    give(full_out_, std::move(*out));
    return !done;
  }

  // Writer thread: output blocks into each job's sink.
  void write_all() {
    std::optional<OfflineSink> sink;
    std::optional<std::size_t> sink_job;  // the job whose blocks come now
    bool job_failed = false;
    std::uint64_t written = 0;
    const auto job_done = [&](std::size_t job) {
      sink.reset();
      if (options_.on_job_done) options_.on_job_done(job, results_[job]);
    };
    for (;;) {
      std::optional<Block> block = take(full_out_);
      if (!block) return;
      if (block->mark == Mark::all_done) return;
      const std::size_t job = block->job;
      if (sink_job != job) {
        sink.reset();
        sink_job = job;
        job_failed = false;
      }
      OfflineJobResult& result = results_[job];
      if (block->mark == Mark::job_failed) {
        if (!result.error) result.error = source_errors_[job];
        job_done(job);
        give(free_out_, std::move(*block));
        continue;
      }
      try {
        if (!job_failed) {
          check_cancel();
          if (!sink) sink = jobs_[job].open_sink();
          if (block->frames > 0) sink->write(samples(*block, output_channels_, 0, block->frames));
          result.input_frames += block->input_frames;
          result.output_frames += block->frames;
          if (block->job_end && sink->finish) sink->finish();
        }
      } catch (...) {
        if (cancelled()) throw;
        result.error = std::current_exception();
        job_failed = true;
        sink.reset();  // removes what it wrote
      }
      written += block->frames;
      const bool end = block->job_end;
      give(free_out_, std::move(*block));
      if (options_.on_progress) options_.on_progress(written);
      if (end) job_done(job);
    }
  }

  MatrixEngine& engine_;
  std::span<const OfflineJob> jobs_;
  const OfflineOptions& options_;
  const std::size_t input_channels_;
  const std::size_t output_channels_;
  const std::size_t block_frames_;
  const std::size_t blocks_;

  std::optional<std::size_t> current_job_;  // the engine stage's: whose blocks it filters

  std::mutex mutex_;
  std::condition_variable changed_;
  Queue free_in_, full_in_, free_out_, full_out_;  // guarded by mutex_
  bool stop_ = false;                              // guarded by mutex_
  std::exception_ptr fatal_;                       // guarded by mutex_; read after the joins

  // Written by the reader before the job's failure marker is given on.
  std::vector<std::exception_ptr> source_errors_;
  // Written by the writer; read by the caller after the joins.
  std::vector<OfflineJobResult> results_;
};

}  // namespace

std::vector<OfflineJobResult> run_offline_jobs(MatrixEngine& engine,
                                               std::span<const OfflineJob> jobs,
                                               const OfflineOptions& options) {
  OfflineRun run(engine, jobs, options);
  return run.run();
}

OfflineResult run_offline(MatrixEngine& engine, const ReadFrames& read, const WriteFrames& write,
                          const OfflineOptions& options) {
  const OfflineJob job{
      [&] {
        return OfflineSource{read, options.tail_frames};
      },
      [&] {
        return OfflineSink{write, {}};
      },
  };
  const std::vector<OfflineJobResult> results =
      run_offline_jobs(engine, std::span<const OfflineJob>(&job, 1), options);
  if (results[0].error) std::rethrow_exception(results[0].error);
  return {results[0].input_frames, results[0].output_frames};
}

OfflineResult run_offline(MatrixEngine& engine, SoundFileReader& reader, SoundFileWriter& writer,
                          const OfflineOptions& options) {
  if (std::size_t(reader.info().channels) != engine.inputs()) {
    throw std::invalid_argument("input has " + std::to_string(reader.info().channels) +
                                " channels, the engine " + std::to_string(engine.inputs()));
  }
  return run_offline(
      engine, [&reader](std::span<float> buffer) { return reader.read(buffer); },
      [&writer](std::span<const float> frames) { writer.write(frames); }, options);
}

}  // namespace tapstream
