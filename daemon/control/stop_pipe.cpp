#include "daemon/control/stop_pipe.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>

namespace tapstream {

StopPipe::StopPipe() {
  if (::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw std::system_error(errno, std::system_category(), "pipe2");
  }
}

StopPipe::~StopPipe() {
  for (const int fd : fds_) ::close(fd);
}

void StopPipe::notify() noexcept {
  const char byte = 's';
  while (::write(fds_[1], &byte, 1) < 0 && errno == EINTR) {
  }
}

}  // namespace tapstream
