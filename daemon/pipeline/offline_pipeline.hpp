#pragma once
// The offline pipeline: Source -> MatrixEngine -> Sink for files, unpaced, as three
// stages that run at once: a reader thread decodes block k+1 while the
// caller's thread filters block k through the engine and a writer thread
// encodes block k-1. With OfflineOptions::read_on_caller the caller's
// thread reads each block and filters it at once (two stages, one hand-off
// a block). Blocks travel along two bounded rings of buffers made once
// (page-locked for the CUDA engine: see engine_factory.hpp), so memory stays
// fixed whatever the input's length. With a tail, zeros follow the input so
// that the filters' decay (M - 1 frames) is written too.
//
// The engine stage runs a MatrixEngine (inputs() in, outputs() out; a filter
// per channel is the diagonal matrix): the input ring's blocks hold the
// source's channels, the output ring's the sink's.
//
// A run is a list of jobs (one per file) through one engine, reset between
// jobs, so that a batch decodes the next file while the current one filters.
// A job whose source or sink fails is reported and skipped; the others go on.
//
// Threads: each job's source is used only by the reader thread (the
// caller's, with read_on_caller) and its sink
// only by the writer thread; on_progress and on_job_done are called on the
// writer thread. `cancel` may be set from a signal handler.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <span>
#include <vector>

#include "daemon/pipeline/block_memory.hpp"
#include "dsp/model/matrix_engine.hpp"

namespace tapstream {

class SoundFileReader;
class SoundFileWriter;

// Reads up to buffer.size() / input channels frames into `buffer` (interleaved) and
// returns how many; 0 means the end of the input.
using ReadFrames = std::function<std::size_t(std::span<float> buffer)>;
// Takes every sample of the given whole frames (interleaved).
using WriteFrames = std::function<void(std::span<const float> frames)>;

struct OfflineSource {
  ReadFrames read;
  std::size_t tail_frames = 0;  // zeros fed after the input (M - 1 for the full decay)
};

struct OfflineSink {
  WriteFrames write;
  std::function<void()> finish;  // after the last write (e.g. commit); may be empty
};

// One input's worth of work. open_source runs on the reader thread when the
// job's turn comes; open_sink on the writer thread before the job's first
// write (or its finish, for an empty input). Either may throw: the job then
// fails and its sink, if made, is destroyed without finish().
struct OfflineJob {
  std::function<OfflineSource()> open_source;
  std::function<OfflineSink()> open_sink;
};

struct OfflineJobResult {
  std::uint64_t input_frames = 0;
  std::uint64_t output_frames = 0;  // input_frames + tail frames
  std::exception_ptr error;         // set when the job failed
};

struct OfflineOptions {
  std::size_t block_frames = 8192;   // at most the engine's max_block_frames()
  std::size_t tail_frames = 0;       // single-file runs only; jobs say their own
  std::size_t blocks_in_flight = 3;  // buffers in each of the two rings (at least 2)
  // The caller's thread reads a block and filters it at once, with no reader
  // thread: for an engine whose work per block is small next to handing a
  // block from one thread to another (a gain: OfflineFilter sets it), which
  // on a loaded machine waits for a time slice at every block. The source is
  // then used on the caller's thread; the engine stays there either way.
  bool read_on_caller = false;
  BlockAllocator allocate;           // empty: ordinary_block_memory
  // Called on the writer thread after every block with the frames written so far.
  std::function<void(std::uint64_t frames_written)> on_progress;
  // Called on the writer thread when a job has finished or failed.
  std::function<void(std::size_t job, const OfflineJobResult& result)> on_job_done;
  // Called on the reader thread when job `job`'s turn comes, before it is
  // opened: false skips it (not opened, not reported; its result stays
  // empty), so that several runs (one per GPU) can share one list of jobs,
  // each taking the next job no one has taken. Empty: every job is run.
  std::function<bool(std::size_t job)> claim;
  // When it becomes true the pipeline stops at the next block and throws.
  const std::atomic<bool>* cancel = nullptr;
};

struct OfflineResult {
  std::uint64_t input_frames = 0;
  std::uint64_t output_frames = 0;  // input_frames + tail_frames
};

// Runs every job through `engine` (sources give engine.inputs() channels,
// sinks take engine.outputs()); returns one result per job. Throws
// std::invalid_argument for a block size the engine cannot take,
// std::runtime_error("interrupted") on cancel, and whatever the engine
// throws; errors of a job's source or sink are that job's result.
std::vector<OfflineJobResult> run_offline_jobs(MatrixEngine& engine,
                                               std::span<const OfflineJob> jobs,
                                               const OfflineOptions& options);

// One input through `engine`: the same, rethrowing the job's error.
OfflineResult run_offline(MatrixEngine& engine, const ReadFrames& read, const WriteFrames& write,
                          const OfflineOptions& options);

// The same from a sound file into a sound file (the writer is not committed).
OfflineResult run_offline(MatrixEngine& engine, SoundFileReader& reader, SoundFileWriter& writer,
                          const OfflineOptions& options);

}  // namespace tapstream
