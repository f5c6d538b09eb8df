#pragma once
// Messages about a file the daemon read, without the file's text. A loader
// quotes what it cannot read ("f.txt:3: cannot parse 'root:*:...' as a
// number"), which is right on a command line, but the daemon's log and the
// control API's replies are readable by every API client, who must not read
// a file through an error. The file and the line number stay; the quoted
// text (from a quote that follows a space to the last quote of its kind)
// goes.

#include <cstddef>
#include <string>

namespace tapstream {

inline std::string without_file_text(const std::string& message) {
  for (std::size_t i = 0; i < message.size(); ++i) {
    const char c = message[i];
    if ((c != '\'' && c != '"') || (i > 0 && message[i - 1] != ' ')) continue;
    const auto close = message.rfind(c);
    if (close == i) continue;
    return message.substr(0, i) + "(text not shown)" + message.substr(close + 1);
  }
  return message;
}

}  // namespace tapstream
