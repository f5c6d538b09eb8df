#include "dsp/files/staged_file_writer.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>

#include "dsp/model/large_memory.hpp"

namespace tapstream {

namespace {

// pwrite of all of `count` bytes at `offset`; throws std::runtime_error.
void write_at(int fd, const std::uint8_t* bytes, std::size_t count, std::uint64_t offset) {
  std::size_t done = 0;
  while (done < count) {
    const ssize_t n = ::pwrite(fd, bytes + done, count - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(std::strerror(errno));
    done += static_cast<std::size_t>(n);
  }
}

}  // namespace

StagedFileWriter::StagedFileWriter(int fd, bool direct) : fd_(fd) {
  // On huge pages: four page faults for the chunk instead of 2048.
  buffer_.reset(static_cast<std::uint8_t*>(allocate_large(kChunkBytes, kAlignment)));
  if (direct) set_direct(true);
}

StagedFileWriter::~StagedFileWriter() {
  if (direct_) set_direct(false);  // the descriptor goes back as it came
}

void StagedFileWriter::set_direct(bool on) {
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags < 0) return;
  if (::fcntl(fd_, F_SETFL, on ? flags | O_DIRECT : flags & ~O_DIRECT) == 0) direct_ = on;
}

void StagedFileWriter::write_chunk() {
  if (direct_) {
    // Buffer, offset and length are all multiples of kAlignment.
    const ssize_t n = ::pwrite(fd_, buffer_.get(), kChunkBytes, static_cast<off_t>(written_));
    if (n == static_cast<ssize_t>(kChunkBytes)) {
      written_ += kChunkBytes;
      staged_ = 0;
      return;
    }
    // Refused (EINVAL: not for this file system) or cut short: the page
    // cache from here on, from where this write began.
    set_direct(false);
    direct_ = false;
  }
  write_at(fd_, buffer_.get(), kChunkBytes, written_);
  written_ += kChunkBytes;
  staged_ = 0;
}

void StagedFileWriter::append(std::span<const std::uint8_t> bytes) {
  while (!bytes.empty()) {
    const std::size_t n = std::min(bytes.size(), kChunkBytes - staged_);
    std::memcpy(buffer_.get() + staged_, bytes.data(), n);
    staged_ += n;
    bytes = bytes.subspan(n);
    if (staged_ == kChunkBytes) write_chunk();
  }
}

void StagedFileWriter::finish(std::span<const std::uint8_t> header) {
  if (direct_) {
    // The last chunk's whole sectors go direct too: through the page cache
    // they cost a copy and then the fsync before the rename waits for them
    // (up to a chunk, 0.28 s of an identity run on the 2-core VM).
    const std::size_t whole = staged_ / kAlignment * kAlignment;
    if (whole > 0 && ::pwrite(fd_, buffer_.get(), whole, static_cast<off_t>(written_)) ==
                         static_cast<ssize_t>(whole)) {
      std::memmove(buffer_.get(), buffer_.get() + whole, staged_ - whole);
      written_ += whole;
      staged_ -= whole;
    }
    // Refused or cut short: all of it through the page cache, from written_.
    set_direct(false);
  }
  write_at(fd_, buffer_.get(), staged_, written_);
  written_ += staged_;
  staged_ = 0;
  write_at(fd_, header.data(), header.size(), 0);
}

}  // namespace tapstream
