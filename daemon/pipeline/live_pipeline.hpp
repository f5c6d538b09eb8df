#pragma once
// The live pipeline: an audio callback (a PortAudio stream, or a file endpoint
// acting as one) and an engine thread that filters block after block.
//
// Threads and what they share:
// - The input side (one thread: the input callback) calls push_input(); it is
//   the only producer of the input ring and the only writer of the input
//   counters. The output side (one thread: the output callback, possibly the
//   same one) calls pull_output(); it is the only consumer of the output ring
//   and the only writer of the output counters. Neither locks, allocates,
//   logs or waits: they copy samples through the SpscRings, count xruns in
//   relaxed atomics and post a semaphore (sem_post: one atomic and, when the
//   engine sleeps, a futex wake; it never blocks).
// - The engine thread is the only consumer of the input ring, the only
//   producer of the output ring, the only user of the MatrixEngine, and polls
//   the mailbox (a MatrixMailbox) at every block boundary.
//
// Channels: the input side pushes input_channels() per frame (the matrix's
// inputs), the output side pulls output_channels() (its outputs); a filter
// per channel is the diagonal matrix, with as many of one as of the other.
// - Any thread may read stats(). The counters are plain event counts with one
//   writer each, so relaxed ordering is enough: nobody infers the state of
//   other memory from them. The rings publish the samples themselves with
//   acquire/release (see dsp/realtime/spsc_ring.hpp).
//
// Latency modes:
// - buffered: the output ring starts with latency_frames() = block_frames +
//   margin_frames of silence, and the pipeline keeps exactly that many frames
// between input and output for the whole run: when the output side finds the
// ring short (an underrun) it plays silence and later drops the same number
// of late frames; when the input ring is full (an overrun) the lost input is
// replaced by as many frames of silence. So the sample that enters at input
// frame n always leaves at output frame n + latency_frames().
// - zero (same period): the output ring starts empty (latency_frames() = 0).
//   The callback pushes its period, the engine thread filters it at once (in
//   calls of up to block_frames, so a device period that changes is
//   followed), and pull_output() waits for that same period's output on a
//   semaphore until a deadline, zero_deadline_fraction of the period after
//   it was called (sem_clockwait: a bounded futex wait, no lock). A period
//   whose output misses the deadline plays silence and counts as late; its
//   frames are dropped when they arrive (the underrun rule above), so the
//   stream stays aligned with 0 frames added.
// - zero with an engine that offers a real-time face (MatrixEngine::realtime():
//   the CPU engine's non-uniform form, running a diagonal matrix, or the CPU
//   matrix engine where its cost model says its worst call fits the period;
//   engine_in_callback()): no engine thread and no hand-off.
//   push_input() itself filters the period (in calls of up to block_frames)
//   with RealtimeMatrixEngine::process_by() and a deadline zero_deadline_fraction of
//   the period after it was called; the engine computes the head in the call
//   and waits for its tail partitions, computed ahead on its lower-priority
//   worker threads, only until that deadline. A late period (some tail not
//   ready by the deadline, or the engine recovering from an overload) plays
//   silence for the whole period, counts in late_periods and underruns, and
//   the stream stays aligned and exact afterwards. The output goes through the
//   output ring to pull_output(), which in a duplex callback finds it there at
//   once (with separate input and output streams it waits as above).
//   push_input() is then the only user of the engine; a swap thread (normal
//   priority) polls the mailbox and hands matrices to post_matrix(), which
//   prepares them off the audio thread (the per-channel engine on a thread
//   of its own, the matrix engine on the swap thread itself); the callback
//   takes them at a call boundary without allocating.
//
// A device period that changes (JACK's buffer size, PipeWire's quantum) is
// followed in every mode: the callback filters whatever it is given, in calls
// of up to the engine's block. The callback notes the period it is called
// with (a relaxed store, once it held for period_settle_calls calls, so that
// a host whose periods vary call by call is not chased) and
// next_device_change() reports it. (JACK tells a client of a new buffer size
// in a callback on a non-real-time thread before the first process call at
// it, but PortAudio registers none on its JACK client, and none can be added
// once the client is active: the process callback is where a change shows,
// and its first calls at the new size run on the old engine, exactly.)
// Buffered mode and the engine thread's hand-off keep their block and
// latency. With the engine in the callback and options.engine_for_block set,
// the swap thread re-plans: it builds an engine whose head is the new period
// (engine_for_block, off the callback) and offers it to the callback, which
// takes it at the next call boundary without allocating. From there on, for
// the old engine's response length (the running matrix's longest path, delay
// included), the callback runs both: the new engine on the input, the old
// one on silence, and plays their sum: by linearity exactly the convolution
// of the whole stream, with no frame of latency and no gap; a chunk that
// either engine misses the deadline for plays silence and counts as late, as
// always. Then the swap thread frees the old engine. Matrices posted
// meanwhile wait in the mailbox until the transition is over.

