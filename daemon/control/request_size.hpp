#pragma once
// The one size bound of a control request, whichever way it comes: a
// websocket message (WebsocketServerOptions::max_message_bytes) or a line on
// the Unix control socket (ControlServer). The largest request is an
// upload_filter of ControlApi::max_upload_bytes in base64 (4/3 of it) with
// its JSON around it.

#include <cstddef>

namespace tapstream {

inline constexpr std::size_t max_control_request_bytes = std::size_t{12} << 20;

}  // namespace tapstream
