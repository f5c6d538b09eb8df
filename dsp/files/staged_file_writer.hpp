#pragma once
// Writes a file front to back in large chunks, for the fast sound-file path
// (SoundFileWriter): bytes gather in an aligned staging buffer of
// kChunkBytes, and each full chunk goes out in one write with direct I/O
// (O_DIRECT) where the file system takes it. The samples then go from the
// buffer to the disk without a copy into the page cache, which on a small
// machine costs more CPU than the rest of an identity run, and the fsync
// before the rename finds almost nothing left to write. The whole sectors
// of the last, partial chunk go direct as well; its last partial sector and
// the rewrite of the header (finish) go through the page cache as usual. A file system that refuses
// direct I/O (tmpfs, some network ones) is written through the page cache throughout.

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <span>

namespace tapstream {

class StagedFileWriter {
 public:
  static constexpr std::size_t kChunkBytes = std::size_t{8} << 20;
  static constexpr std::size_t kAlignment = 4096;  // covers 512- and 4096-byte sectors

  // Writes to `fd` (stays the caller's) from offset 0. `direct`: try direct I/O.
  StagedFileWriter(int fd, bool direct);
  ~StagedFileWriter();
  StagedFileWriter(const StagedFileWriter&) = delete;
  StagedFileWriter& operator=(const StagedFileWriter&) = delete;

  // The next bytes of the file. Throws std::runtime_error (a failed write).
  void append(std::span<const std::uint8_t> bytes);

  // Writes what is staged, then `header` over the file's first bytes.
  // Throws std::runtime_error.
  void finish(std::span<const std::uint8_t> header);

  std::uint64_t size() const { return written_ + staged_; }
  bool direct() const { return direct_; }

 private:
  void write_chunk();  // the full staging buffer, at written_
  void set_direct(bool on);

  struct Free {
    void operator()(std::uint8_t* p) const { std::free(p); }
  };
  int fd_;
  bool direct_ = false;
  std::unique_ptr<std::uint8_t, Free> buffer_;
  std::size_t staged_ = 0;     // bytes in buffer_
  std::uint64_t written_ = 0;  // file offset of buffer_[0]
};

}  // namespace tapstream