#include <semaphore.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "daemon/pipeline/device_change.hpp"
#include "daemon/pipeline/latency_mode.hpp"
#include "daemon/pipeline/period_trace.hpp"
#include "dsp/model/engine.hpp"
#include "dsp/model/matrix_engine.hpp"
#include "dsp/realtime/filter_mailbox.hpp"
#include "dsp/realtime/latency_stats.hpp"
#include "dsp/realtime/output_stage.hpp"
#include "dsp/realtime/spsc_ring.hpp"

namespace tapstream {

struct LivePipelineOptions {
  LatencyMode latency = LatencyMode::buffered;
  // zero mode: how much of a period pull_output() may wait for its output.
  double zero_deadline_fraction = 0.75;
  // zero mode: run a RealtimeEngine inside push_input() (see above); false
  // keeps the engine thread's hand-off for every engine.
  bool engine_in_callback = true;
  // zero mode with the engine thread's hand-off: how long that thread polls
  // for the next period's input before it sleeps on the semaphore. Without
  // real-time priority (a VM, the GPU machine) a sleeping thread now and then
  // wakes over a millisecond late, a late period; polling for a whole period
  // costs one core and takes that wake-up away. 0: sleep at once.
  std::chrono::nanoseconds engine_spin{0};
  int sample_rate = 48000;
  std::size_t block_frames = 256;   // frames per Engine::process call
  std::size_t margin_frames = 256;  // safety margin of the output ring, beyond one block
  bool crossfade = true;            // crossfade one block when a new bank is installed
  // Ask for SCHED_FIFO realtime_priority on the engine thread; with the
  // engine in the callback, on a callback thread the device left at normal
  // priority (it does the engine thread's work: dsp/realtime/thread_priority.hpp).
  bool realtime = true;
  int realtime_priority = 60;  // at most; the engine thread keeps below the callback's own
  // zero mode with the engine in the callback: builds the engine for calls of
  // up to the given block (the new period), with the running filters, when
  // the device's period changes (see above; called on the swap thread, may
  // throw: the running engine then keeps running). Empty: no re-plan.
  std::function<std::unique_ptr<MatrixEngine>(std::size_t block_frames)> engine_for_block;
  // The running matrix's longest response (RoutingMatrix::max_taps(), delay
  // included): how long a re-plan's transition runs the old engine. 0: the
  // engine's bound (max_taps() + max_delay_frames()).
  std::size_t response_frames = 0;
};

struct LiveStats {
  std::uint64_t blocks = 0;            // blocks processed by the engine
  std::uint64_t frames_in = 0;         // frames given to push_input()
  std::uint64_t frames_out = 0;        // frames taken by pull_output()
  std::uint64_t underruns = 0;         // pull_output() calls that found the ring short
  std::uint64_t underrun_frames = 0;   // frames of silence played for them
  std::uint64_t overruns = 0;          // push_input() calls that found the ring full
  std::uint64_t overrun_frames = 0;    // input frames lost (replaced by silence)
  std::uint64_t swaps = 0;             // banks installed
  std::uint64_t rejected_swaps = 0;    // banks the engine refused
  std::uint64_t last_swap_block = 0;   // index of the first block filtered by the newest bank
  std::uint64_t engine_errors = 0;     // process() calls that threw (block output as silence)
  std::uint64_t late_periods = 0;      // zero mode: periods whose output missed the deadline
                                       // (so played silence, wholly or in part)
  std::uint64_t late_unstarted = 0;    // of those, with the engine thread's hand-off: periods
                                       // whose input it had not yet taken at the deadline (busy
                                       // with an earlier one, or not scheduled); the rest were
                                       // being computed
  std::uint64_t nonfinite_inputs = 0;  // input samples that were NaN or infinite (given to the
                                       // engine as 0)
  std::uint64_t period_changes = 0;    // device periods that changed while running
  std::uint64_t replans = 0;           // engines re-planned for a new period
};

// The device callback's thread as the callback last saw it (LivePipelineOptions::realtime).
struct CallbackScheduling {
  int thread_id = 0;    // its thread (gettid); 0 before the first call
  int priority = 0;     // its SCHED_FIFO or SCHED_RR priority; 0: not real-time
  bool raised = false;  // tapstream raised it (the engine runs in a thread the device left
                        // at normal priority)
  int raise_error = 0;  // the errno that refused raising it (EPERM: no rtprio); 0: none
};

class LivePipeline {
 public:
  // `engine` must be built for `options.block_frames` frames (or more): its
  // inputs in, its outputs out.
  LivePipeline(std::unique_ptr<MatrixEngine> engine, const LivePipelineOptions& options);
  ~LivePipeline();  // stops the engine thread
  LivePipeline(const LivePipeline&) = delete;
  LivePipeline& operator=(const LivePipeline&) = delete;

