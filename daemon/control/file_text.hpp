#pragma once
// Messages about a file the daemon read, without the file's text. A loader
// quotes the line it cannot read ("f.txt:3: cannot parse 'root:*:...' as a
// number"; a TOML parser "m.toml:1:5: ... 'r'"), which is right on a command
// line, but the daemon's log and the control API's replies are readable by
// every API client, who must not read a file through an error. The file and
// the line number stay; the quoted text (from a quote that follows a space to
// the last quote of its kind) goes. Only a message that gives a line number
// ("file:N:") quotes a line; one that quotes a value it read as a key ("m.toml:
// path[3].file = 'x.txt': no such file") is left as it is.

#include <cctype>
#include <cstddef>
#include <string>

namespace tapstream {

inline std::string without_file_text(const std::string& message) {
  bool line_number = false;  // ":N:" seen before the quote
  for (std::size_t i = 0; i < message.size(); ++i) {
    const char c = message[i];
    if (c == ':' && i + 1 < message.size() &&
        std::isdigit(static_cast<unsigned char>(message[i + 1]))) {
      std::size_t end = i + 1;
      while (end < message.size() && std::isdigit(static_cast<unsigned char>(message[end]))) ++end;
      if (end < message.size() && message[end] == ':') line_number = true;
    }
    if (!line_number || (c != '\'' && c != '"') || (i > 0 && message[i - 1] != ' ')) continue;
    const auto close = message.rfind(c);
    if (close == i) continue;
    return message.substr(0, i) + "(text not shown)" + message.substr(close + 1);
  }
  return message;
}

}  // namespace tapstream
