#pragma once
// A uniquely named file created beside its destination, so that renaming it
// onto the destination is atomic (same directory, same file system). Until
// commit() succeeds the destination is untouched, and the destructor removes
// the temporary file: a failed run leaves nothing behind.

#include <filesystem>
#include <stdexcept>
#include <vector>

namespace tapstream {

class TemporaryFile {
 public:
  // Creates `<destination>.tapstream-tmp-<pid>-XXXXXX` (exclusive create,
  // mode 0666 less the umask). Throws std::runtime_error whose message names the problem but not
  // the destination, so that callers can prefix it in their own error type.
  explicit TemporaryFile(const std::filesystem::path& destination);
  ~TemporaryFile();
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& destination() const { return destination_; }
  // The open descriptor, or -1 once released or closed.
  int fd() const { return fd_; }
  // Hands the descriptor to someone who will close it (e.g. libsndfile).
  int release_fd();
  // Flushes to disk (when the descriptor is still ours), closes, and renames
  // onto the destination. Throws std::runtime_error; the temporary file is
  // then still removed by the destructor.
  void commit();

  // Removes temporary files of `destination` left by earlier runs: named as
  // above, regular files owned by this user, whose process no longer exists.
  // Returns what was removed (for the caller to log); never throws.
  static std::vector<std::filesystem::path> remove_stale(const std::filesystem::path& destination);

 private:
  std::filesystem::path destination_;
  std::filesystem::path path_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace tapstream
