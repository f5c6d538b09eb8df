// The CPU engine's non-uniformly partitioned convolution, for live calls of
// long filters (the scheme of Gardner 1995 as zita-convolver runs it): the
// plan (dsp/model/partition_plan) cuts each filter into a head of small partitions,
// the size of a call, and tail segments of larger ones.
//
// - The head is a uniformly partitioned engine (CpuEngine with a forced
//   partition) run inside process() on the first taps of every filter.
// - Each tail segment (partitions of P frames starting at tap T) has its own
//   worker thread, at a lower priority than the caller and the lower the
//   longer its partitions (their deadlines are further away); one per group
//   of channels where the head is spread over threads (tail_groups()), so
//   that no segment's work is bound to one core. Below, "segment" is such a
//   group. When a call
//   completes input block m of the segment (frames [mP, (m+1)P)), process()
//   queues job m; the worker transforms the block's 2P-frame window into the
//   segment's frequency-domain delay line, sums the products with the
//   segment's partitions and writes the P output frames the segment
//   contributes at [mP + T, mP + T + P) into the segment's output ring. The
//   plan guarantees T - P >= one call, so the job has at least a call's
//   worth of stream time; a call that needs frames from a job not yet done
//   waits for it (the engine stays exact and is late instead).
// - process() adds the rings' frames for its own span to the head's output.
// - With many channels (head_threads(): EngineOptions::cpu.threads, by
//   default every hardware thread, once a call's head work is worth
//   splitting) the call's per-channel work, the head and the
//   adding of the rings, is spread over a WorkerPool at the caller's
//   priority, the caller doing its share (dsp/cpu/cpu_worker_pool.hpp). The
//   caller alone copies the input in and the output out, so that nothing
//   the pool's threads touch belongs to the caller of process().
//
// Swaps and updates: a new bank's spectra are built on a preparer thread
// (lowest priority), never in process(), and take effect at the first call
// after the tail workers have it, crossfaded over that call, exactly: from
// the call after it on, the output is the new filters' causal convolution of
// the whole input. A bank's tail output goes, per channel, to one of two
// ring slots (TailBank::slot): its base's (the bank it takes over from) for
// a channel it leaves alone, the other one for a channel it changes.
// 1. The preparer offers the bank (prepared_, offered_): in place of the
//    latest one it offered if process() has not taken that yet (the bank
//    then carries that one's changes too), else once the call that installed
//    that one has played.
// 2. Each tail worker adopts it between two jobs: it computes, for the
//    channels the bank changes, the output of the blocks it has already run
//    that may still play (from the latest call's start on) into their new
//    slots, from the frequency-domain delay line, which keeps the input
//    spectra those blocks need (Segment::slots); its jobs from then on
//    compute the bank, and the bank it takes over from for the channels it
//    changes until the install call has played.
// 3. The first call that finds every worker has adopted it installs it: the
//    head engine's filters (built by the preparer too) and the bank swap,
//    and the call blends the two banks' totals of the changed channels as
//    the uniform engine does, the others playing on bit for bit. Once that
//    call has played, the bank it replaced retires, and the preparer may
//    offer the next.
// So the audio thread only swaps and crossfades; a bank ready between two
// calls plays from the next one unless a worker is still inside a job then
// (a long segment's), when it plays from the first call after that job. No
// input sample is lost or repeated. Requests posted while one is prepared
// add up (post_request()), and so do banks offered before a call takes
// them, so that none is lost and every channel changed fades. Banks are
// freed once no queued job can still read them.
//
// Per-channel updates (set_channel_filters, post_channel_filters) cost their
// channels only: a bank's filters are shared per channel (TailChannel, and
// the head engine's own), so the preparer builds the bank of an update from
// the latest bank it offered, transforming the named channels alone, and
// marks them; the workers catch up and compute twice the marked channels
// only (an unmarked one has the same filter object and slot in both
// banks), and the install call crossfades them only (head and tails). A
// whole bank marks every channel.
//
// Inside an audio callback (RealtimeEngine::process_by, same-period live
// mode) nothing waits past the period's deadline. A tail job not done by then
// makes the call late: it returns silence, the stream advances, the job
// finishes in the background and later calls use it, so they stay exact. So
// does a head thread that has not finished its channels by then (preempted):
// the next call waits for it, up to its own deadline, before it touches the
// head or the staging; if it is still not done then, that call's input cannot
// reach the head, and the engine is overloaded (below).
// Only if a worker falls so far behind that, at the call's deadline, writing
// this call's input would still overwrite input a queued job has to read, or
// its job slots are all still taken, is the engine overloaded: it then stops
// feeding the tails (the head keeps its history), plays silence until every
// worker is idle, resumes, and keeps playing silence until the tails' state
// holds only input from after the resumption (recovery_frames_): late calls,
// never wrong ones. Swaps in the callback allocate and free nothing: the
// preparer builds the head's filters too, retired banks wait in fixed slots,
// and the preparer frees them.
//
// Threads and ordering. Written by the caller of process() (one thread, per
// the Engine contract): the input ring, the job slots of each segment, then
// `dispatched` (release). Read by each segment's worker after an acquire load
// of `dispatched`. Written by a worker: its segment's delay line and output
// ring slots, then `done` (release); process() reads a ring span only after an
// acquire load of `done` shows the job that wrote it finished. The ring sizes
// (see the constructor) make sure a worker never reads input the caller is
// overwriting and never writes output the caller is reading, given the waits
// above. The head's threads read the staging and write the head's state and
// the staged output between the pool's publication of a job and its tasks'
// completion count (release/acquire, see WorkerPool); a call that found them
// not done by its deadline leaves them in flight and the next call waits for
// them before anything they use changes. The rings they read stay valid:
// until then the only tail jobs dispatched are that call's, which write at
// most T + one call past the frames it reads, inside the ring (see its size).
// Banks: the preparer writes a bank whole, then places it in prepared_ (a
// pointer exchange, release; process() takes it with an exchange, acquire,
// and gives it back the same way if it is not yet adopted), then stores
// offered_ and offered_serial_ (release). A worker loads offered_serial_,
// then offered_ (acquire): the bank it finds is that one or newer, and
// alive: a bank is freed only once every worker has adopted a later one
// (superseded_, retired_). It writes its catch-up, then its
// `adopted_serial` (release); process() installs a bank only after an
// acquire load of every worker's shows it, and reads the new slots after
// that. The catch-up writes only ring slots no call reads before the
// install (the other slot than the playing one, of the changed channels;
// the install call before has played, since the preparer offers a bank
// after `installed_serial_` (release/acquire) shows it), and frames from
// the latest call's start on, which the call that will install it has not
// read. process() stores `call_frame_` (release) at each call's start, after
// its install. reset() clears the rings and delay lines only once no worker
// adopts (resetting_ and each Segment::adopting, seq_cst both ways). post_filters() (another thread than process()'s) touches
// only the request pointer and the preparer's wake counter. `done` is a
// DeadlineCounter (dsp/realtime/deadline_counter.hpp), whose
// release/acquire pair is the one described above.

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dsp/cpu/cpu_cost_model.hpp"
#include "dsp/cpu/cpu_engine.hpp"
#include "dsp/cpu/cpu_simd.hpp"
#include "dsp/cpu/cpu_worker_pool.hpp"
#include "dsp/cpu/fftw_plan.hpp"
#include "dsp/model/channel_work.hpp"
#include "dsp/realtime/deadline_counter.hpp"
#include "dsp/realtime/thread_priority.hpp"

