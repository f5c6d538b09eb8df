#pragma once
// Lets libsndfile write a container to something that cannot seek: a pipe,
// a FIFO, a terminal, a character device. libsndfile writes a header at open
// and rewrites it (seeking back) at the first write and at close; a pipe
// takes neither. This virtual file keeps the first bytes in memory, where
// rewrites land normally: a short output therefore goes out whole with its
// true header at close. Once more than kHeldBytes are held they go out, with
// the length fields that cannot yet be known set to "unknown" (WAV: the
// 0x7ffff000 that sox writes on pipes; AU: 0xffffffff; FLAC: a total of 0,
// which its stream header already says), and later rewrites of bytes already
// sent are dropped. Only containers whose readers cope with that are taken.

#include <sndfile.h>

#include <atomic>
#include <cstddef>
#include <string>
#include <vector>

namespace tapstream {

class StreamOutput {
 public:
  static constexpr std::size_t kHeldBytes = 1 << 16;

  // True for the containers (SF_FORMAT_* major) this class can stream.
  static bool can_stream(int container);
  // "wav, au, flac, raw": for error messages.
  static std::string streamable_names();

  // Writes to `fd`, which stays the caller's. `container`: SF_FORMAT_* major.
  // `cancel` (may be null): when it becomes true, a write waiting for a
  // reader that has stopped reading fails ("interrupted") within
  // kPollInterval, whichever thread is writing.
  StreamOutput(int fd, int container, const std::atomic<bool>* cancel = nullptr);
  static constexpr int kPollIntervalMs = 50;
  StreamOutput(const StreamOutput&) = delete;
  StreamOutput& operator=(const StreamOutput&) = delete;

  // For sf_open_virtual(io(), SFM_WRITE, &info, this).
  SF_VIRTUAL_IO* io() { return &io_; }
  // Sends what is still held (after sf_close). Throws std::runtime_error on a
  // write error, here or earlier.
  void finish();

 private:
  static sf_count_t length_of(void* self);
  static sf_count_t seek_to(sf_count_t offset, int whence, void* self);
  static sf_count_t read_into(void* buffer, sf_count_t count, void* self);
  static sf_count_t write_from(const void* buffer, sf_count_t count, void* self);
  static sf_count_t tell(void* self);

  sf_count_t write(const unsigned char* bytes, sf_count_t count);
  void send_held(bool mark_lengths_unknown);
  bool send(const unsigned char* bytes, std::size_t count);

  int fd_;
  int container_;
  const std::atomic<bool>* cancel_ = nullptr;
  SF_VIRTUAL_IO io_{};
  std::vector<unsigned char> held_;  // bytes [0, held_.size()) while nothing is sent
  bool sending_ = false;             // held bytes have gone out
  sf_count_t position_ = 0;
  sf_count_t sent_ = 0;  // bytes sent so far (the stream's end once sending_)
  std::string error_;    // first write error
};

}  // namespace tapstream
