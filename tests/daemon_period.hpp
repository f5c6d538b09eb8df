#pragma once
// The daemon's status as the period tests read it (jack_period_change_test,
// pipewire_jack_test): `tapstream ctl status` through its control socket, and
// a wait for a period it has followed.

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tests/process_support.hpp"
#include "tests/wait_for.hpp"

namespace tapstream::testing {

// `tapstream ctl status` of the daemon on `socket` (null when it does not answer).
inline nlohmann::json status_of(const std::filesystem::path& socket,
                                const std::filesystem::path& dir) {
  {
    Child ctl({TAPSTREAM_BINARY, "ctl", "--socket", socket.string(), "status"}, dir / "ctl.out",
              dir / "ctl.err");
    ctl.wait_for(std::chrono::seconds(20));
  }
  return nlohmann::json::parse(read_text(dir / "ctl.out"), nullptr, false);
}

// Waits until the daemon's status shows `period` frames and `replans`
// re-plans done.
inline ::testing::AssertionResult wait_for_period(const std::filesystem::path& socket,
                                                  const std::filesystem::path& dir,
                                                  std::size_t period, std::uint64_t replans) {
  nlohmann::json status;
  return wait_until(
      long_wait,
      [&] {
        status = status_of(socket, dir);
        return status.is_object() && status.value("period_frames", 0u) == period &&
               status.value("replans", 0u) == replans && status.value("block_frames", 0u) == period;
      },
      [&] { return "status: " + status.dump(); }, std::chrono::milliseconds(100));
}

}  // namespace tapstream::testing