namespace tapstream {
namespace {

using fftw::AlignedFloats;

std::size_t div_up(std::size_t n, std::size_t m) {
  return (n + m - 1) / m;
}

// One filter's tail: per tail segment, the spectra of its partitions that
// hold taps (scaled by 1/2P), block b of partition j at b * parts * 64 + j *
// 64. Immutable once built (by the preparer), shared by the banks that hold it.
struct TailChannel {
  std::vector<AlignedFloats> spectra;  // [segment]
  std::vector<std::size_t> parts;      // [segment]
};

// Spectra of one bank's tail segments; immutable once offered (by the preparer).
struct TailBank {
  bool shared = false;
  std::vector<std::shared_ptr<const TailChannel>> stored;  // per stored filter
  // Per channel, nonzero where this bank differs from `base` (a per-channel
  // update); empty: every channel (a whole bank).
  std::vector<unsigned char> changed;
  // Per channel, the output ring slot (0 or 1) this bank's tails go to: its
  // base's, flipped where it changes the channel, so that the two banks of a
  // crossfade never share a channel's slot and an unchanged channel is
  // computed once.
  std::vector<unsigned char> slot;
  // The bank this one takes over from (installed, or to be installed before
  // it); null for the first. Compared, never read, by the workers.
  const TailBank* base = nullptr;
  std::uint64_t serial = 0;  // the preparer's count of banks offered
  // The head engine's filters (made by the preparer; null for the first
  // bank). A retiring bank carries the head filters the swap freed.
  std::unique_ptr<PreparedHeadFilters> head_filters;
  bool crossfade = true;  // how this bank takes over
  std::size_t filter_of(std::size_t channel) const { return shared ? 0 : channel; }
  const TailChannel& of(std::size_t channel) const { return *stored[filter_of(channel)]; }
  bool changes(std::size_t channel) const { return changed.empty() || changed[channel] != 0; }
};

// The first `head_taps` taps of every filter of `bank`.
FilterBank head_bank(const FilterBank& bank, std::size_t head_taps) {
  std::vector<std::vector<float>> heads;
  const std::size_t stored = bank.is_shared() ? 1 : bank.channels();
  for (std::size_t i = 0; i < stored; ++i) {
    const auto taps = bank.taps(i);
    heads.emplace_back(taps.begin(), taps.begin() + std::min(taps.size(), head_taps));
  }
  return bank.is_shared() ? FilterBank::shared(std::move(heads.front()), bank.channels())
                          : FilterBank::per_channel(std::move(heads));
}

struct Job {
  std::uint64_t block = 0;  // m: input frames [mP, (m+1)P)
};

constexpr std::size_t kJobSlots = 16;  // queued jobs per segment

// The channel groups of a tail segment whose work per call is `ratio` times
// the head's: one when the head runs on one thread; else as many as keep a
// group's load at most a head thread's, up to the head's threads. A
// segment's partitions then no longer bound the engine to one core each.
std::size_t tail_groups(std::size_t head_threads, std::size_t channels, double ratio) {
  if (head_threads <= 1) return 1;
  const double wanted = std::ceil(double(head_threads) * ratio);
  return std::clamp<std::size_t>(std::size_t(wanted), 1, std::min(head_threads, channels));
}

// Tasks per head thread in a call: claimed in turn, so that a thread that
// starts late or runs slower leaves at most a task's worth of imbalance.
constexpr std::size_t kHeadTasksPerThread = 4;

// The in-call head's threads (the caller included): `options.threads` when
// given, else one (the caller alone); one where a call's estimated head work
// (`call_ns`) is too small to split. Spreading pays only where the head's
// threads outrank the rest of the machine: on the 2-core dev VM under
// SCHED_FIFO (64 frames, 65536 taps, paced) 2 head threads carried 216
// channels where 1 carried 196, but on the H100 host's 16 cores at normal
// priority (real-time refused) every hardware thread carried 46 where one
// carried 189 (docs/performance.md, "Live capacity"): the head's spinning
// workers and the tail groups crowded the cores. So threads are asked for.
std::size_t head_threads(const CpuEngineOptions& options, std::size_t channels, double call_ns) {
  if (call_ns < kCpuParallelCallNs) return 1;
  const std::size_t wanted = options.threads >= 1 ? options.threads : 1;
  return std::clamp<std::size_t>(wanted, 1, channels);
}

class NonUniformCpuEngine final : public Engine, public RealtimeEngine {
 public:
  NonUniformCpuEngine(const FilterBank& bank, const EngineOptions& options,
                      const PartitionPlan& plan);
  ~NonUniformCpuEngine() override;

  void process(std::span<const float> in, std::span<float> out, std::size_t frames,
               Layout layout) override;
  void set_filters(const FilterBank& bank, bool crossfade) override;
  void reset() override;
  bool process_by(std::span<const float> in, std::span<float> out, std::size_t frames,
                  Layout layout, const timespec& deadline) noexcept override;
  void post_filters(const FilterBank& bank, bool crossfade) override;
  bool set_channel_filters(std::span<const PathTaps> channels, bool crossfade) override;
  bool post_channel_filters(std::span<const PathTaps> channels, bool crossfade) override;
  // Also while a bank offered is not yet adopted by every tail worker: the
  // next call installs what was posted before it and is no longer preparing.
  bool preparing_filters() const override {
    if (prepare_request_.load() != nullptr || preparing_.load()) return true;
    const std::uint64_t offered = offered_serial_.load(std::memory_order_acquire);
    for (const auto& seg : segments_) {
      if (seg->adopted_serial.load(std::memory_order_acquire) < offered) return true;
    }
    return false;
  }

  std::size_t channels() const override { return channels_; }
  std::size_t max_block_frames() const override { return max_block_; }
  std::size_t max_taps() const override { return max_taps_; }
  std::string name() const override { return "cpu"; }
  RealtimeEngine* realtime() override { return this; }
  std::string description() const override {
    return "cpu: non-uniform partitioned FFT, " + plan_.describe() + " (head in the call" +
           (head_pool_ ? " on " + std::to_string(head_pool_->threads()) + " threads" : "") +
           ", tails on " + std::to_string(segments_.size()) + " lower-priority threads)";
  }

 private:
  // A tail segment's partitions for a group of channels (one group, all the
  // channels, unless the head is spread over threads: see tail_groups()).
  struct Segment {
    std::size_t index = 0;          // of the tail segment: plan segment index - 1
    std::size_t first_channel = 0;  // the group: channels [first_channel, + channels)
    std::size_t channels = 0;
    std::size_t partition = 0;  // P
    std::size_t count = 0;      // partitions
    std::size_t first_tap = 0;  // T
    std::size_t blocks = 0;     // 32-bin blocks of P + 1 bins
    // Input spectra the delay line keeps: `count` for a job, and as many more
    // as a catch-up reaches back (see catch_up()).
    std::size_t slots = 0;
    std::shared_ptr<const fftw::RealFftPair> fft;
    AlignedFloats fdl;                 // per channel of the group: blocks * slots * 64
    std::size_t ring = 0;              // output ring frames (a power of two)
    std::array<AlignedFloats, 2> out;  // per slot, per channel of the group: ring frames
    // worker scratch
    AlignedFloats window, spectrum, products, time;
    std::array<Job, kJobSlots> jobs;
    std::uint64_t base = 0;  // caller only: the job index of block 0 (jobs run in block order)
    std::atomic<std::uint64_t> dispatched{0};
    DeadlineCounter done;
    std::atomic<std::uint64_t> wake{0};
    std::atomic<int> thread_id{0};
    std::thread thread;
    // The worker's own: the newest offered bank it computes (`adopted`) and
    // the one that bank takes over from, computed too until the crossfade
    // between them has played; the last block its jobs ran (-1: none).
    const TailBank* adopted = nullptr;
    const TailBank* adopted_base = nullptr;
    std::int64_t last_block = -1;
    // adopted->serial, published once its catch-up is written (release).
    std::atomic<std::uint64_t> adopted_serial{0};
    // Raised while the worker adopts a bank (see reset()).
    std::atomic<bool> adopting{false};
  };

