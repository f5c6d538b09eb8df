#pragma once
// What the libFuzzer targets share: the input as a file in a private
// directory (the readers under test take paths), removed at exit.
// A target catches only the error type its reader documents; any other
// exception escapes, and libFuzzer reports it as a finding.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace tapstream::fuzzing {

class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "tapstream-fuzz-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline const ScratchDir& scratch() {
  static const ScratchDir dir;
  return dir;
}

// Writes `bytes` to `name` in the scratch directory and returns its path.
inline std::filesystem::path write_input(std::string_view name, const std::uint8_t* bytes,
                                         std::size_t size) {
  const std::filesystem::path file = scratch().path() / std::string(name);
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes), static_cast<std::streamsize>(size));
  out.close();
  if (!out) std::abort();
  return file;
}

}  // namespace tapstream::fuzzing
