#include "dsp/files/regular_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace tapstream {

namespace {

RegularFileError error_for(const std::filesystem::path& file, const std::string& problem) {
  return RegularFileError(file.string() + ": " + problem);
}

}  // namespace

std::string describe_file_type(unsigned mode) {
  switch (mode & S_IFMT) {
    case S_IFREG:
      return "a regular file";
    case S_IFDIR:
      return "a directory";
    case S_IFIFO:
      return "a FIFO (named pipe)";
    case S_IFCHR:
      return "a character device";
    case S_IFBLK:
      return "a block device";
    case S_IFSOCK:
      return "a socket";
    case S_IFLNK:
      return "a symbolic link";
    default:
      return "not a file";
  }
}

RegularFile::RegularFile(const std::filesystem::path& file) : path_(file) {
  // O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting
  // for a writer; O_NOCTTY: a terminal named here never becomes ours.
  do {
    fd_ = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  } while (fd_ < 0 && errno == EINTR);
  if (fd_ < 0) {
    const int error = errno;
    if (error == ENOENT) throw error_for(file, "no such file");
    // A socket cannot be opened at all; say what it is rather than ENXIO.
    struct stat status {};
    if (error == ENXIO && ::stat(file.c_str(), &status) == 0) {
      throw error_for(file, "is " + describe_file_type(status.st_mode) + ", not a regular file");
    }
    throw error_for(file, std::string("cannot open: ") + std::strerror(error));
  }
  struct stat status {};
  if (::fstat(fd_, &status) != 0) {
    const int error = errno;
    ::close(fd_);
    fd_ = -1;
    throw error_for(file, std::string("cannot read its status: ") + std::strerror(error));
  }
  if (!S_ISREG(status.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    throw error_for(file, "is " + describe_file_type(status.st_mode) + ", not a regular file");
  }
  // A regular file never blocks; readers (libsndfile) expect blocking semantics.
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags >= 0) ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK);
  size_ = static_cast<std::uint64_t>(status.st_size);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) ::close(fd_);
}

void RegularFile::check_size(std::uint64_t max_bytes, const std::string& why) const {
  if (size_ > max_bytes) {
    throw error_for(path_, "is " + std::to_string(size_) + " bytes, more than the " +
                               std::to_string(max_bytes) + " bytes it may have " + why +
                               " (refused without reading it)");
  }
}

std::string RegularFile::read_all(std::uint64_t max_bytes, const std::string& why) {
  check_size(max_bytes, why);
  if (::lseek(fd_, 0, SEEK_SET) < 0) {
    throw error_for(path_, std::string("cannot seek: ") + std::strerror(errno));
  }
  // The size may change while it is read: never more than max_bytes + 1
  // (one more tells that it grew past the bound).
  std::string content;
  content.resize(static_cast<std::size_t>(size_));
  std::size_t got = 0;
  while (true) {
    if (got == content.size()) {
      if (content.size() > max_bytes) break;
      content.resize(std::min<std::uint64_t>(max_bytes + 1, content.size() + 65536));
    }
    const ssize_t n = ::read(fd_, content.data() + got, content.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw error_for(path_, std::string("cannot read: ") + std::strerror(errno));
    }
    if (n == 0) break;
    got += static_cast<std::size_t>(n);
  }
  content.resize(got);
  if (content.size() > max_bytes) {
    throw error_for(path_, "grew past the " + std::to_string(max_bytes) + " bytes it may have " +
                               why + " while it was read");
  }
  return content;
}

}  // namespace tapstream
