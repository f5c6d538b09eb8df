#pragma once
// Sound files as RAII objects: the file Source and Sink of the offline
// pipeline. Reading yields interleaved float frames, from a file or from
// standard input ("-"). Writing goes, for a regular file (or a name not yet
// taken), to a temporary file beside it that commit() renames onto it, so
// that a failed run leaves no partial output; a symlink is followed (its
// target is written, the link kept); standard output ("-"), a FIFO or a
// character device is written through as the samples come
// (dsp/files/stream_output).
//
// libsndfile opens every input, and its reading of the header is the one
// that counts. The samples of a regular file in WAV, WAVE_FORMAT_EXTENSIBLE,
// RF64, W64, AU or raw, as float or PCM 16/24/32, are then moved by
// tapstream itself in large sequential reads and writes with the conversion
// on the fly (dsp/files/pcm_header, pcm_codec, staged_file_writer: the fast
// path): on reading when its own parse of the header agrees with
// libsndfile's, on writing when there is no metadata to write. libsndfile
// does everything else (other containers and encodings, pipes, metadata).

#include <sndfile.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dsp/files/background_commits.hpp"
#include "dsp/files/pcm_header.hpp"
#include "dsp/files/sample_quantiser.hpp"
#include "dsp/files/staged_file_writer.hpp"
#include "dsp/files/stream_input.hpp"
#include "dsp/files/stream_output.hpp"
#include "dsp/files/temporary_file.hpp"

namespace tapstream {

class SoundFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "-" names standard input (reading) or standard output (writing).
inline bool is_standard_stream(const std::filesystem::path& file) {
  return file == "-";
}

// Sample encodings a user can ask for on output.
enum class SampleFormat { same_as_input, float32, pcm16, pcm24, pcm32 };
SampleFormat parse_sample_format(const std::string& name);  // float|pcm16|pcm24|pcm32

struct SoundFileInfo {
  int sample_rate = 0;
  int channels = 0;
  std::int64_t frames = 0;  // 0 when unknown (standard input, a pipe)
  int format = 0;           // libsndfile's SF_FORMAT_* (major | subtype)
};

// What a file says about itself besides its samples, carried from input to
// output where the output container holds it.
struct SoundFileMetadata {
  std::vector<int> channel_map;                      // SF_CHANNEL_MAP_*; empty: none
  std::vector<std::pair<int, std::string>> strings;  // SF_STR_* (title, artist, ...)
};

// Headerless input: what its samples are (little-endian, interleaved).
struct RawInput {
  int sample_rate = 0;
  int channels = 0;
  SampleFormat format = SampleFormat::float32;  // same_as_input means float32
};

class SoundFileReader {
 public:
  // A file, or standard input for "-"; raw samples when `raw` is given.
  // A pipe, FIFO or character device is read through a StreamInput, so that
  // `cancel` (may be null) becoming true ends any wait for it (opening a
  // FIFO, reading a stalled pipe) within StreamInput::kPollInterval: read()
  // then throws. A directory is refused. Throws SoundFileError naming it.
  explicit SoundFileReader(const std::filesystem::path& file,
                           const std::optional<RawInput>& raw = std::nullopt,
                           const std::atomic<bool>* cancel = nullptr);
  ~SoundFileReader();
  SoundFileReader(const SoundFileReader&) = delete;
  SoundFileReader& operator=(const SoundFileReader&) = delete;

  const SoundFileInfo& info() const { return info_; }
  const SoundFileMetadata& metadata() const { return metadata_; }
  const std::filesystem::path& path() const { return path_; }
  // The frames the header promises: more than info().frames for a file cut
  // short (libsndfile then reads what is there). 0 when unknown.
  std::int64_t declared_frames() const { return declared_frames_; }
  // Reads up to out.size() / channels frames; returns frames read (0 at the end).
  std::size_t read(std::span<float> interleaved);
  // True when tapstream reads the samples itself (the fast path), not libsndfile.
  bool fast_path() const { return fast_.has_value(); }

 private:
  // The descriptor libsndfile reads: the file's own, or stream_'s pipe.
  int open_source(const std::filesystem::path& file, const std::atomic<bool>* cancel);
  // Why the stream ended early (cancelled, a failed read); empty if it did not.
  std::string stream_problem() const;
  // Throws when the stream ended because it was cancelled or failed.
  void check_stream() const;
  void close_source();  // the descriptor or stream libsndfile was given a copy of
  // Takes the fast path when the file is one of its formats and its header
  // says what libsndfile found in it.
  void choose_fast_path(const SF_INFO& sf_info);
  std::size_t read_fast(std::span<float> interleaved);

