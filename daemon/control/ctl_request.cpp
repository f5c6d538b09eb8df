#include "daemon/control/ctl_request.hpp"

#include <optional>
#include <vector>

#include "daemon/control/control_socket.hpp"
#include "daemon/control/json.hpp"
#include "daemon/control/request_text.hpp"

namespace tapstream {
namespace {

constexpr std::string_view known_commands =
    "status, load CHANNEL|all FILE, load path I O FILE, load matrix FILE, trace [RECORDS], reload, "
    "stop";

// The first word of `text`, and the rest (trimmed) in `rest`.
std::string_view first_word(std::string_view text, std::string_view& rest) {
  text = trim(text);
  const auto space = text.find_first_of(" \t");
  rest = space == std::string_view::npos ? std::string_view() : trim(text.substr(space + 1));
  return text.substr(0, space);
}

// A channel, input or output number as the text commands write it.
std::optional<std::uint64_t> number(std::string_view text) {
  if (text.empty() || text.size() > 6 || text.find_first_not_of("0123456789") != text.npos)
    return std::nullopt;
  return std::stoull(std::string(text));
}

std::string absolute_file(std::string_view file, std::string_view usage) {
  if (file.empty()) throw CtlSyntaxError("usage: " + std::string(usage));
  if (file.front() != '/') {
    throw CtlSyntaxError("file '" + shorten(file) + "' is not an absolute path");
  }
  return std::string(file);
}

Json load_request(std::string_view arguments) {
  std::string_view rest;
  const std::string_view what = first_word(arguments, rest);
  if (what == "path") {
    constexpr std::string_view usage = "load path INPUT OUTPUT FILE";
    std::string_view after_input, file;
    const std::string_view input_text = first_word(rest, after_input);
    const std::string_view output_text = first_word(after_input, file);
    if (file.empty()) throw CtlSyntaxError("usage: " + std::string(usage));
    const auto input = number(input_text);
    const auto output = number(output_text);
    if (!input || !output) {
      throw CtlSyntaxError("load path: '" +
                           shorten(std::string(input_text) + " " + std::string(output_text)) +
                           "' is not an input and an output number (from 0)");
    }
    return {{"request", "load"},
            {"input", *input},
            {"output", *output},
            {"file", absolute_file(file, usage)}};
  }
  if (what == "matrix") {
    return {{"request", "load"},
            {"matrix", absolute_file(rest, "load matrix FILE (an absolute path)")}};
  }
  constexpr std::string_view usage = "load CHANNEL|all FILE";
  if (what.empty() || rest.empty()) throw CtlSyntaxError("usage: " + std::string(usage));
  Json request = {{"request", "load"}};
  if (what == "all") {
    request["channel"] = "all";
  } else if (const auto channel = number(what)) {
    request["channel"] = *channel;
  } else {
    throw CtlSyntaxError("channel '" + shorten(what) +
                         "' is neither 'all' nor a channel number (from 0)");
  }
  request["file"] = absolute_file(rest, usage);
  return request;
}

}  // namespace

std::string ctl_request_json(std::string_view command) {
  std::string_view rest;
  const std::string_view verb = first_word(command, rest);
  if (verb.empty())
    throw CtlSyntaxError("empty command (known: " + std::string(known_commands) + ")");
  if (verb == "status" || verb == "reload" || verb == "stop") {
    if (!rest.empty()) throw CtlSyntaxError(std::string(verb) + " takes no arguments");
    return json_line(Json{{"request", verb == "status" ? "get_status" : std::string(verb)}});
  }
  if (verb == "load") return json_line(load_request(rest));
  if (verb == "trace") {
    Json request = {{"request", "get_trace"}};
    if (!rest.empty()) {
      const auto records = number(rest);
      if (!records) throw CtlSyntaxError("usage: trace [RECORDS] (RECORDS a number from 1)");
      request["records"] = *records;
    }
    return json_line(request);
  }
  throw CtlSyntaxError("unknown command '" + shorten(verb) +
                       "' (known: " + std::string(known_commands) + ")");
}

std::string ctl_reply_text(std::string_view api_reply) {
  const Json reply = Json::parse(api_reply, nullptr, /*allow_exceptions=*/false);
  if (reply.is_discarded() || !reply.is_object() || !reply.contains("ok")) {
    return json_line(
        Json{{"ok", false}, {"error", "not a reply of the API: " + shorten(api_reply)}});
  }
  if (reply["ok"] == true) {
    Json printed = {{"ok", true}};
    if (const auto result = reply.find("result"); result != reply.end() && result->is_object()) {
      printed.update(*result);
    }
    return json_line(printed);
  }
  const Json error = reply.value("error", Json::object());
  Json printed = {{"ok", false}};
  if (error.is_object()) {
    printed["error"] = error.value("message", std::string("(no message)"));
    printed["type"] = error.value("type", std::string("internal"));
  } else {
    printed["error"] = error.is_string() ? error.get<std::string>() : json_line(error);
  }
  return json_line(printed);
}

std::string ctl_exchange(const std::filesystem::path& socket, std::string_view command,
                         std::chrono::milliseconds timeout) {
  std::string request;
  try {
    request = ctl_request_json(command);
  } catch (const CtlSyntaxError& e) {
    return json_line(Json{{"ok", false}, {"error", e.what()}, {"type", "bad_request"}});
  }
  return ctl_reply_text(control_request(socket, request, timeout));
}

}  // namespace tapstream