  // Warms the engine up, fills the output ring with latency_frames() of
  // silence and starts the engine thread. Start the devices after this.
  void start();
  // Stops the engine thread (stop the devices first). Safe to call twice.
  void stop();

  // From now on push_input() takes silence instead of its input, so that
  // what came in before has left once latency_frames() + one block more
  // frames were pulled (see drained()).
  void begin_drain();
  bool drained() const;
  // The input has ended (its device stopped; the caller is the input side
  // now): one block of silence, not counted as input, follows it so that the
  // engine brings the input's last partial block out.
  void flush_input() noexcept;

  // --- real-time side: never lock, allocate, log or wait ---------------
  void push_input(const float* interleaved, std::size_t frames) noexcept;
  void pull_output(float* interleaved, std::size_t frames) noexcept;
  // An AudioCallback (daemon/io/audio_device.hpp) with `context` = this pipeline.
  static void device_callback(const float* input, float* output, std::size_t frames,
                              void* context) noexcept;

  // --- unpaced side (file endpoints that are not paced in real time) ---
  // Like push/pull, but they move only what fits or what is there (no xrun
  // counting) and return the frame count; callers may retry.
  std::size_t offer_input(const float* interleaved, std::size_t frames);
  std::size_t take_output(float* interleaved, std::size_t frames);

  // --- control side ------------------------------------------------------
  // Matrices posted here are installed by the engine thread at the next
  // block boundary (one control thread at a time, see
  // dsp/realtime/filter_mailbox.hpp); MatrixEngine::set_matrix refuses a reroute.
  // A matrix posted with the paths that changed goes to MatrixEngine::set_paths
  // (RealtimeMatrixEngine::post_paths), which transforms those paths alone.
  MatrixMailbox& mailbox() { return mailbox_; }
  // mailbox().post(), and with the engine in the callback a wake-up of the
  // swap thread, which then hands the matrix over at once (it otherwise
  // looks at the mailbox only every swap_poll). Returns the sequence number.
  std::uint64_t post(std::shared_ptr<const RoutingMatrix> matrix,
                     std::vector<PathTaps> changed = {});
  static constexpr std::chrono::milliseconds swap_poll{50};
  // Volume, mute and meters of what leaves pull_output()/take_output().
  OutputStage& output_stage() { return output_stage_; }

