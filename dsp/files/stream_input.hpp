#pragma once
// An input that is not a regular file (a pipe on standard input, a FIFO, a
// terminal or another character device), read through a pipe of our own
// that a thread fills. Whoever reads that pipe (libsndfile, which retries a
// read a signal interrupts, on whatever thread it runs) then sees the end of
// the stream as soon as the reading is cancelled, instead of waiting until
// the writer sends more or goes away. The thread polls with a short timeout,
// so a cancel flag set from a signal handler ends a wait within
// kPollInterval, including the wait for a FIFO's first writer.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <string>
#include <thread>

namespace tapstream {

class StreamInput {
 public:
  static constexpr std::chrono::milliseconds kPollInterval{50};

  // Takes `source_fd` (closed by the destructor). `cancel` (may be null):
  // when it becomes true, the stream ends as if the writer had gone.
  StreamInput(int source_fd, const std::atomic<bool>* cancel);
  ~StreamInput();  // stops the thread and closes every descriptor
  StreamInput(const StreamInput&) = delete;
  StreamInput& operator=(const StreamInput&) = delete;

  // The read end of our pipe: what the reader reads.
  int fd() const { return read_fd_; }
  // True once the stream ended because it was cancelled (not its end).
  bool cancelled() const { return cancelled_.load(std::memory_order_acquire); }
  // The source's read error that ended the stream; empty when none did.
  // Valid once fd() has reached its end.
  std::string error() const;

 private:
  void pump();
  bool should_stop() const;
  // Writes all of `bytes` to the pipe, waiting for room; false when stopped.
  bool write_all(const char* bytes, std::size_t count);

  int source_fd_ = -1;
  int read_fd_ = -1;
  int write_fd_ = -1;
  const std::atomic<bool>* cancel_ = nullptr;
  std::atomic<bool> stop_{false};
  std::atomic<bool> cancelled_{false};
  std::atomic<int> error_{0};  // errno of a failed read of the source
  std::thread thread_;
};

}  // namespace tapstream
