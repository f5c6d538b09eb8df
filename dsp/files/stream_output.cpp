#include "dsp/files/stream_output.hpp"

#include <limits.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace tapstream {

namespace {

void put_le32(std::vector<unsigned char>& bytes, std::size_t at, std::uint32_t value) {
  if (at + 4 > bytes.size()) return;
  for (int i = 0; i < 4; ++i) bytes[at + std::size_t(i)] = (value >> (8 * i)) & 0xff;
}

std::uint32_t get_le32(const std::vector<unsigned char>& bytes, std::size_t at) {
  std::uint32_t value = 0;
  for (int i = 3; i >= 0; --i) value = (value << 8) | bytes[at + std::size_t(i)];
  return value;
}

// sox's "length unknown" on an unseekable WAV output; sox and libsndfile then read to the end.
constexpr std::uint32_t kWavUnknownLength = 0x7ffff000;

// Marks a RIFF/WAVE header's lengths unknown: the data chunk's, and RIFF's to match.
void mark_wav_lengths_unknown(std::vector<unsigned char>& bytes) {
  if (bytes.size() < 12 || std::memcmp(bytes.data(), "RIFF", 4) != 0) return;
  for (std::size_t at = 12; at + 8 <= bytes.size();) {
    const std::uint32_t size = get_le32(bytes, at + 4);
    if (std::memcmp(bytes.data() + at, "data", 4) == 0) {
      put_le32(bytes, at + 4, kWavUnknownLength);
      put_le32(bytes, 4, std::uint32_t(at + 8 - 8) + kWavUnknownLength);
      return;
    }
    at += 8 + size + (size & 1);
  }
}

}  // namespace

bool StreamOutput::can_stream(int container) {
  switch (container & SF_FORMAT_TYPEMASK) {
    case SF_FORMAT_WAV:
    case SF_FORMAT_WAVEX:
    case SF_FORMAT_AU:
    case SF_FORMAT_FLAC:
    case SF_FORMAT_RAW:
      return true;
    default:
      return false;
  }
}

std::string StreamOutput::streamable_names() {
  return "wav, au, flac, raw";
}

StreamOutput::StreamOutput(int fd, int container, const std::atomic<bool>* cancel)
    : fd_(fd), container_(container), cancel_(cancel) {
  io_.get_filelen = &StreamOutput::length_of;
  io_.seek = &StreamOutput::seek_to;
  io_.read = &StreamOutput::read_into;
  io_.write = &StreamOutput::write_from;
  io_.tell = &StreamOutput::tell;
}

sf_count_t StreamOutput::length_of(void* self) {
  auto* out = static_cast<StreamOutput*>(self);
  return out->sending_ ? out->sent_ : sf_count_t(out->held_.size());
}

sf_count_t StreamOutput::seek_to(sf_count_t offset, int whence, void* self) {
  auto* out = static_cast<StreamOutput*>(self);
  sf_count_t target = offset;
  if (whence == SEEK_CUR) target += out->position_;
  if (whence == SEEK_END) target += length_of(self);
  if (target < 0) return -1;
  out->position_ = target;
  return target;
}

sf_count_t StreamOutput::read_into(void*, sf_count_t, void*) {
  return 0;  // nothing can be read back from a stream
}

sf_count_t StreamOutput::write_from(const void* buffer, sf_count_t count, void* self) {
  return static_cast<StreamOutput*>(self)->write(static_cast<const unsigned char*>(buffer), count);
}

sf_count_t StreamOutput::tell(void* self) {
  return static_cast<StreamOutput*>(self)->position_;
}

sf_count_t StreamOutput::write(const unsigned char* bytes, sf_count_t count) {
  if (count <= 0) return 0;
  if (!sending_) {
    const auto end = std::size_t(position_ + count);
    if (held_.size() < end) held_.resize(end, 0);
    std::memcpy(held_.data() + position_, bytes, std::size_t(count));
    position_ += count;
    if (held_.size() > kHeldBytes) send_held(true);
    return error_.empty() ? count : 0;
  }
  // A rewrite of bytes already sent cannot reach the reader: dropped.
  sf_count_t skip = std::clamp<sf_count_t>(sent_ - position_, 0, count);
  if (position_ > sent_) {
    // A gap (libsndfile does not leave any): filled with zeros.
    const std::vector<unsigned char> zeros(std::size_t(position_ - sent_), 0);
    if (!send(zeros.data(), zeros.size())) return 0;
  }
  if (skip < count && !send(bytes + skip, std::size_t(count - skip))) return 0;
  position_ += count;
  return count;
}

bool StreamOutput::send(const unsigned char* bytes, std::size_t count) {
  while (count > 0 && error_.empty()) {
    std::size_t chunk = count;
    if (cancel_ != nullptr) {
      // Waits for room by polling, so that a cancel ends the wait; then
      // writes no more than PIPE_BUF, which a pipe with room takes without
      // blocking (the descriptor may be shared: it is not made non-blocking).
      pollfd room{fd_, POLLOUT, 0};
      const int ready = ::poll(&room, 1, kPollIntervalMs);
      if (cancel_->load(std::memory_order_relaxed)) {
        error_ = "interrupted";
        break;
      }
      if (ready == 0 || (ready < 0 && errno == EINTR)) continue;
      chunk = std::min<std::size_t>(count, PIPE_BUF);
    }
    const ssize_t n = ::write(fd_, bytes, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      error_ = std::strerror(errno);
      break;
    }
    bytes += n;
    count -= std::size_t(n);
    sent_ += n;
  }
  return error_.empty();
}

void StreamOutput::send_held(bool mark_lengths_unknown) {
  if (sending_) return;
  if (mark_lengths_unknown) {
    switch (container_ & SF_FORMAT_TYPEMASK) {
      case SF_FORMAT_WAV:
      case SF_FORMAT_WAVEX:
        mark_wav_lengths_unknown(held_);
        break;
      case SF_FORMAT_AU:  // big-endian data size at byte 8; all ones means unknown
        if (held_.size() >= 12) std::fill(held_.begin() + 8, held_.begin() + 12, 0xff);
        break;
      default:
        break;
    }
  }
  sending_ = true;
  send(held_.data(), held_.size());
  held_.clear();
  held_.shrink_to_fit();
}

void StreamOutput::finish() {
  send_held(false);
  if (!error_.empty()) throw std::runtime_error("write failed: " + error_);
}

}  // namespace tapstream
