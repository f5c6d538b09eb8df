#pragma once
// One `load` of the control plane: what it replaces (a channel, all channels,
// a path, a whole matrix) and the file it comes from. The control socket's
// text and JSON forms and the web API's uploads are parsed into it; the
// Swapper (daemon/control/swapper.hpp) carries it out.

#include <cstddef>
#include <filesystem>
#include <utility>

namespace tapstream {

struct LoadRequest {
  enum class Target {
    channel,       // channel `input` (the path input -> input)
    all_channels,  // every channel (a filter per channel only)
    path,          // the path input -> output
    matrix,        // a whole matrix file with the running paths
  };
  Target target = Target::all_channels;
  std::size_t input = 0;
  std::size_t output = 0;
  std::filesystem::path file;

  static LoadRequest channel(std::size_t c, std::filesystem::path file) {
    return {Target::channel, c, c, std::move(file)};
  }
  static LoadRequest all(std::filesystem::path file) {
    return {Target::all_channels, 0, 0, std::move(file)};
  }
  static LoadRequest path(std::size_t input, std::size_t output, std::filesystem::path file) {
    return {Target::path, input, output, std::move(file)};
  }
  static LoadRequest whole_matrix(std::filesystem::path file) {
    return {Target::matrix, 0, 0, std::move(file)};
  }
};

}  // namespace tapstream