  std::unique_ptr<TailBank> prepare(const FilterBank& bank) const;
  std::shared_ptr<const TailChannel> prepare_channel(std::span<const float> taps) const;
  void worker(Segment& seg, int nice_level);
  void run_job(Segment& seg, const Job& job);
  // The worker's: takes the offered bank if it is newer than its own, after
  // computing it over the blocks already run whose output may still play.
  void adopt_offer(Segment& seg);
  void catch_up(Segment& seg, const TailBank& bank, std::uint64_t playing_from);
  // The output of `filter` for block m of the delay line, channel `local` of
  // the group, into `ring` (the channel's ring slot), its frames from `from` on.
  void segment_output(Segment& seg, std::size_t local, std::uint64_t m, const TailChannel& filter,
                      float* ring, std::uint64_t from);
  void follow_caller_priority();
  // One call; deadline null: wait for tails as long as it takes (never late).
  // False: late (`out` holds silence).
  bool run_call(std::span<const float> in, std::span<float> out, std::size_t frames, Layout layout,
                const timespec* deadline);
  // The first segment that cannot take [frames_, frames_ + n) without a wait
  // (a queued job still reads the input it overwrites, or no job slot is
  // free); null when all can.
  const Segment* segment_that_cannot_take(std::size_t n) const;
  // Waits, no later than the deadline, until the tails can take the call:
  // false if they still cannot then (an overload).
  bool wait_until_tails_can_take(std::size_t n, const timespec& deadline) const;
  bool tails_idle() const;
  void dispatch(std::uint64_t frames_before, std::uint64_t frames_after);
  // process()'s thread: installs the offered bank once every tail worker has
  // adopted it (false: none installed); `crossfade` false in a fresh stream.
  bool take_offered_bank(bool crossfade);
  // Once the call that installed a bank has played: retires the bank it
  // replaced and tells the preparer.
  void complete_install();
  // Parks a bank until no queued job reads it (a free slot is guaranteed by
  // take_offered_bank()).
  void retire(std::unique_ptr<TailBank> bank);
  std::size_t free_retired_slots() const;
  void free_unused_banks();
  void stop_workers();
  void quiesce();

  // The call's per-channel work, task by task over the head's threads.
  struct CallJob {
    NonUniformCpuEngine* engine = nullptr;
    bool adding_tails = false;  // false: the head; true: the rings and the crossfade
    void operator()(std::size_t task, std::size_t thread) const noexcept {
      engine->call_task(adding_tails, task, thread);
    }
  };
  void call_task(bool adding_tails, std::size_t task, std::size_t thread) noexcept;
  // Runs call_job_ as `adding_tails` says over the head's threads; false when
  // some thread was not done by the deadline (the job is then in flight).
  bool run_call_job(bool adding_tails, const timespec* deadline);
  // Waits, no later than the deadline, for a job a late call left in flight,
  // and ends its head call; false if it is still running then.
  bool finish_call_job(const timespec* deadline);

  std::size_t channels_;
  std::size_t max_block_;
  std::size_t max_taps_;
  PartitionPlan plan_;
  std::unique_ptr<CpuHeadEngine> head_;
  std::vector<std::unique_ptr<Segment>> segments_;

  std::size_t in_ring_ = 0;  // frames, a power of two
  AlignedFloats input_;      // per channel: in_ring_ frames of the stream
  AlignedFloats stage_in_, stage_out_, tails_old_, tails_new_;
  std::uint64_t frames_ = 0;  // stream frames processed

  // The call's work over the head's threads (see the top): per task
  // `channels_per_task_` channels; the frames and whether it crossfades, as
  // the call set them; a job not known to be done, and a head call not ended.
  CallJob call_job_;
  std::size_t call_tasks_ = 1, channels_per_task_ = 0;
  // frames_ when the call began (frames_ moves on before a late job ends).
  std::uint64_t call_start_ = 0;
  std::size_t call_frames_ = 0;
  bool call_fading_ = false;
  bool call_job_in_flight_ = false;
  bool head_call_open_ = false;

  // Banks: `current_` plays, channel c from its ring slot current_->slot[c];
  // `replaced_`, the bank it took over from, until the call that installed
  // it (and crossfaded from it) has played.
  std::unique_ptr<TailBank> current_;
  std::unique_ptr<TailBank> replaced_;
  // frames_ at the start of the latest call (for the workers' catch-ups).
  std::atomic<std::uint64_t> call_frame_{0};
  // Raised by reset() while it clears what a catch-up writes: no worker
  // adopts a bank meanwhile (seq_cst with Segment::adopting).
  std::atomic<bool> resetting_{false};
  // Retired banks and, per segment, the jobs queued before they retired;
  // fixed slots (`dispatched` sized at construction), so that retiring one
  // allocates nothing.
  struct Retired {
    std::unique_ptr<TailBank> bank;
    std::vector<std::uint64_t> dispatched;
  };
  static constexpr std::size_t kRetiredSlots = 4;
  std::array<Retired, kRetiredSlots> retired_;

  // Overload (see the top): tails not fed since it began; silence until
  // frames_ reaches mute_until_ after it ends.
  bool overloaded_ = false;
  std::uint64_t mute_until_ = 0;
  std::uint64_t recovery_frames_ = 0;

  // Preparer: requests and results, one each in flight, by pointer exchange.
  // A request is a whole bank, or new taps for some channels (`channels[i]`
  // takes `taps[i]`).
  struct Request {
    std::optional<FilterBank> bank;
    std::vector<std::size_t> channels;
    std::vector<std::vector<float>> taps;
    bool crossfade = true;
  };
  // The preparer's bank for `request`, built on the latest one it offered;
  // `supersedes`: on top of that one's changes too (it has not been taken).
  std::unique_ptr<TailBank> prepare_request(const Request& request, bool supersedes);
  // The preparer's: offers `bank` in place of the latest one where
  // `supersedes` and that one is still not taken, else after it, once the
  // call that installs it has played; `again` where process() gave the
  // latest one back meanwhile (the bank must then be built on top of it).
  enum class Offered { yes, again, stopped };
  Offered offer(std::unique_ptr<TailBank> bank, bool supersedes);
  // The preparer's: waits until the latest bank has played its install call
  // (yes), or is offered again (again), freeing what waits to be freed meanwhile.
  Offered wait_until_latest_installed();
  void free_superseded();
  // Posts `request`, merged into one the preparer has not started yet (a
  // whole bank supersedes it; channels add to it).
  void post_request(std::unique_ptr<Request> request);
  // The preparer's own: the latest bank it offered (shared filters, their
  // head filters, marks, ring slots, base and serial), which the next
  // per-channel update builds on; banks it superseded, until every worker
  // has adopted the bank that superseded them (the serial).
  const TailBank* latest_bank_ = nullptr;
  std::vector<std::shared_ptr<const TailChannel>> latest_stored_;
  bool latest_shared_ = false;
  std::vector<unsigned char> latest_changed_;
  std::vector<unsigned char> latest_slot_;
  const TailBank* latest_base_ = nullptr;
  std::vector<unsigned char> latest_base_slot_;
  bool latest_crossfade_ = true;
  std::uint64_t latest_serial_ = 0;
  std::unique_ptr<PreparedHeadFilters> latest_head_;
  std::vector<std::pair<std::unique_ptr<TailBank>, std::uint64_t>> superseded_;
  // The serial of the bank whose install call process() has played last
  // (release: the preparer then offers the next).
  std::atomic<std::uint64_t> installed_serial_{0};
  // The bank offered to the workers (they read it only while it is newer
  // than theirs) and its serial.
  std::atomic<const TailBank*> offered_{nullptr};
  std::atomic<std::uint64_t> offered_serial_{0};
  // The posting thread's: whether the last whole bank posted is one shared
  // filter (then per-channel updates are refused: a whole bank).
  bool posted_shared_ = false;
  std::atomic<Request*> prepare_request_{nullptr};
  std::atomic<TailBank*> prepared_{nullptr};
  std::atomic<TailBank*> graveyard_{nullptr};  // a retired bank for the preparer to free
  std::atomic<std::uint64_t> prepare_wake_{0};
  std::atomic<bool> preparing_{false};  // the preparer holds a request
  std::atomic<bool> stop_{false};
  std::atomic<int> preparer_id_{0};
  std::thread preparer_;

  pthread_t priority_caller_{};  // the thread whose priority workers follow
  bool priority_set_ = false;
  unsigned calls_since_priority_ = 0;
  int worker_priority_key_ = -1;  // the caller's real-time priority they follow (0: none)