  std::filesystem::path path_;
  int fd_ = -1;                          // a regular file or block device we opened
  std::unique_ptr<StreamInput> stream_;  // a pipe, FIFO or character device
  SNDFILE* file_ = nullptr;
  SoundFileInfo info_;
  SoundFileMetadata metadata_;
  std::int64_t declared_frames_ = 0;
  std::optional<PcmLayout> fast_;  // set: the fast path reads the samples
  std::uint64_t fast_next_frame_ = 0;
  std::vector<std::uint8_t> fast_bytes_;  // scratch for samples to convert
};

// A descriptor for sf_open_fd(..., SF_TRUE): a duplicate of `fd` (the same
// open file, offset shared) that libsndfile closes, on sf_close or when the
// open fails. libsndfile 1.2.0 closes the descriptor of a failed open even
// when told not to, so it is never given one that is still ours.
int libsndfile_descriptor(int fd);

// The frames a libsndfile header declares, when libsndfile found fewer in
// the file (it logs "data : N (should be M)" for WAV-family files and
// shortens info.frames); else info.frames. Used for audio and IR files alike.
std::int64_t declared_frames(SNDFILE* file, const SF_INFO& info);

// Samples changed on the way out. Integer output is rounded (and dithered
// when asked) by SampleQuantiser and clipped; other non-float encodings are
// clipped to [-1, 1]; float output is written as it is.
struct ClipStats {
  std::uint64_t clipped_samples = 0;
  float peak = 0.0f;  // largest finite |sample| seen, before clipping
};

struct SoundFileWriterOptions {
  Dither dither = Dither::none;  // integer encodings only
  SoundFileMetadata metadata;    // what the container holds of it is written
  // When it becomes true, waits on a FIFO, pipe or device output (for its
  // reader to open it, or to read) end within StreamOutput's poll interval
  // with an "interrupted" error. May be null.
  const std::atomic<bool>* cancel = nullptr;
};

class SoundFileWriter {
 public:
  // Opens the output as the header comment says. `format` is libsndfile's
  // SF_FORMAT_*. Throws SoundFileError naming `file` (bad format, directory
  // not writable, a container that cannot be streamed to a pipe).
  SoundFileWriter(const std::filesystem::path& file, int sample_rate, int channels, int format,
                  const SoundFileWriterOptions& options = {});
  ~SoundFileWriter();  // removes the temporary file unless commit() succeeded
  SoundFileWriter(const SoundFileWriter&) = delete;
  SoundFileWriter& operator=(const SoundFileWriter&) = delete;

  void write(std::span<const float> interleaved);  // throws SoundFileError
  // Flushes and closes the file and, for a regular file, renames it onto
  // the destination after flushing it to disk (fsync). With `later`, a
  // regular file is handed to it instead, to be flushed and renamed on its
  // thread (a batch overlaps that with its next file); its failures are
  // then reported by later->wait().
  void commit(BackgroundCommits* later = nullptr);
  const std::filesystem::path& destination() const { return destination_; }
  // True when the output goes out as it is written (stdout, FIFO, device):
  // a failure can no longer take back what was sent.
  bool is_stream() const { return stream_ != nullptr || direct_fd_ >= 0; }
  const ClipStats& clip_stats() const { return clip_; }
  // True when tapstream writes the file itself (the fast path), not libsndfile.
  bool fast_path() const { return fast_.has_value(); }
  // Temporary files of this destination that earlier runs left behind
  // (TemporaryFile::remove_stale), removed on opening; for the caller to log.
  const std::vector<std::filesystem::path>& removed_stale() const { return removed_stale_; }

 private:
  void close_file();
  // Takes the fast path for a regular file in one of its formats with no
  // metadata to write; writes the header's first version.
  void choose_fast_path(int sample_rate, int channels, int format,
                        const SoundFileMetadata& metadata);
  void write_fast_samples(std::span<const float> interleaved);
  void finish_fast();  // the rest, a pad byte, the final header

  std::filesystem::path destination_;
  std::unique_ptr<TemporaryFile> temporary_;  // a regular file
  std::unique_ptr<StreamOutput> stream_;      // an unseekable output
  int direct_fd_ = -1;  // standard output that is a regular file, a stream's fd
  SNDFILE* file_ = nullptr;
  int channels_ = 0;
  bool float_format_ = false;
  bool committed_ = false;
  std::optional<SampleQuantiser> quantiser_;  // integer PCM encodings
  ClipStats clip_;
  std::vector<float> clipped_;     // scratch for the clipped copy of a block
  std::vector<int> codes_;         // scratch for integer codes
  std::optional<PcmLayout> fast_;  // set: the fast path writes the samples, not libsndfile
  std::unique_ptr<StagedFileWriter> fast_file_;  // the temporary file's bytes
  std::vector<std::uint8_t> fast_encoded_;       // scratch: a piece of converted samples
  std::uint64_t fast_data_bytes_ = 0;            // sample bytes so far
  std::vector<std::filesystem::path> removed_stale_;
};

// The container for a type name or file extension ("flac", "wav", "aif"...),
// 0 if libsndfile knows none by that name.
int container_for_name(std::string name);
// Every name container_for_name() knows, comma separated, for messages.
std::string known_container_names();

// The libsndfile format for the output: the input's major format (container)
// with the requested subtype (or the input's own subtype). Throws
// SoundFileError when libsndfile cannot write that combination, e.g. float or
// pcm32 in FLAC.
int output_format(int input_format, SampleFormat requested);

// The output's format and, when tapstream chose something the user did not
// ask for, a one-line note saying so.
struct OutputFormat {
  int format = 0;
  std::string note;
};

// Chooses the output's container and encoding:
// - container: `type` when given (--type); else the destination's extension;
//   standard output without --type is WAV; a FIFO or device with no known
//   extension gets the input's container. An unknown type or extension is
//   refused with the list of known ones.
// - encoding: `requested`, else the input's when the container holds it, else
//   (float input into FLAC, say) pcm24, with a note.
// `stream`: the output cannot seek, so only StreamOutput's containers work.
OutputFormat choose_output_format(int input_format, SampleFormat requested, const std::string& type,
                                  const std::filesystem::path& destination, bool stream);

// The dither for an encoding (`format`, SF_FORMAT_*): `choice` ("none" or
// "tpdf"), or for "auto" TPDF when the samples have 16 bits or fewer (what
// sox does by default; at 24 bits and more the quantisation noise is below
// any converter's own) and none otherwise. Throws std::invalid_argument
// naming an unknown choice.
Dither dither_for_format(const std::string& choice, int format);

// True when `file` is written through rather than by rename: "-" or
// (after following symlinks) an existing FIFO, character device or socket.
bool output_is_stream(const std::filesystem::path& file);

// A short human name for a format, e.g. "WAV float" or "FLAC pcm16".
std::string describe_format(int format);

}  // namespace tapstream
