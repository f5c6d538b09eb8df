#pragma once
// Files that hold what tapstream is told to load (coefficients, routing
// matrices, configurations) are opened here, and only regular files are
// taken: a device (/dev/zero, /dev/urandom) or a FIFO named by a user, a
// configuration or a control client would otherwise be read without end or
// block the reader forever. The check is made on the open descriptor (open
// first, then fstat), never on the name before opening, so that nothing can
// be swapped in between; FIFOs are opened with O_NONBLOCK so that opening
// one cannot wait for a writer. Sizes are known before reading, so that a
// file larger than its reader could use is refused without reading it.

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>

namespace tapstream {

// what() names the file and the problem: "x.txt: is a FIFO (named pipe),
// not a regular file".
class RegularFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RegularFile {
 public:
  // Opens `file` read-only; throws RegularFileError when it cannot be opened
  // or is not a regular file.
  explicit RegularFile(const std::filesystem::path& file);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  int fd() const { return fd_; }
  std::uint64_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

  // Refuses the file, by its size alone, when it is larger than
  // `max_bytes`; `why` says where the bound comes from ("for 1048576 taps").
  void check_size(std::uint64_t max_bytes, const std::string& why) const;
  // The whole content, from the start, after check_size(max_bytes, why).
  std::string read_all(std::uint64_t max_bytes, const std::string& why);

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

// What a file type is, for messages: "a FIFO (named pipe)", "a directory".
std::string describe_file_type(unsigned mode);

}  // namespace tapstream
