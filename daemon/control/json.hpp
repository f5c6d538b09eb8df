#pragma once
// JSON as tapstream writes it: nlohmann's ordered_json (keys stay in the order
// they were set, so "ok" comes first in every control reply), dumped on one
// line. Bytes that are not valid UTF-8 (a file name can hold any) become
// U+FFFD, so that any value makes valid JSON; NaN and infinity become null.

#include <nlohmann/json.hpp>
#include <string>

namespace tapstream {

using Json = nlohmann::ordered_json;

inline std::string json_line(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace tapstream