  // Channels per frame pushed and pulled; channels() is the output's (volume,
  // meters), the same as the input's for a diagonal matrix.
  std::size_t input_channels() const { return input_channels_; }
  std::size_t output_channels() const { return output_channels_; }
  std::size_t channels() const { return output_channels_; }
  std::size_t block_frames() const { return options_.block_frames; }
  // The calls the running engine is planned for: block_frames(), or the
  // period a re-plan followed.
  std::size_t engine_block_frames() const {
    return engine_block_frames_.load(std::memory_order_relaxed);
  }
  // The device's period as its callback last settled on it (0 before its
  // first calls, or without a device).
  std::size_t device_period_frames() const {
    return device_period_frames_.load(std::memory_order_relaxed);
  }
  // Control side (one thread): the next change of the device's stream since
  // the last call, or none. A period change is reported once it held for
  // period_settle_calls callbacks.
  std::optional<DeviceChange> next_device_change();
  // Control side: the rate the device runs at now (the backend tells it off
  // the callback, see DeviceLink); a rate other than sample_rate() is
  // reported once by next_device_change().
  void note_device_rate(int hz) { device_rate_.store(hz, std::memory_order_relaxed); }
  int device_rate() const { return device_rate_.load(std::memory_order_relaxed); }
  // True while a re-plan for a new period is being built or handed over.
  bool replanning() const { return replan_state_.load(std::memory_order_acquire) != 0; }
  int sample_rate() const { return options_.sample_rate; }
  // Input-to-output latency the pipeline adds, in frames and milliseconds.
  std::size_t latency_frames() const {
    return options_.latency == LatencyMode::zero ? 0
                                                 : options_.block_frames + options_.margin_frames;
  }
  LatencyMode latency_mode() const { return options_.latency; }
  // zero mode with the engine run inside the callback (no hand-off).
  bool engine_in_callback() const { return in_callback_; }
  double latency_ms() const { return 1000.0 * double(latency_frames()) / options_.sample_rate; }
  // Name and description of the engine (read-only after construction).
  const std::string& engine_name() const { return engine_name_; }
  // (A re-plan changes it: a copy, taken under a lock, never by the callback.)
  std::string engine_description() const;
  std::size_t engine_max_taps() const { return engine_max_taps_; }
  std::size_t engine_max_delay_frames() const { return engine_max_delay_frames_; }
  // The thread that runs the engine got real-time scheduling: the engine
  // thread, or with the engine in the callback, the callback's thread (the
  // device's priority, or the one it raised itself to).
  bool realtime_granted() const {
    return in_callback_ ? callback_priority_.load(std::memory_order_relaxed) > 0
                        : realtime_granted_.load(std::memory_order_acquire);
  }

  LiveStats stats() const;
  // Any thread: see CallbackScheduling.
  CallbackScheduling callback_scheduling() const;
  // Engine time per block, swap included (recorded by the engine thread).
  const LatencyStats& processing_times() const { return processing_times_; }
  // Timestamps of the recent periods, blocks and calls (any thread may dump them).
  const PeriodTrace& trace() const { return trace_; }

