#pragma once
// Pieces of a request as the control plane reads and quotes them: trimmed of
// blanks, and shortened to 64 characters when a message names them, so that
// no reply or log line echoes a long request back to its sender.

#include <string>
#include <string_view>

namespace tapstream {

inline std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r");
  return text.substr(first, last - first + 1);
}

inline std::string shorten(std::string_view text) {
  return text.size() <= 64 ? std::string(text) : std::string(text.substr(0, 61)) + "...";
}

}  // namespace tapstream
