#pragma once
// A tiny JSON writer for the control socket's one-line replies. It escapes
// every string (quotes, backslashes, control characters) and replaces bytes
// that are not valid UTF-8 with U+FFFD, so that any file name makes valid JSON.
//
//   JsonWriter json;
//   json.begin_object().field("ok", true).field("file", path).end_object();
//   send(json.str());

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace tapstream {

class JsonWriter {
 public:
  JsonWriter& begin_object() { return open('{'); }
  JsonWriter& end_object() { return close('}'); }
  JsonWriter& begin_array() { return open('['); }
  JsonWriter& end_array() { return close(']'); }

  // The key of the next value inside an object.
  JsonWriter& key(std::string_view name) {
    separate();
    append_string(name);
    out_ += ':';
    after_key_ = true;
    return *this;
  }

  JsonWriter& value(std::string_view text) {
    separate();
    append_string(text);
    return *this;
  }
  JsonWriter& value(const char* text) { return value(std::string_view(text)); }
  JsonWriter& value(const std::string& text) { return value(std::string_view(text)); }
  JsonWriter& value(bool flag) {
    separate();
    out_ += flag ? "true" : "false";
    return *this;
  }
  JsonWriter& value(double number) {
    separate();
    if (!std::isfinite(number)) {
      out_ += "null";  // JSON has no NaN or infinity
    } else {
      char buffer[32];
      std::snprintf(buffer, sizeof buffer, "%.10g", number);
      out_ += buffer;
    }
    return *this;
  }
  template <
      typename Integer,
      std::enable_if_t<std::is_integral_v<Integer> && !std::is_same_v<Integer, bool>, int> = 0>
  JsonWriter& value(Integer number) {
    separate();
    out_ += std::to_string(number);
    return *this;
  }
  JsonWriter& null() {
    separate();
    out_ += "null";
    return *this;
  }

  template <typename T>
  JsonWriter& field(std::string_view name, const T& v) {
    key(name);
    return value(v);
  }

  const std::string& str() const { return out_; }

  // `text` as a JSON string literal, quotes included.
  static std::string quote(std::string_view text) {
    JsonWriter json;
    json.value(text);
    return json.str();
  }

 private:
  JsonWriter& open(char bracket) {
    separate();
    out_ += bracket;
    first_.push_back(true);
    return *this;
  }
  JsonWriter& close(char bracket) {
    out_ += bracket;
    if (!first_.empty()) first_.pop_back();
    return *this;
  }
  // Writes the comma between elements (but not between a key and its value).
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (first_.empty()) return;
    if (!first_.back()) out_ += ',';
    first_.back() = false;
  }

  void append_string(std::string_view text) {
    out_ += '"';
    std::size_t i = 0;
    while (i < text.size()) {
      const auto byte = static_cast<unsigned char>(text[i]);
      if (byte == '"' || byte == '\\') {
        out_ += '\\';
        out_ += static_cast<char>(byte);
      } else if (byte == '\n') {
        out_ += "\\n";
      } else if (byte == '\r') {
        out_ += "\\r";
      } else if (byte == '\t') {
        out_ += "\\t";
      } else if (byte < 0x20 || byte == 0x7f) {
        char buffer[8];
        std::snprintf(buffer, sizeof buffer, "\\u%04x", byte);
        out_ += buffer;
      } else if (byte < 0x80) {
        out_ += static_cast<char>(byte);
      } else {
        const std::size_t length = utf8_sequence_length(text.substr(i));
        if (length == 0) {
          out_ += "\xef\xbf\xbd";  // U+FFFD for a byte that starts no valid sequence
          ++i;
          continue;
        }
        out_.append(text.data() + i, length);
        i += length;
        continue;
      }
      ++i;
    }
    out_ += '"';
  }

  // Length of the valid UTF-8 sequence starting `text` (2 to 4), or 0.
  static std::size_t utf8_sequence_length(std::string_view text) {
    const auto at = [&](std::size_t k) { return static_cast<unsigned char>(text[k]); };
    const unsigned char lead = at(0);
    std::size_t length = 0;
    std::uint32_t code = 0;
    if (lead >= 0xc2 && lead <= 0xdf) {
      length = 2;
      code = lead & 0x1f;
    } else if (lead >= 0xe0 && lead <= 0xef) {
      length = 3;
      code = lead & 0x0f;
    } else if (lead >= 0xf0 && lead <= 0xf4) {
      length = 4;
      code = lead & 0x07;
    } else {
      return 0;
    }
    if (text.size() < length) return 0;
    for (std::size_t k = 1; k < length; ++k) {
      if ((at(k) & 0xc0) != 0x80) return 0;
      code = (code << 6) | (at(k) & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid.
    if ((length == 3 && code < 0x800) || (length == 4 && code < 0x10000)) return 0;
    if ((code >= 0xd800 && code <= 0xdfff) || code > 0x10ffff) return 0;
    return length;
  }

  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

}  // namespace tapstream