 private:
  void engine_loop();
  // The engine's first calls made before the stream starts: see start().
  void warm_up_engine();
  // engine_in_callback(): hands posted banks to the engine (the swap thread).
  // It sleeps until post(), a settled period change, the end of a re-plan's
  // transition or stop() wakes it, or swap_poll passes (a matrix posted
  // straight into the mailbox): a wake-up every 2 ms was 500 context
  // switches a second for nothing, a share of a core on a virtual machine.
  void swap_loop();
  // engine_in_callback(): filters `frames` frames into the output ring,
  // within `deadline` (null: unpaced, as long as it takes); returns the
  // frames whose output was late (silence).
  std::size_t filter_in_callback(const float* interleaved, std::size_t frames,
                                 const timespec* deadline) noexcept;
  // Filters `frames` frames of engine_in_ into engine_out_ (the engine
  // thread's one step, in both modes).
  // `woke_ns`: when the thread found the input (CLOCK_MONOTONIC), for the trace.
  void filter_block(std::size_t frames, std::int64_t woke_ns);
  // Gives the engine a bank posted to the mailbox, if any (between blocks).
  void install_posted_bank();
  void wake_engine() noexcept;
  // zero mode: waits until the output ring holds `samples` or `deadline`
  // (CLOCK_MONOTONIC) passes; true when it holds them.
  bool wait_for_output(std::size_t samples, const timespec& deadline) noexcept;
  // zero mode: zero_deadline_fraction of a period of `frames` from now.
  timespec zero_deadline(std::size_t frames) const noexcept;
  // Polls for input for up to options_.engine_spin; true when some came.
  bool spin_for_input() noexcept;
  void request_realtime();
  // Device callback: records its thread's real-time priority (first call,
  // then now and then: dsp/realtime/thread_priority.hpp), after raising it
  // when the engine runs in it and the device left it at normal priority.
  void note_callback_priority() noexcept;
  // Engine thread: moves itself just below the callback's priority.
  void follow_callback_priority();
  // Device callback: records the period it is called with (`input_side`:
  // a call with input; else an output-only call).
  void note_period(bool input_side, std::size_t frames) noexcept;
  // Swap thread: starts a re-plan when the device's period moved off the
  // engine's block, and finishes one the callback is done with.
  void follow_period();
  // Callback: takes an offered re-plan (at a call boundary).
  void take_replan() noexcept;

  LivePipelineOptions options_;
  std::unique_ptr<MatrixEngine> engine_;
  // What a re-plan hands the callback: the engine for the new period and
  // buffers for its block; the callback swaps them with its own, so that
  // afterwards it holds what the old engine used, for the swap thread to free.
  struct Replan {
    std::unique_ptr<MatrixEngine> engine;
    RealtimeMatrixEngine* realtime = nullptr;
    std::size_t block_frames = 0;
    std::vector<float> engine_in;
    std::vector<float> engine_out;
    std::vector<float> transition_out;  // the old engine's output during the transition
    std::size_t transition_frames = 0;
    std::string description;
  };
  // 0: none; building: the swap thread builds the engine for the new period;
  // offered: the swap thread filled replan_, the callback may take
  // it; running: the callback runs both engines; done: the callback is
  // through with the old engine (in replan_), the swap thread frees it.
  enum ReplanState : int {
    replan_none = 0,
    replan_building,
    replan_offered,
    replan_running,
    replan_done
  };
  std::unique_ptr<Replan> replan_;
  std::atomic<int> replan_state_{replan_none};
  std::atomic<std::size_t> engine_block_frames_;
  mutable std::mutex description_mutex_;  // engine_description_ (never the callback's)
  std::size_t input_channels_;
  std::size_t output_channels_;
  RealtimeMatrixEngine* realtime_engine_ = nullptr;  // engine_'s, when run in the callback
  bool in_callback_ = false;                         // realtime_engine_ was set at construction
  std::string engine_name_;
  std::string engine_description_;
  std::size_t engine_max_taps_;
  std::size_t engine_max_delay_frames_;

  SpscRing<float> input_ring_;
  SpscRing<float> output_ring_;
  MatrixMailbox mailbox_;
  LatencyStats processing_times_;
  PeriodTrace trace_;
  OutputStage output_stage_;
  sem_t data_ready_;
  sem_t output_ready_;  // zero mode: posted by the engine thread after each block

