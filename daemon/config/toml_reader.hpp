#pragma once
// Reading TOML tables with errors that name the file, the dotted key, the value
// and the reason ("live.toml: filter.max_taps = 0: must be between 1 and ...").
// Shared by the daemon's configuration and the routing-matrix files.

#include <toml++/toml.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/config/config.hpp"

namespace tapstream {
namespace toml_reading {

namespace fs = std::filesystem;

inline std::string join(const std::vector<std::string_view>& words) {
  std::string out;
  for (auto word : words) {
    if (!out.empty()) out += ", ";
    out += word;
  }
  return out;
}

inline std::string render(const toml::node& node) {
  std::ostringstream out;
  if (node.is_table()) return "{...}";
  node.visit([&](const auto& value) { out << value; });
  std::string text = out.str();
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

inline const char* type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    default:
      return "a date/time";
  }
}

// Reads one table's keys, turning every problem into a ConfigError that names
// the file, the dotted key and the value.
class Reader {
 public:
  Reader(std::string name, fs::path base_dir)
      : name_(std::move(name)), base_dir_(std::move(base_dir)) {}

  [[noreturn]] void fail(std::string_view message) const {
    throw ConfigError(name_ + ": " + std::string(message));
  }
  [[noreturn]] void fail(std::string_view key, const toml::node& value,
                         std::string_view reason) const {
    fail(std::string(key) + " = " + render(value) + ": " + std::string(reason));
  }

  static std::string qualified(std::string_view table, std::string_view key) {
    return table.empty() ? std::string(key) : std::string(table) + "." + std::string(key);
  }

  void check_known(const toml::table& table, std::string_view table_name,
                   std::initializer_list<std::string_view> known) const {
    check_known(table, table_name, std::vector<std::string_view>(known));
  }
  void check_known(const toml::table& table, std::string_view table_name,
                   const std::vector<std::string_view>& known) const {
    for (const auto& [key, value] : table) {
      bool found = false;
      for (auto name : known) found = found || key.str() == name;
      if (!found) {
        const std::string where =
            table_name.empty() ? std::string() : " in [" + std::string(table_name) + "]";
        fail("unknown key '" + std::string(key.str()) + "'" + where +
             " (known keys: " + join(known) + ")");
      }
    }
  }

  const toml::table* table(const toml::table& parent, std::string_view key) const {
    const toml::node* node = parent.get(key);
    if (node == nullptr) return nullptr;
    if (!node->is_table())
      fail(key, *node, std::string("expected a table, got ") + type_name(*node));
    return node->as_table();
  }

  std::optional<std::int64_t> integer(const toml::table& table, std::string_view table_name,
                                      std::string_view key, std::int64_t low,
                                      std::int64_t high) const {
    const toml::node* node = table.get(key);
    if (node == nullptr) return std::nullopt;
    const std::string name = qualified(table_name, key);
    if (!node->is_integer())
      fail(name, *node, std::string("expected an integer, got ") + type_name(*node));
    const std::int64_t value = node->as_integer()->get();
    if (value < low || value > high) {
      fail(name, *node, "must be between " + std::to_string(low) + " and " + std::to_string(high));
    }
    return value;
  }

  std::optional<double> number(const toml::table& table, std::string_view table_name,
                               std::string_view key, double low, double high) const {
    const toml::node* node = table.get(key);
    if (node == nullptr) return std::nullopt;
    const std::string name = qualified(table_name, key);
    double value = 0;
    if (node->is_integer()) {
      value = static_cast<double>(node->as_integer()->get());
    } else if (node->is_floating_point()) {
      value = node->as_floating_point()->get();
    } else {
      fail(name, *node, std::string("expected a number, got ") + type_name(*node));
    }
    if (!std::isfinite(value)) fail(name, *node, "must be a finite number");
    if (value < low || value > high) {
      std::ostringstream range;
      range << "must be between " << low << " and " << high;
      fail(name, *node, range.str());
    }
    return value;
  }

  std::optional<bool> boolean(const toml::table& table, std::string_view table_name,
                              std::string_view key) const {
    const toml::node* node = table.get(key);
    if (node == nullptr) return std::nullopt;
    if (!node->is_boolean()) {
      fail(qualified(table_name, key), *node,
           std::string("expected true or false, got ") + type_name(*node));
    }
    return node->as_boolean()->get();
  }

  std::optional<std::string> string(const toml::table& table, std::string_view table_name,
                                    std::string_view key, bool allow_empty = false) const {
    const toml::node* node = table.get(key);
    if (node == nullptr) return std::nullopt;
    const std::string name = qualified(table_name, key);
    if (!node->is_string())
      fail(name, *node, std::string("expected a string, got ") + type_name(*node));
    std::string value = node->as_string()->get();
    if (value.empty() && !allow_empty) fail(name, *node, "must not be empty");
    if (value.find('\0') != std::string::npos)
      fail(name, *node, "must not contain a NUL character");
    return value;
  }

  std::string one_of(const toml::table& table, std::string_view table_name, std::string_view key,
                     std::initializer_list<std::string_view> allowed, std::string fallback) const {
    auto value = string(table, table_name, key);
    if (!value) return fallback;
    for (auto word : allowed) {
      if (*value == word) return *value;
    }
    fail(qualified(table_name, key), *table.get(key), "must be one of " + join(allowed));
  }

  fs::path resolve(const std::string& path) const {
    fs::path p(path);
    if (p.is_relative()) p = base_dir_ / p;
    return p.lexically_normal();
  }

  void require_file(std::string_view key, const toml::node& node, const fs::path& path) const {
    std::error_code error;
    const auto status = fs::status(path, error);
    if (!fs::exists(status)) fail(key, node, "no such file (" + path.string() + ")");
    if (!fs::is_regular_file(status)) fail(key, node, "not a regular file (" + path.string() + ")");
  }

  void require_parent_directory(std::string_view key, const toml::node& node,
                                const fs::path& path) const {
    std::error_code error;
    const fs::path parent = path.parent_path();
    if (!fs::is_directory(parent, error)) {
      fail(key, node, "directory " + parent.string() + " does not exist");
    }
  }

 private:
  std::string name_;
  fs::path base_dir_;
};

// Parses TOML text, turning a syntax error into a ConfigError "name:line:column: what".
inline toml::table parse_toml(std::string_view text, std::string_view name) {
  try {
    return toml::parse(text, std::string(name));
  } catch (const toml::parse_error& error) {
    const auto& begin = error.source().begin;
    throw ConfigError(std::string(name) + ":" + std::to_string(begin.line) + ":" +
                      std::to_string(begin.column) + ": " + std::string(error.description()));
  }
}

}  // namespace toml_reading
}  // namespace tapstream
