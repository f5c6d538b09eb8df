#include "dsp/files/stream_input.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "dsp/realtime/thread_role.hpp"

namespace tapstream {

StreamInput::StreamInput(int source_fd, const std::atomic<bool>* cancel)
    : source_fd_(source_fd), cancel_(cancel) {
  int ends[2] = {-1, -1};
  if (::pipe2(ends, O_CLOEXEC) != 0) {
    const int error = errno;
    ::close(source_fd_);
    throw std::runtime_error(std::string("cannot make a pipe: ") + std::strerror(error));
  }
  read_fd_ = ends[0];
  write_fd_ = ends[1];
  // Never blocks the thread on a full pipe whose reader has stopped reading.
  ::fcntl(write_fd_, F_SETFL, ::fcntl(write_fd_, F_GETFL) | O_NONBLOCK);
  thread_ = std::thread([this] {
    name_this_thread("ts-input");
    pump();
  });
}

StreamInput::~StreamInput() {
  stop_.store(true, std::memory_order_release);
  if (thread_.joinable()) thread_.join();
  if (write_fd_ >= 0) ::close(write_fd_);
  ::close(read_fd_);
  ::close(source_fd_);
}

std::string StreamInput::error() const {
  const int error = error_.load(std::memory_order_acquire);
  return error == 0 ? std::string() : std::string(std::strerror(error));
}

bool StreamInput::should_stop() const {
  if (stop_.load(std::memory_order_acquire)) return true;
  return cancel_ != nullptr && cancel_->load(std::memory_order_relaxed);
}

bool StreamInput::write_all(const char* bytes, std::size_t count) {
  while (count > 0) {
    if (should_stop()) return false;
    const ssize_t n = ::write(write_fd_, bytes, count);
    if (n > 0) {
      bytes += n;
      count -= static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) return false;
    pollfd room{write_fd_, POLLOUT, 0};
    ::poll(&room, 1, static_cast<int>(kPollInterval.count()));
  }
  return true;
}

void StreamInput::pump() {
  std::array<char, 65536> buffer{};
  while (true) {
    if (should_stop()) break;
    // A FIFO opened without a writer polls as nothing to read until one
    // comes (Linux), so the same loop waits for the writer.
    pollfd source{source_fd_, POLLIN, 0};
    const int ready = ::poll(&source, 1, static_cast<int>(kPollInterval.count()));
    if (ready == 0 || (ready < 0 && errno == EINTR)) continue;
    if (ready < 0) {
      error_.store(errno, std::memory_order_release);
      break;
    }
    const ssize_t n = ::read(source_fd_, buffer.data(), buffer.size());
    if (n < 0) {
      if (errno == EAGAIN || errno == EINTR) continue;
      error_.store(errno, std::memory_order_release);
      break;
    }
    if (n == 0) break;  // the writer has gone: the end of the stream
    if (!write_all(buffer.data(), static_cast<std::size_t>(n))) break;
  }
  if (!stop_.load(std::memory_order_acquire) && cancel_ != nullptr &&
      cancel_->load(std::memory_order_relaxed)) {
    cancelled_.store(true, std::memory_order_release);
  }
  // The reader sees the end of the stream.
  ::close(write_fd_);
  write_fd_ = -1;
}

}  // namespace tapstream