  // Input side only.
  std::vector<float> silence_;  // block of zeros (of the wider side), source of the silence pushed
  std::size_t input_debt_frames_ = 0;  // input lost to overruns, still to be padded
  // Output side only.
  std::size_t output_debt_frames_ = 0;  // silence played for underruns, late frames to drop

  // Callback side only.
  std::size_t call_block_frames_;    // the running engine's calls
  std::size_t transition_left_ = 0;  // frames the old engine still runs on silence
  struct SettlingPeriod {
    std::size_t frames = 0;  // the last call's frames...
    unsigned calls = 0;      // ...and how many calls in a row had them
  };
  SettlingPeriod input_period_;   // input side's calls
  SettlingPeriod output_period_;  // output side's calls (a stream without input)
  bool callback_priority_seen_ = false;
  unsigned callback_calls_since_priority_ = 0;
  // Written by the callback, read by the engine thread and the control side
  // (relaxed: a priority to follow or report, nothing else depends on it);
  // 0: not real-time.
  std::atomic<int> callback_priority_{0};
  std::atomic<int> callback_thread_id_{0};
  // The callback's raise of its own priority: 0 not tried, > 0 the priority
  // granted, < 0 the errno that refused it (not asked again).
  std::atomic<int> callback_raise_{0};

  // Engine thread only.
  int applied_callback_priority_ = 0;
  int current_priority_ = 0;
  std::vector<float> engine_in_;
  std::vector<float> engine_out_;
  std::uint64_t engine_frames_ = 0;  // input frames the engine thread has filtered

  std::atomic<bool> running_{false};
  std::atomic<bool> draining_{false};
  std::atomic<std::uint64_t> drain_target_frames_{0};
  std::atomic<bool> realtime_granted_{false};
  std::thread engine_thread_;
  // Set by the engine thread once its warm-up calls are made (start() waits
  // for it); warm_up_error_ is written before the release store and read
  // after the acquire load.
  std::atomic<bool> warmed_up_{false};
  std::string warm_up_error_;

  // Counters (see LiveStats); one writer each.
  std::atomic<std::uint64_t> blocks_{0};
  std::atomic<std::uint64_t> frames_in_{0};
  std::atomic<std::uint64_t> frames_out_{0};
  std::atomic<std::uint64_t> underruns_{0};
  std::atomic<std::uint64_t> underrun_frames_{0};
  std::atomic<std::uint64_t> overruns_{0};
  std::atomic<std::uint64_t> overrun_frames_{0};
  std::atomic<std::uint64_t> swaps_{0};
  std::atomic<std::uint64_t> rejected_swaps_{0};
  std::atomic<std::uint64_t> last_swap_block_{0};
  std::atomic<std::uint64_t> engine_errors_{0};
  std::atomic<std::uint64_t> late_periods_{0};
  std::atomic<std::uint64_t> late_unstarted_{0};
  std::atomic<std::uint64_t> nonfinite_inputs_{0};
  std::atomic<std::uint64_t> replans_{0};
  // Written by the callback when its period settled on another value.
  std::atomic<std::size_t> device_period_frames_{0};
  std::atomic<std::uint64_t> period_changes_{0};

  // Swap thread only.
  RealtimeMatrixEngine* swap_target_ = nullptr;    // the engine the callback runs
  RealtimeMatrixEngine* replan_target_ = nullptr;  // the one a re-plan offered...
  std::size_t replan_block_frames_ = 0;            // ...and its calls
  std::size_t response_frames_ = 0;                // see LivePipelineOptions::response_frames
  std::uint64_t replan_failed_for_ = 0;            // period whose re-plan failed (not retried)
  std::atomic<int> device_rate_{0};
  // Control side only (next_device_change).
  std::size_t reported_period_frames_ = 0;
  int reported_rate_ = 0;
};

// Calls in a row at one size before the callback takes it as the period.
inline constexpr unsigned period_settle_calls = 3;

}  // namespace tapstream
