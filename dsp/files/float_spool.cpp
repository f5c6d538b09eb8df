#include "dsp/files/float_spool.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace tapstream {

namespace {

std::runtime_error spool_error(const std::string& what) {
  return std::runtime_error("temporary spool file: " + what + ": " + std::strerror(errno));
}

}  // namespace

FloatSpool::FloatSpool() {
  const char* dir = std::getenv("TMPDIR");
  const std::string directory = dir != nullptr && *dir != '\0' ? dir : "/tmp";
  fd_ = ::open(directory.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd_ < 0) {
    // File systems without O_TMPFILE: a named file, unlinked before use.
    std::string pattern = directory + "/tapstream-spool-XXXXXX";
    fd_ = ::mkostemp(pattern.data(), O_CLOEXEC);
    if (fd_ < 0) throw spool_error("cannot create one in " + directory);
    ::unlink(pattern.c_str());
  }
}

FloatSpool::~FloatSpool() {
  if (fd_ >= 0) ::close(fd_);
}

void FloatSpool::write(std::span<const float> samples) {
  const auto* bytes = reinterpret_cast<const char*>(samples.data());
  std::size_t left = samples.size_bytes();
  while (left > 0) {
    const ssize_t n = ::write(fd_, bytes, left);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw spool_error("write failed");
    bytes += n;
    left -= std::size_t(n);
  }
}

void FloatSpool::rewind() {
  if (::lseek(fd_, 0, SEEK_SET) != 0) throw spool_error("cannot rewind");
}

std::size_t FloatSpool::read(std::span<float> samples) {
  auto* bytes = reinterpret_cast<char*>(samples.data());
  std::size_t got = 0;
  while (got < samples.size_bytes()) {
    const ssize_t n = ::read(fd_, bytes + got, samples.size_bytes() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw spool_error("read failed");
    if (n == 0) break;
    got += std::size_t(n);
  }
  return got / sizeof(float);
}

}  // namespace tapstream
