#pragma once
// Which GPUs a job spreads over: `--devices all|0,1` (process, bench capacity)
// and `[engine] devices = "all"` or `[0, 1]` (run). Parsed where it is read
// (parse_device_list: the syntax), resolved against the GPUs that are there
// when the engines are made (resolve_device_list: the ordinals), so that a
// bad list is refused with its culprit before any work.

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace tapstream {

struct DeviceList {
  bool all = false;         // every visible GPU
  std::vector<int> listed;  // else these ordinals, in the order given (distinct)

  bool empty() const { return !all && listed.empty(); }
  // "all", or the ordinals as written: "0,1".
  std::string text() const;
  bool operator==(const DeviceList&) const = default;
};

// "all", or ordinals separated by commas ("0,1", "1, 0"). Throws
// std::invalid_argument naming the culprit: an empty list or item, something
// that is not an ordinal ("x", "-1", "1.5"), an ordinal twice ("0,0").
DeviceList parse_device_list(std::string_view text);

// The same for a list of ordinals given as numbers (a TOML array).
DeviceList device_list_of(const std::vector<long long>& ordinals);

// The ordinals `list` names among `count` visible GPUs (0..count-1): every
// one for "all" (and for an empty list: nothing was asked). Throws std::invalid_argument naming the
// ordinal that is not there ("GPU 7 does not exist: there are 2 (0..1)"), or saying that there is
// no GPU at all.
std::vector<int> resolve_device_list(const DeviceList& list, int count);

}  // namespace tapstream