  // The head's threads besides the caller (null: the caller alone). Last, so
  // that it stops first: a thread of a late call may still use the above.
  std::unique_ptr<WorkerPool> head_pool_;
};

NonUniformCpuEngine::NonUniformCpuEngine(const FilterBank& bank, const EngineOptions& options,
                                         const PartitionPlan& plan)
    : channels_(bank.channels()),
      max_block_(options.max_block_frames),
      max_taps_(options.max_taps == 0 ? bank.max_taps() : options.max_taps),
      plan_(plan) {
  plan_.validate();
  if (max_block_ == 0 || max_block_ > plan_.head_frames) {
    throw std::invalid_argument("cpu engine: block of " + std::to_string(max_block_) +
                                " frames does not fit the plan's head of " +
                                std::to_string(plan_.head_frames));
  }
  if (plan_.taps < max_taps_ || bank.max_taps() > max_taps_) {
    throw std::invalid_argument("cpu engine: the partition plan covers " +
                                std::to_string(plan_.taps) + " taps, the filters need " +
                                std::to_string(std::max(max_taps_, bank.max_taps())));
  }
  const PartitionSegment& head = plan_.segments.front();
  const CpuPartitionCosts costs(channels_);
  const double head_ns = costs.head_ns(max_block_, head.partition_frames, head.count);
  const std::size_t threads = head_threads(options.cpu, channels_, double(channels_) * head_ns);
  std::size_t in_ring = 2 * max_block_;
  for (std::size_t s = 1; s < plan_.segments.size(); ++s) {
    const PartitionSegment& p = plan_.segments[s];
    // The tail's work per call of this segment against the head's.
    const double ratio = costs.tail_step_ns(p.partition_frames, p.count) * double(max_block_) /
                         double(p.partition_frames) / head_ns;
    const std::size_t groups = tail_groups(threads, channels_, ratio);
    for (std::size_t g = 0; g < groups; ++g) {
      auto seg = std::make_unique<Segment>();
      seg->index = s - 1;
      seg->first_channel = g * channels_ / groups;
      seg->channels = (g + 1) * channels_ / groups - seg->first_channel;
      seg->partition = p.partition_frames;
      seg->count = p.count;
      seg->first_tap = p.first_tap;
      seg->blocks = div_up(p.partition_frames + 1, simd::kBlockBins);
      // A catch-up recomputes the blocks whose output ends after the latest
      // call's start, up to the last one that call may have dispatched: at
      // most (T + one call) / P + 1 of them (see catch_up()).
      seg->slots = p.count + div_up(p.first_tap + max_block_, p.partition_frames) + 1;
      seg->fft = fftw::RealFftPair::get(2 * p.partition_frames);
      seg->fdl = AlignedFloats(seg->channels * seg->blocks * seg->slots * simd::kBlockFloats);
      // A job writes [mP + T, mP + T + P) while the caller reads frames at or
      // after (m + 1)P: the ring must hold T + P + one call.
      seg->ring = std::bit_ceil(p.first_tap + p.partition_frames + 2 * max_block_);
      for (auto& o : seg->out) o = AlignedFloats(seg->channels * seg->ring);
      seg->window = AlignedFloats(2 * p.partition_frames);
      seg->spectrum = AlignedFloats(seg->blocks * simd::kBlockFloats);
      seg->products = AlignedFloats(seg->blocks * simd::kBlockFloats);
      seg->time = AlignedFloats(2 * p.partition_frames);
      segments_.push_back(std::move(seg));
    }
    // Job m reads input [(m - 1)P, (m + 1)P) and is waited for no later than
    // the call that needs frame mP + T, so input up to mP + T + one call is
    // written meanwhile.
    in_ring = std::max(in_ring, p.first_tap + 2 * p.partition_frames + 2 * max_block_);
  }
  in_ring_ = std::bit_ceil(in_ring);
  for (Retired& r : retired_) r.dispatched.assign(segments_.size(), 0);
  const PartitionSegment& last = plan_.segments.back();
  recovery_frames_ = last.end_tap() + last.partition_frames + 2 * max_block_;
  input_ = AlignedFloats(channels_ * in_ring_);
  stage_in_ = AlignedFloats(channels_ * max_block_);
  stage_out_ = AlignedFloats(channels_ * max_block_);
  tails_old_ = AlignedFloats(channels_ * max_block_);
  tails_new_ = AlignedFloats(channels_ * max_block_);

  current_ = prepare(bank);
  current_->slot.assign(channels_, 0);
  EngineOptions head_options = options;
  head_options.max_taps = head.end_tap();
  const FilterBank first_head = head_bank(bank, head.end_tap());
  head_ = make_cpu_head_engine(first_head, head_options, threads);
  posted_shared_ = latest_shared_ = bank.is_shared();
  latest_bank_ = current_.get();
  latest_stored_ = current_->stored;
  latest_slot_ = current_->slot;
  latest_changed_.assign(channels_, 0);
  for (const auto& seg : segments_) seg->adopted = current_.get();
  if (!latest_shared_) latest_head_ = head_->prepare_filters(first_head);
  call_tasks_ = std::min(channels_, threads == 1 ? std::size_t{1} : kHeadTasksPerThread * threads);
  channels_per_task_ = div_up(channels_, call_tasks_);
  call_tasks_ = div_up(channels_, channels_per_task_);
  call_job_.engine = this;
  if (threads > 1) head_pool_ = std::make_unique<WorkerPool>(threads - 1);

  for (const auto& seg_ptr : segments_) {
    Segment& seg = *seg_ptr;
    seg.thread = std::thread([this, &seg] { worker(seg, int(seg.index) + 1); });
  }
  preparer_ = std::thread([this] {
    preparer_id_.store(int(gettid()), std::memory_order_relaxed);
    setpriority(PRIO_PROCESS, 0, 19);
    for (;;) {
      const std::uint64_t seen = prepare_wake_.load(std::memory_order_acquire);
      if (stop_.load(std::memory_order_acquire)) return;
      delete graveyard_.exchange(nullptr, std::memory_order_acq_rel);
      free_superseded();
      // Raised before the request is taken, so that preparing_filters() never
      // sees neither (seq_cst).
      preparing_.store(true);
      std::unique_ptr<Request> request(prepare_request_.exchange(nullptr));
      if (!request) {
        preparing_.store(false);
        prepare_wake_.wait(seen, std::memory_order_acquire);
        continue;
      }
      for (;;) {
        // On top of the latest bank while process() has not taken it.
        const bool supersedes = prepared_.load(std::memory_order_acquire) == latest_bank_;
        if (offer(prepare_request(*request, supersedes), supersedes) != Offered::again) break;
      }
      preparing_.store(false);
    }
  });
}

NonUniformCpuEngine::~NonUniformCpuEngine() {
  head_pool_.reset();  // a late call's head work finishes first
  stop_workers();
  delete prepare_request_.exchange(nullptr);
  delete prepared_.exchange(nullptr);
  delete graveyard_.exchange(nullptr);
  superseded_.clear();
}

void NonUniformCpuEngine::stop_workers() {
  stop_.store(true, std::memory_order_release);
  for (auto& seg : segments_) {
    seg->wake.fetch_add(1, std::memory_order_release);
    seg->wake.notify_all();
  }
  prepare_wake_.fetch_add(1, std::memory_order_release);
  prepare_wake_.notify_all();
  for (auto& seg : segments_) {
    if (seg->thread.joinable()) seg->thread.join();
  }
  if (preparer_.joinable()) preparer_.join();
}

std::shared_ptr<const TailChannel> NonUniformCpuEngine::prepare_channel(
    std::span<const float> taps) const {
  auto tc = std::make_shared<TailChannel>();
  tc->spectra.resize(plan_.segments.size() - 1);
  tc->parts.resize(plan_.segments.size() - 1);
  for (const auto& seg_ptr : segments_) {
    const Segment& seg = *seg_ptr;
    if (seg.first_channel != 0) continue;  // the segment's spectra serve all its groups
    const std::size_t s = seg.index;
    const std::size_t p = seg.partition, n = 2 * p;
    AlignedFloats padded(n), spectrum(seg.blocks * simd::kBlockFloats);
    const float scale = 1.0f / float(n);  // FFTW's inverse is unnormalised
    const std::size_t end = std::min(taps.size(), seg.first_tap + p * seg.count);
    const std::size_t k = end > seg.first_tap ? div_up(end - seg.first_tap, p) : 0;
    AlignedFloats spectra(seg.blocks * std::max<std::size_t>(k, 1) * simd::kBlockFloats);
    for (std::size_t j = 0; j < k; ++j) {
      padded.zero();
      const std::size_t first = seg.first_tap + j * p;
      const std::size_t count = std::min(p, end - first);
      for (std::size_t t = 0; t < count; ++t) padded.data()[t] = taps[first + t] * scale;
      seg.fft->forward(padded.data(), spectrum.data());
      simd::to_blocks(spectrum.data(), spectra.data() + j * simd::kBlockFloats,
                      k * simd::kBlockFloats, seg.blocks);
    }
    tc->parts[s] = k;
    tc->spectra[s] = std::move(spectra);
  }
  return tc;
}

std::unique_ptr<TailBank> NonUniformCpuEngine::prepare(const FilterBank& bank) const {
  auto tb = std::make_unique<TailBank>();
  tb->shared = bank.is_shared();
  const std::size_t stored = tb->shared ? 1 : channels_;
  for (std::size_t i = 0; i < stored; ++i) tb->stored.push_back(prepare_channel(bank.taps(i)));
  count_transformed(stored);
  return tb;
}

std::unique_ptr<TailBank> NonUniformCpuEngine::prepare_request(const Request& request,
                                                               bool supersedes) {
  std::unique_ptr<TailBank> ready;
  if (request.bank) {
    ready = prepare(*request.bank);
    ready->head_filters =
        head_->prepare_filters(head_bank(*request.bank, plan_.segments.front().end_tap()));
    ready->crossfade = request.crossfade;
  } else {
    // On the latest bank; its marks too where it supersedes it.
    ready = std::make_unique<TailBank>();
    ready->stored = latest_stored_;
    if (supersedes) ready->changed = latest_changed_;
    if (!supersedes) ready->changed.assign(channels_, 0);
    const std::size_t head_taps = plan_.segments.front().end_tap();
    std::vector<PathTaps> heads;
    for (std::size_t u = 0; u < request.channels.size(); ++u) {
      const std::size_t c = request.channels[u];
      const std::vector<float>& taps = request.taps[u];
      ready->stored[c] = prepare_channel(taps);
      if (!ready->changed.empty()) ready->changed[c] = 1;
      heads.push_back({c, std::span<const float>(taps).first(std::min(taps.size(), head_taps))});
    }
    count_transformed(request.channels.size());
    ready->head_filters = head_->prepare_channel_filters(*latest_head_, heads, supersedes);
    ready->crossfade = supersedes ? latest_crossfade_ || request.crossfade : request.crossfade;
  }
  ready->slot.assign(channels_, 0);
  return ready;
}

NonUniformCpuEngine::Offered NonUniformCpuEngine::offer(std::unique_ptr<TailBank> bank,
                                                        bool supersedes) {
  const auto flip = [&](const std::vector<unsigned char>& base_slot) {
    for (std::size_t c = 0; c < channels_; ++c)
      bank->slot[c] = static_cast<unsigned char>(base_slot[c] ^ (bank->changes(c) ? 1 : 0));
  };
  bank->serial = latest_serial_ + 1;
  // A copy (shared filters, same marks) for the next update to build on,
  // made before process() may take the bank.
  std::unique_ptr<PreparedHeadFilters> head_copy =
      bank->shared ? nullptr : head_->prepare_channel_filters(*bank->head_filters, {}, true);
  bool placed = false;
  if (supersedes) {
    // In place of the latest bank, from that bank's base, unless process()
    // took it meanwhile.
    bank->base = latest_base_;
    flip(latest_base_slot_);
    TailBank* expected = const_cast<TailBank*>(latest_bank_);
    placed = prepared_.compare_exchange_strong(expected, bank.get(), std::memory_order_acq_rel);
    // A worker may still be computing it: freed once all have adopted this one.
    if (placed) superseded_.emplace_back(expected, bank->serial);
  }
  if (!placed) {
    // After the latest bank (with its marks too where this was built to
    // supersede it: those channels then fade between equal filters), once
    // its install call has played: nothing reads the ring slots this one
    // fills then.
    bank->base = latest_bank_;
    flip(latest_slot_);
    if (const Offered waited = wait_until_latest_installed(); waited != Offered::yes) return waited;
    prepared_.store(bank.get(), std::memory_order_release);
    latest_base_slot_ = latest_slot_;
  }
  latest_bank_ = bank.get();
  latest_serial_ = bank->serial;
  latest_base_ = bank->base;
  latest_stored_ = bank->stored;
  latest_shared_ = bank->shared;
  latest_changed_ = bank->changed;
  latest_slot_ = bank->slot;
  latest_crossfade_ = bank->crossfade;
  latest_head_ = std::move(head_copy);
  const TailBank* offered = bank.release();  // owned through prepared_ now
  offered_.store(offered, std::memory_order_release);
  offered_serial_.store(latest_serial_, std::memory_order_release);
  for (auto& seg : segments_) {
    seg->wake.fetch_add(1, std::memory_order_release);
    seg->wake.notify_one();
  }
  return Offered::yes;
}

NonUniformCpuEngine::Offered NonUniformCpuEngine::wait_until_latest_installed() {
  for (;;) {
    const std::uint64_t seen = prepare_wake_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return Offered::stopped;
    // process() may wait for a retired slot this frees before it installs.
    delete graveyard_.exchange(nullptr, std::memory_order_acq_rel);
    free_superseded();
    if (installed_serial_.load(std::memory_order_acquire) >= latest_serial_) return Offered::yes;
    if (prepared_.load(std::memory_order_acquire) == latest_bank_) return Offered::again;
    prepare_wake_.wait(seen, std::memory_order_acquire);
  }
}

void NonUniformCpuEngine::free_superseded() {
  std::uint64_t adopted = ~std::uint64_t{0};
  for (const auto& seg : segments_)
    adopted = std::min(adopted, seg->adopted_serial.load(std::memory_order_acquire));
  std::erase_if(superseded_, [&](const auto& s) { return s.second <= adopted; });
}

void NonUniformCpuEngine::worker(Segment& seg, int nice_level) {
  seg.thread_id.store(int(gettid()), std::memory_order_release);
  // Below a caller at normal priority; follow_caller_priority() moves the
  // worker under a real-time caller.
  setpriority(PRIO_PROCESS, 0, nice_level);
  for (;;) {
    // Read before looking for jobs, so that a dispatch after the look changes
    // it and the wait below returns at once.
    const std::uint64_t seen = seg.wake.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    adopt_offer(seg);
    for (std::uint64_t index = seg.done.value();
         index < seg.dispatched.load(std::memory_order_acquire); ++index) {
      adopt_offer(seg);
      run_job(seg, seg.jobs[index % kJobSlots]);
      seg.done.advance(index + 1);
    }
    seg.wake.wait(seen, std::memory_order_acquire);
  }
}

void NonUniformCpuEngine::adopt_offer(Segment& seg) {
  // The serial first: offered_ is then that bank or a newer one, alive
  // (superseded or replaced only once this worker has adopted its successor).
  const std::uint64_t serial = offered_serial_.load(std::memory_order_acquire);
  if (serial <= seg.adopted_serial.load(std::memory_order_relaxed)) return;
  seg.adopting.store(true);
  if (resetting_.load()) {  // after it, woken again
    seg.adopting.store(false);
    seg.adopting.notify_all();
    return;
  }
  const TailBank* bank = offered_.load(std::memory_order_acquire);
  // A bank built after ours takes over from it; one built in place of ours
  // (superseding it before it played) from ours' base.
  if (bank->base == seg.adopted) seg.adopted_base = seg.adopted;
  seg.adopted = bank;
  catch_up(seg, *bank, call_frame_.load(std::memory_order_acquire));
  seg.adopted_serial.store(bank->serial, std::memory_order_release);
  seg.adopted_serial.notify_all();
  seg.adopting.store(false, std::memory_order_release);
  seg.adopting.notify_all();
}

void NonUniformCpuEngine::catch_up(Segment& seg, const TailBank& bank, std::uint64_t playing_from) {
  // No call from now on starts before `playing_from` (the latest call's
  // start), and the bank plays from a later call on: its output for the
  // channels it changes is due from there in its ring slots. Blocks from
  // now on compute it in run_job(); the blocks run before it (up to the
  // last the latest call may have dispatched) are computed here, from the
  // delay line, which still holds their input (see Segment::slots).
  const auto p = std::int64_t(seg.partition), t = std::int64_t(seg.first_tap);
  const auto from = std::int64_t(playing_from);
  std::int64_t first = from >= t ? (from - t) / p : 0;  // the first whose output ends after `from`
  const std::int64_t last = std::min(seg.last_block, (from + std::int64_t(max_block_)) / p - 1);
  // (Never binding but after a reset, when last_block is of the stream before.)
  first = std::max(first, seg.last_block - std::int64_t(seg.slots - seg.count));
  if (first > last) return;
  for (std::size_t ch = seg.first_channel; ch < seg.first_channel + seg.channels; ++ch) {
    if (!bank.changes(ch)) continue;
    const std::size_t local = ch - seg.first_channel;
    float* ring = seg.out[bank.slot[ch]].data() + local * seg.ring;
    for (std::int64_t m = first; m <= last; ++m)
      segment_output(seg, local, std::uint64_t(m), bank.of(ch), ring, playing_from);
  }
}

void NonUniformCpuEngine::segment_output(Segment& seg, std::size_t local, std::uint64_t m,
                                         const TailChannel& filter, float* ring,
                                         std::uint64_t from) {
  const std::size_t p = seg.partition;
  const std::size_t fdl_stride = seg.slots * simd::kBlockFloats;
  const std::size_t slot = m % seg.slots;
  float* fdl = seg.fdl.data() + local * seg.blocks * fdl_stride;
  const std::uint64_t out_start = m * p + seg.first_tap;
  // Frames before `from` are left as they are (a catch-up's first block may
  // start before the frames it is due for).
  const std::size_t skip =
      from > out_start ? std::size_t(std::min<std::uint64_t>(from - out_start, p)) : 0;
  if (skip == p) return;
  const std::size_t k = filter.parts[seg.index];
  const float* time = nullptr;
  if (k != 0) {
    const float* h = filter.spectra[seg.index].data();
    const std::size_t h_stride = k * simd::kBlockFloats;
    simd::delay_line_products(fdl, fdl_stride, seg.slots, (slot + seg.slots - 1) % seg.slots,
                              h + simd::kBlockFloats, h_stride, k - 1, seg.products.data(),
                              seg.blocks);
    simd::multiply_add(fdl + slot * simd::kBlockFloats, fdl_stride, h, h_stride,
                       seg.products.data(), seg.spectrum.data(), seg.blocks);
    seg.fft->inverse(seg.spectrum.data(), seg.time.data());
    time = seg.time.data() + p;
  }
  const std::size_t at = (out_start + skip) & (seg.ring - 1);
  const std::size_t n = p - skip;
  const std::size_t first_run = std::min(n, seg.ring - at);
  if (time == nullptr) {
    std::memset(ring + at, 0, first_run * sizeof(float));
    std::memset(ring, 0, (n - first_run) * sizeof(float));
  } else {
    std::memcpy(ring + at, time + skip, first_run * sizeof(float));
    std::memcpy(ring, time + skip + first_run, (n - first_run) * sizeof(float));
  }
}

void NonUniformCpuEngine::run_job(Segment& seg, const Job& job) {
  const std::size_t p = seg.partition;
  const std::size_t fdl_stride = seg.slots * simd::kBlockFloats;
  const std::size_t slot = job.block % seg.slots;
  const std::uint64_t window_start = job.block * p + in_ring_ - p;  // (m - 1)P, kept >= 0
  // The adopted bank, and until its install call has played the bank it
  // takes over from (that call crossfades from it; before it, it plays).
  const TailBank& bank = *seg.adopted;
  const TailBank* base = seg.adopted_base;
  if (base != nullptr && installed_serial_.load(std::memory_order_acquire) >= bank.serial) {
    base = nullptr;
  }
  for (std::size_t ch = seg.first_channel; ch < seg.first_channel + seg.channels; ++ch) {
    const std::size_t local = ch - seg.first_channel;
    const float* in = input_.data() + ch * in_ring_;
    const std::size_t first = window_start & (in_ring_ - 1);
    const std::size_t run = std::min(2 * p, in_ring_ - first);
    std::memcpy(seg.window.data(), in + first, run * sizeof(float));
    std::memcpy(seg.window.data() + run, in, (2 * p - run) * sizeof(float));
    float* fdl = seg.fdl.data() + local * seg.blocks * fdl_stride;
    seg.fft->forward(seg.window.data(), seg.spectrum.data());
    simd::to_blocks(seg.spectrum.data(), fdl + slot * simd::kBlockFloats, fdl_stride, seg.blocks);
    // A channel the bank leaves alone has the base's filter in the base's
    // slot: computed once.
    if (base != nullptr && bank.changes(ch)) {
      segment_output(seg, local, job.block, base->of(ch),
                     seg.out[base->slot[ch]].data() + local * seg.ring, 0);
    }
    segment_output(seg, local, job.block, bank.of(ch),
                   seg.out[bank.slot[ch]].data() + local * seg.ring, 0);
  }
  seg.last_block = std::int64_t(job.block);
}

void NonUniformCpuEngine::follow_caller_priority() {
  // A new caller, or now and then (a caller may change its own priority).
  const pthread_t self = pthread_self();
  // The rule of dsp/realtime/thread_priority.hpp. System calls on thread ids, not
  // pthread_{get,set}schedparam, which take glibc's per-thread lock: this may
  // run in an audio callback.
  if (priority_set_ && pthread_equal(self, priority_caller_) &&
      ++calls_since_priority_ < kPriorityRereadCalls) {
    return;
  }
  priority_caller_ = self;
  priority_set_ = true;
  calls_since_priority_ = 0;
  const int key = own_realtime_priority();  // 0: not real-time
  const bool realtime = key > 0;
  if (key == worker_priority_key_) return;
  for (const auto& seg : segments_) {
    if (seg->thread_id.load(std::memory_order_acquire) == 0) return;  // not started: next time
  }
  const std::size_t head_workers = head_pool_ ? head_pool_->threads() - 1 : 0;
  for (std::size_t w = 0; w < head_workers; ++w) {
    if (head_pool_->thread_id(w) == 0) return;
  }
  worker_priority_key_ = key;
  // The head's threads do the call's own work: at the caller's priority.
  for (std::size_t w = 0; w < head_workers; ++w) {
    sched_param param{};
    param.sched_priority = realtime ? key : 0;
    sched_setscheduler(head_pool_->thread_id(w), realtime ? SCHED_FIFO : SCHED_OTHER, &param);
  }
  for (const auto& seg : segments_) {
    // Rate-monotonic: the shorter the partition, the nearer its deadlines.
    sched_param param{};
    param.sched_priority = realtime ? priority_below(key, int(seg->index), key) : 0;
    // Refused without the privilege: the worker keeps its niceness instead.
    sched_setscheduler(seg->thread_id.load(std::memory_order_relaxed),
                       realtime ? SCHED_FIFO : SCHED_OTHER, &param);
  }
}

void NonUniformCpuEngine::set_filters(const FilterBank& bank, bool crossfade) {
  post_filters(bank, crossfade);
  free_unused_banks();
}

void NonUniformCpuEngine::post_filters(const FilterBank& bank, bool crossfade) {
  if (bank.channels() != channels_) {
    throw std::invalid_argument("cpu engine: set_filters: the bank has " +
                                std::to_string(bank.channels()) + " channels, the engine " +
                                std::to_string(channels_));
  }
  if (bank.max_taps() > max_taps_) {
    throw std::invalid_argument(
        "cpu engine: set_filters: a filter of " + std::to_string(bank.max_taps()) +
        " taps is longer than the engine's max_taps " + std::to_string(max_taps_));
  }
  auto request = std::make_unique<Request>();
  request->bank = bank;
  request->crossfade = crossfade;
  posted_shared_ = bank.is_shared();
  post_request(std::move(request));
}

bool NonUniformCpuEngine::set_channel_filters(std::span<const PathTaps> channels, bool crossfade) {
  const bool taken = post_channel_filters(channels, crossfade);
  free_unused_banks();
  return taken;
}

bool NonUniformCpuEngine::post_channel_filters(std::span<const PathTaps> channels, bool crossfade) {
  check_channel_taps("cpu engine", channels, channels_, max_taps_);
  if (posted_shared_) return false;
  auto request = std::make_unique<Request>();
  request->crossfade = crossfade;
  for (const PathTaps& update : channels) {
    request->channels.push_back(update.path);
    request->taps.emplace_back(update.taps.begin(), update.taps.end());
  }
  post_request(std::move(request));
  return true;
}

void NonUniformCpuEngine::post_request(std::unique_ptr<Request> request) {
  // The one posting thread takes back a request the preparer has not
  // started: a whole bank supersedes it; channels add to it.
  std::unique_ptr<Request> waiting(prepare_request_.exchange(nullptr, std::memory_order_acq_rel));
  if (waiting && !request->bank) {
    request->crossfade = request->crossfade || waiting->crossfade;
    if (waiting->bank) {
      std::vector<std::vector<float>> taps(channels_);
      std::vector<std::string> sources(channels_);
      for (std::size_t c = 0; c < channels_; ++c) {
        const auto running = waiting->bank->taps(c);
        taps[c].assign(running.begin(), running.end());
        sources[c] = waiting->bank->source(c);
      }
      for (std::size_t u = 0; u < request->channels.size(); ++u)
        taps[request->channels[u]] = std::move(request->taps[u]);
      request->bank = FilterBank::per_channel(std::move(taps), std::move(sources));
      request->channels.clear();
      request->taps.clear();
    } else {
      std::vector<bool> named(channels_, false);
      for (const std::size_t c : request->channels) named[c] = true;
      for (std::size_t u = 0; u < waiting->channels.size(); ++u) {
        if (named[waiting->channels[u]]) continue;
        request->channels.push_back(waiting->channels[u]);
        request->taps.push_back(std::move(waiting->taps[u]));
      }
    }
  }
  std::unique_ptr<Request> superseded(
      prepare_request_.exchange(request.release(), std::memory_order_acq_rel));
  prepare_wake_.fetch_add(1, std::memory_order_release);
  prepare_wake_.notify_one();
}

std::size_t NonUniformCpuEngine::free_retired_slots() const {
  return std::size_t(std::count_if(retired_.begin(), retired_.end(),
                                   [](const Retired& r) { return r.bank == nullptr; }));
}

void NonUniformCpuEngine::retire(std::unique_ptr<TailBank> bank) {
  for (Retired& r : retired_) {
    if (r.bank) continue;
    for (std::size_t s = 0; s < segments_.size(); ++s)
      r.dispatched[s] = segments_[s]->dispatched.load(std::memory_order_relaxed);
    r.bank = std::move(bank);
    return;
  }
  // Unreachable (take_offered_bank() keeps a slot for each retirement); were
  // it reached, freeing here would still be correct, only slow.
  quiesce();
}

bool NonUniformCpuEngine::take_offered_bank(bool crossfade) {
  if (replaced_ || prepared_.load(std::memory_order_relaxed) == nullptr) return false;
  if (free_retired_slots() == 0) return false;  // a later call, once the preparer freed one
  // Every tail worker has the newest bank offered (its serial is published
  // after the bank is placed in prepared_)...
  const std::uint64_t offered = offered_serial_.load(std::memory_order_acquire);
  for (const auto& seg : segments_) {
    if (seg->adopted_serial.load(std::memory_order_acquire) < offered) return false;
  }
  TailBank* ready = prepared_.exchange(nullptr, std::memory_order_acq_rel);
  if (ready == nullptr) return false;
  // ... unless a newer one superseded it since: given back (ours while
  // taken: the preparer supersedes only what prepared_ holds).
  if (ready->serial != offered) {
    prepared_.store(ready, std::memory_order_release);
    prepare_wake_.fetch_add(1, std::memory_order_release);
    prepare_wake_.notify_one();
    return false;
  }
  std::unique_ptr<TailBank> bank(ready);
  // The head filters this frees ride with the retiring bank to the preparer.
  current_->head_filters =
      head_->install_filters(std::move(bank->head_filters), crossfade && bank->crossfade);
  replaced_ = std::move(current_);
  current_ = std::move(bank);
  return crossfade && current_->crossfade;
}

void NonUniformCpuEngine::complete_install() {
  if (!replaced_) return;
  retire(std::move(replaced_));
  installed_serial_.store(current_->serial, std::memory_order_release);
  prepare_wake_.fetch_add(1, std::memory_order_release);
  prepare_wake_.notify_one();
}

void NonUniformCpuEngine::free_unused_banks() {
  // Freeing megabytes of locked pages takes long: the preparer does it, one
  // bank at a time through `graveyard_`.
  for (Retired& r : retired_) {
    if (!r.bank) continue;
    bool unused = true;
    for (std::size_t s = 0; s < segments_.size(); ++s) {
      if (segments_[s]->done.value() < r.dispatched[s]) unused = false;
    }
    if (!unused || graveyard_.load(std::memory_order_acquire) != nullptr) continue;
    graveyard_.store(r.bank.release(), std::memory_order_release);
    prepare_wake_.fetch_add(1, std::memory_order_release);
    prepare_wake_.notify_one();
  }
}

void NonUniformCpuEngine::dispatch(std::uint64_t before, std::uint64_t after) {
  for (auto& seg_ptr : segments_) {
    Segment& seg = *seg_ptr;
    const std::size_t p = seg.partition;
    for (std::uint64_t m = before / p; (m + 1) * p <= after; ++m) {
      const std::uint64_t index = seg.dispatched.load(std::memory_order_relaxed);
      if (index >= kJobSlots) seg.done.wait_at_least(index - kJobSlots + 1);  // slot free
      seg.jobs[index % kJobSlots].block = m;
      seg.dispatched.store(index + 1, std::memory_order_release);
      seg.wake.fetch_add(1, std::memory_order_release);
      seg.wake.notify_one();
    }
  }
}

void NonUniformCpuEngine::quiesce() {
  for (auto& seg : segments_)
    seg->done.wait_at_least(seg->dispatched.load(std::memory_order_relaxed));
}

void NonUniformCpuEngine::reset() {
  finish_call_job(nullptr);
  complete_install();
  // A bank offered plays from the fresh stream on, not faded in, once every
  // worker has it (nothing of its catch-up is left to write then).
  const std::uint64_t offered = offered_serial_.load(std::memory_order_acquire);
  for (const auto& seg : segments_) {
    for (std::uint64_t a = seg->adopted_serial.load(std::memory_order_acquire); a < offered;
         a = seg->adopted_serial.load(std::memory_order_acquire)) {
      seg->adopted_serial.wait(a, std::memory_order_acquire);
    }
  }
  // A bank offered since is adopted after the reset (its catch-up would
  // write what is cleared here), and plays from a later call.
  resetting_.store(true);
  for (const auto& seg : segments_) {
    while (seg->adopting.load()) seg->adopting.wait(true);
  }
  quiesce();
  for (Retired& r : retired_) r.bank.reset();  // no job is queued
  take_offered_bank(false);
  complete_install();
  for (Retired& r : retired_) r.bank.reset();
  head_->reset();
  input_.zero();
  for (auto& seg : segments_) {
    seg->fdl.zero();
    for (auto& o : seg->out) o.zero();
    seg->base = seg->dispatched.load(std::memory_order_relaxed);
  }
  frames_ = 0;
  call_frame_.store(0, std::memory_order_release);
  overloaded_ = false;
  mute_until_ = 0;
  resetting_.store(false);
  for (auto& seg : segments_) {  // to adopt what came meanwhile
    seg->wake.fetch_add(1, std::memory_order_release);
    seg->wake.notify_one();
  }
}

void NonUniformCpuEngine::process(std::span<const float> in, std::span<float> out,
                                  std::size_t frames, Layout layout) {
  check_process_call("cpu engine", in, out, frames, channels_, max_block_);
  run_call(in, out, frames, layout, nullptr);
}

bool NonUniformCpuEngine::process_by(std::span<const float> in, std::span<float> out,
                                     std::size_t frames, Layout layout,
                                     const timespec& deadline) noexcept {
  const std::size_t samples = frames * channels_;
  if (frames == 0 || frames > max_block_ || in.size() < samples || out.size() < samples) {
    return false;
  }
  return run_call(in, out, frames, layout, &deadline);
}

bool NonUniformCpuEngine::tails_idle() const {
  for (const auto& seg : segments_) {
    if (seg->done.value() != seg->dispatched.load(std::memory_order_relaxed)) return false;
  }
  return true;
}

const NonUniformCpuEngine::Segment* NonUniformCpuEngine::segment_that_cannot_take(
    std::size_t n) const {
  const std::uint64_t end = frames_ + n;
  for (const auto& seg_ptr : segments_) {
    const Segment& seg = *seg_ptr;
    const std::uint64_t p = seg.partition;
    const std::uint64_t done = seg.done.value();
    const std::uint64_t queued = seg.dispatched.load(std::memory_order_relaxed) - done;
    if (queued + (end / p - frames_ / p) > kJobSlots) return &seg;
    if (queued == 0) continue;  // the next job's window starts within 2P of frames_
    // The oldest queued job reads [(m - 1)P, (m + 1)P) (as ring positions,
    // offset by in_ring_ as run_job does): the write must end before that
    // window's start comes round again.
    const std::uint64_t m = seg.jobs[done % kJobSlots].block;
    if (end + p > m * p + in_ring_) return &seg;
  }
  return nullptr;
}

bool NonUniformCpuEngine::wait_until_tails_can_take(std::size_t n, const timespec& deadline) const {
  // Each finished job frees a slot and the input it read: wait for them one
  // at a time, as the period allows. Calling an overload at the first wait
  // would mute a recovery's worth of calls for a worker a few microseconds
  // from done, and calls back to back would never get out of it.
  while (const Segment* seg = segment_that_cannot_take(n)) {
    if (!seg->done.wait_at_least(seg->done.value() + 1, &deadline)) {
      return segment_that_cannot_take(n) == nullptr;
    }
  }
  return true;
}

bool NonUniformCpuEngine::finish_call_job(const timespec* deadline) {
  if (call_job_in_flight_) {
    if (head_pool_ && !head_pool_->idle_by(deadline)) return false;
    call_job_in_flight_ = false;
  }
  if (head_call_open_) {
    head_->end_call();
    head_call_open_ = false;
  }
  complete_install();  // that call has played
  return true;
}

bool NonUniformCpuEngine::run_call_job(bool adding_tails, const timespec* deadline) {
  call_job_.adding_tails = adding_tails;
  if (!head_pool_) {
    for (std::size_t t = 0; t < call_tasks_; ++t) call_job_(t, 0);
    return true;
  }
  call_job_in_flight_ = true;
  if (!head_pool_->run_by(call_job_, call_tasks_, deadline)) return false;
  call_job_in_flight_ = false;
  return true;
}

void NonUniformCpuEngine::call_task(bool adding_tails, std::size_t task,
                                    std::size_t thread) noexcept {
  const std::size_t n = call_frames_;
  const std::size_t first = task * channels_per_task_;
  const std::size_t last = std::min(channels_, first + channels_per_task_);
  if (!adding_tails) {
    for (std::size_t ch = first; ch < last; ++ch) {
      head_->call_channel(ch, stage_in_.data() + ch * n, stage_out_.data() + ch * n, thread);
    }
    return;
  }
  // The rings' frames for the call's span, every job that makes them done.
  const std::uint64_t start = call_start_;
  for (std::size_t ch = first; ch < last; ++ch) {
    float* y = stage_out_.data() + ch * n;
    float* old_tails = tails_old_.data() + ch * n;
    float* new_tails = tails_new_.data() + ch * n;
    // Only the channels the new bank changes fade (see the top).
    const bool fading = call_fading_ && current_->changes(ch);
    const std::size_t slot = current_->slot[ch];
    if (fading) {
      count_faded(1);
      std::fill(old_tails, old_tails + n, 0.0f);
      std::fill(new_tails, new_tails + n, 0.0f);
    }
    for (const auto& seg_ptr : segments_) {  // in plan order, as one thread adds them
      const Segment& seg = *seg_ptr;
      if (ch < seg.first_channel || ch >= seg.first_channel + seg.channels) continue;
      if (start + n <= seg.first_tap) continue;
      const std::size_t from = start & (seg.ring - 1);
      const std::size_t run = std::min(n, seg.ring - from);
      auto add = [&](std::size_t slot, float* dst) {
        const float* src = seg.out[slot].data() + (ch - seg.first_channel) * seg.ring;
        for (std::size_t f = 0; f < run; ++f) dst[f] += src[from + f];
        for (std::size_t f = run; f < n; ++f) dst[f] += src[f - run];
      };
      if (fading) {
        add(slot ^ 1, old_tails);
        add(slot, new_tails);
      } else {
        add(slot, y);
      }
    }
    if (fading) {  // the same blend as the head's: w = (i + 1) / n
      const float step = 1.0f / float(n);
      for (std::size_t f = 0; f < n; ++f) {
        y[f] += old_tails[f] + float(f + 1) * step * (new_tails[f] - old_tails[f]);
      }
    }
  }
}

bool NonUniformCpuEngine::run_call(std::span<const float> in, std::span<float> out,
                                   std::size_t frames, Layout layout, const timespec* deadline) {
  const std::size_t samples = frames * channels_;
  follow_caller_priority();
  // A late call's head work still running holds the head and the staging:
  // without them this call's input cannot reach the head, an overload (see
  // the top), which the tails' state then recovers from as from theirs.
  if (!finish_call_job(deadline)) {
    overloaded_ = true;
    std::fill(out.begin(), out.begin() + std::ptrdiff_t(samples), 0.0f);
    frames_ += frames;
    return false;
  }
  const bool fading = take_offered_bank(true);
  call_frame_.store(frames_, std::memory_order_release);

  // Overload: resume once every worker is idle; start one when the tails
  // cannot take this call by its deadline (without one, dispatch() waits).
  if (overloaded_ && tails_idle()) {
    overloaded_ = false;
    for (auto& seg : segments_) {
      // The next job is for block frames_ / P (see dispatch()).
      seg->base = seg->dispatched.load(std::memory_order_relaxed) - frames_ / seg->partition;
    }
    mute_until_ = frames_ + recovery_frames_;
  }
  if (!overloaded_ && deadline != nullptr && !wait_until_tails_can_take(frames, *deadline)) {
    overloaded_ = true;
  }

  // Planar staging; the stream's input ring for the tail workers.
  const std::size_t n = frames;
  const std::size_t at = frames_ & (in_ring_ - 1);
  const std::size_t first_run = std::min(n, in_ring_ - at);
  for (std::size_t ch = 0; ch < channels_; ++ch) {
    float* x = stage_in_.data() + ch * n;
    if (layout == Layout::planar) {
      std::memcpy(x, in.data() + ch * n, n * sizeof(float));
    } else {
      for (std::size_t f = 0; f < n; ++f) x[f] = in[f * channels_ + ch];
    }
    if (overloaded_) continue;
    float* ring = input_.data() + ch * in_ring_;
    std::memcpy(ring + at, x, first_run * sizeof(float));
    std::memcpy(ring, x + first_run, (n - first_run) * sizeof(float));
  }
  call_start_ = frames_;
  call_frames_ = n;
  call_fading_ = fading;
  head_->begin_call(n);
  head_call_open_ = true;
  bool late = overloaded_ || frames_ < mute_until_;
  if (run_call_job(false, deadline)) {
    head_->end_call();
    head_call_open_ = false;
  } else {
    late = true;
  }

  // The tails' output for [frames_, frames_ + n): wait for the jobs that make it, then add it.
  for (auto& seg_ptr : segments_) {
    if (late) break;
    Segment& seg = *seg_ptr;
    if (frames_ + n <= seg.first_tap) continue;
    if (!seg.done.wait_at_least(seg.base + (frames_ + n - 1 - seg.first_tap) / seg.partition + 1,
                                deadline)) {
      late = true;
    }
  }
  if (!late && !run_call_job(true, deadline)) late = true;

  if (late) {
    std::fill(out.begin(), out.begin() + std::ptrdiff_t(samples), 0.0f);
  } else {
    for (std::size_t ch = 0; ch < channels_; ++ch) {
      const float* y = stage_out_.data() + ch * n;
      if (layout == Layout::planar) {
        std::memcpy(out.data() + ch * n, y, n * sizeof(float));
      } else {
        for (std::size_t f = 0; f < n; ++f) out[f * channels_ + ch] = y[f];
      }
    }
  }
  const std::uint64_t before = frames_;
  frames_ += n;
  if (!overloaded_) dispatch(before, frames_);
  if (!call_job_in_flight_) complete_install();  // else once it is done
  free_unused_banks();
  return !late;
}

}  // namespace

std::unique_ptr<Engine> make_cpu_nonuniform_engine(const FilterBank& bank,
                                                   const EngineOptions& options,
                                                   const PartitionPlan& plan) {
  return std::make_unique<NonUniformCpuEngine>(bank, options, plan);
}

}  // namespace tapstream
