#include "daemon/device_list.hpp"

#include <algorithm>
#include <charconv>
#include <stdexcept>

namespace tapstream {

namespace {

std::string_view trimmed(std::string_view text) {
  const auto space = [](char c) { return c == ' ' || c == '\t'; };
  while (!text.empty() && space(text.front())) text.remove_prefix(1);
  while (!text.empty() && space(text.back())) text.remove_suffix(1);
  return text;
}

void add_ordinal(DeviceList& list, long long ordinal, std::string_view as_written) {
  // 255: far beyond any host's GPUs, and a bound that keeps the int exact.
  if (ordinal < 0 || ordinal > 255) {
    throw std::invalid_argument("'" + std::string(as_written) +
                                "' is not a GPU number (0, 1, ... as nvidia-smi counts them)");
  }
  if (std::find(list.listed.begin(), list.listed.end(), int(ordinal)) != list.listed.end()) {
    throw std::invalid_argument("GPU " + std::to_string(ordinal) +
                                " is named twice (one engine per GPU)");
  }
  list.listed.push_back(int(ordinal));
}

}  // namespace

std::string DeviceList::text() const {
  if (all) return "all";
  std::string text;
  for (const int ordinal : listed) {
    if (!text.empty()) text += ",";
    text += std::to_string(ordinal);
  }
  return text;
}

DeviceList parse_device_list(std::string_view text) {
  DeviceList list;
  if (trimmed(text) == "all") {
    list.all = true;
    return list;
  }
  if (trimmed(text).empty()) {
    throw std::invalid_argument("an empty list of GPUs (\"all\", or numbers such as 0,1)");
  }
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    const std::string_view item =
        trimmed(text.substr(start, comma == std::string_view::npos ? text.npos : comma - start));
    if (item.empty()) {
      throw std::invalid_argument("'" + std::string(text) +
                                  "' has an empty item (\"all\", or numbers such as 0,1)");
    }
    long long ordinal = -1;
    const auto [end, error] = std::from_chars(item.data(), item.data() + item.size(), ordinal);
    if (error != std::errc() || end != item.data() + item.size()) ordinal = -1;
    add_ordinal(list, ordinal, item);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return list;
}

DeviceList device_list_of(const std::vector<long long>& ordinals) {
  if (ordinals.empty()) {
    throw std::invalid_argument("an empty list of GPUs (\"all\", or numbers such as [0, 1])");
  }
  DeviceList list;
  for (const long long ordinal : ordinals) add_ordinal(list, ordinal, std::to_string(ordinal));
  return list;
}

std::vector<int> resolve_device_list(const DeviceList& list, int count) {
  if (count <= 0) throw std::invalid_argument("there is no GPU");
  std::vector<int> ordinals;
  if (list.all || list.empty()) {
    for (int d = 0; d < count; ++d) ordinals.push_back(d);
    return ordinals;
  }
  for (const int ordinal : list.listed) {
    if (ordinal >= count) {
      throw std::invalid_argument("GPU " + std::to_string(ordinal) + " does not exist: there " +
                                  (count == 1 ? "is 1 (0)"
                                              : "are " + std::to_string(count) + " (0.." +
                                                    std::to_string(count - 1) + ")"));
    }
    ordinals.push_back(ordinal);
  }
  return ordinals;
}

}  // namespace tapstream
