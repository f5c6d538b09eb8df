#pragma once
// A pipe that tells a thread blocked in poll() to stop: the thread polls
// read_fd() and returns when it becomes readable; its owner calls notify().
// The pipe is non-blocking and close-on-exec, and closed on destruction.

#include <system_error>

namespace tapstream {

class StopPipe {
 public:
  // Throws std::system_error ("pipe2: <reason>") when the pipe cannot be made.
  StopPipe();
  ~StopPipe();
  StopPipe(const StopPipe&) = delete;
  StopPipe& operator=(const StopPipe&) = delete;

  // Makes read_fd() readable; safe to call from any thread, retried on EINTR.
  void notify() noexcept;
  int read_fd() const noexcept { return fds_[0]; }

 private:
  int fds_[2] = {-1, -1};
};

}  // namespace tapstream
