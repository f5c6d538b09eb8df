#pragma once
// `tapstream ctl`'s text commands, written as the daemon's one request model
// (the JSON API, docs/api.md), and the API's reply printed as `ctl` always
// printed it. The daemon parses JSON requests only; its text spellings live
// here, on the client's side:
//
//   status                -> {"request":"get_status"}
//   load CHANNEL FILE     -> {"request":"load","channel":C,"file":FILE}
//   load all FILE         -> {"request":"load","channel":"all","file":FILE}
//   load path I O FILE    -> {"request":"load","input":I,"output":O,"file":FILE}
//   load matrix FILE      -> {"request":"load","matrix":FILE}
//   reload, stop          -> {"request":"reload"}, {"request":"stop"}
//
// FILE is the rest of the line (spaces allowed); numbers count from 0. The
// printed reply: {"ok":true, ...the result} ({"ok":true,"message":...} for
// load, reload and stop; the status document for status), or
// {"ok":false,"error":MESSAGE,"type":TYPE}.

#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tapstream {

// A text command that is none of the spellings above; what() says why.
class CtlSyntaxError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// The JSON request line for one text command. Throws CtlSyntaxError.
std::string ctl_request_json(std::string_view command);

// The line `ctl` prints for the API's reply line.
std::string ctl_reply_text(std::string_view api_reply);

// What `tapstream ctl` does: sends `command` (a text command) to the socket
// and returns the printed reply. A syntax error becomes an "ok":false reply
// without reaching the daemon; an unreachable daemon throws
// ControlSocketError.
std::string ctl_exchange(const std::filesystem::path& socket, std::string_view command,
                         std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace tapstream
