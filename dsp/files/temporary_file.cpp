#include "dsp/files/temporary_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <system_error>

namespace tapstream {

namespace {

constexpr char kMarker[] = ".tapstream-tmp-";

std::string random_suffix(std::mt19937_64& rng) {
  static constexpr char kAlphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::uniform_int_distribution<std::size_t> pick(0, sizeof(kAlphabet) - 2);
  std::string suffix(6, 'x');
  for (auto& c : suffix) c = kAlphabet[pick(rng)];
  return suffix;
}

}  // namespace

TemporaryFile::TemporaryFile(const std::filesystem::path& destination) : destination_(destination) {
  if (destination.filename().empty()) {
    throw std::runtime_error("not a file name");
  }
  std::random_device seed;
  std::mt19937_64 rng((static_cast<std::uint64_t>(seed()) << 32) ^ seed() ^
                      static_cast<std::uint64_t>(::getpid()));
  // O_EXCL makes the name ours even if another process picks the same one;
  // then we simply try another.
  for (int attempt = 0; attempt < 100; ++attempt) {
    std::filesystem::path candidate = destination;
    candidate += kMarker + std::to_string(::getpid()) + "-" + random_suffix(rng);
    const int fd = ::open(candidate.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd >= 0) {
      path_ = std::move(candidate);
      fd_ = fd;
      return;
    }
    if (errno != EEXIST) {
      const std::string directory =
          destination.parent_path().empty() ? std::string(".") : destination.parent_path().string();
      throw std::runtime_error("cannot create a temporary file in " + directory + ": " +
                               std::strerror(errno));
    }
  }
  throw std::runtime_error("cannot find an unused temporary file name");
}

TemporaryFile::~TemporaryFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !path_.empty()) {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
}

int TemporaryFile::release_fd() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

void TemporaryFile::commit() {
  if (committed_) return;
  if (fd_ >= 0) {
    if (::fsync(fd_) != 0) {
      throw std::runtime_error(std::string("cannot flush to disk: ") + std::strerror(errno));
    }
    const int result = ::close(fd_);
    fd_ = -1;
    if (result != 0) {
      throw std::runtime_error(std::string("cannot close: ") + std::strerror(errno));
    }
  }
  std::error_code error;
  std::filesystem::rename(path_, destination_, error);
  if (error) {
    throw std::runtime_error("cannot rename " + path_.filename().string() +
                             " onto it: " + error.message());
  }
  committed_ = true;
}

std::vector<std::filesystem::path> TemporaryFile::remove_stale(
    const std::filesystem::path& destination) {
  std::vector<std::filesystem::path> removed;
  const std::string prefix = destination.filename().string() + kMarker;
  const std::filesystem::path directory =
      destination.parent_path().empty() ? std::filesystem::path(".") : destination.parent_path();
  std::error_code error;
  std::filesystem::directory_iterator entries(directory, error);
  for (; !error && entries != std::filesystem::directory_iterator(); entries.increment(error)) {
    const std::string name = entries->path().filename().string();
    if (name.size() <= prefix.size() + 7 || name.compare(0, prefix.size(), prefix) != 0) continue;
    // <pid>-XXXXXX after the prefix
    const std::string_view rest = std::string_view(name).substr(prefix.size());
    const std::size_t dash = rest.find('-');
    if (dash == std::string_view::npos || rest.size() - dash - 1 != 6) continue;
    pid_t pid = 0;
    const auto [end, status] = std::from_chars(rest.data(), rest.data() + dash, pid);
    if (status != std::errc() || end != rest.data() + dash || pid <= 0) continue;
    // A live process (or one we may not signal, hence someone else's) keeps its file.
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;
    struct stat status_of_file {};
    if (::lstat(entries->path().c_str(), &status_of_file) != 0 ||
        !S_ISREG(status_of_file.st_mode) || status_of_file.st_uid != ::geteuid()) {
      continue;
    }
    std::error_code ignored;
    if (std::filesystem::remove(entries->path(), ignored)) removed.push_back(entries->path());
  }
  return removed;
}

}  // namespace tapstream
