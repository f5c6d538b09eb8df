#include "daemon/commands/job_list.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <stdexcept>
#include <string>

#include "daemon/config/gain_range.hpp"
#include "dsp/files/regular_file.hpp"

namespace tapstream {

namespace {

namespace fs = std::filesystem;

// A job list of 256 MiB holds millions of rows; a larger file is a mistake.
constexpr std::uint64_t kMaxJobListBytes = std::uint64_t(256) << 20;

struct Record {
  std::size_t line = 0;  // where it starts
  std::vector<std::string> fields;
};

// RFC 4180 records. A record that is one empty field (a blank line) is
// dropped.
std::vector<Record> parse_csv(const std::string& text, const std::string& name) {
  std::vector<Record> records;
  std::size_t at = text.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;
  std::size_t line = 1;
  while (at < text.size()) {
    Record record;
    record.line = line;
    std::string field;
    bool record_done = false;
    while (!record_done) {
      field.clear();
      if (at < text.size() && text[at] == '"') {
        const std::size_t opened = line;
        ++at;
        for (;;) {
          if (at >= text.size()) {
            throw std::invalid_argument(name + ":" + std::to_string(opened) +
                                        ": a quoted field is never closed");
          }
          const char c = text[at++];
          if (c == '"') {
            if (at < text.size() && text[at] == '"') {
              field += '"';
              ++at;
              continue;
            }
            break;
          }
          if (c == '\n') ++line;
          field += c;
        }
        if (at < text.size() && text[at] != ',' && text[at] != '\n' &&
            !(text[at] == '\r' && at + 1 < text.size() && text[at + 1] == '\n')) {
          throw std::invalid_argument(name + ":" + std::to_string(line) +
                                      ": text after a closing quote (write a quote inside a "
                                      "quoted field as \"\")");
        }
      } else {
        while (at < text.size() && text[at] != ',' && text[at] != '\n' &&
               !(text[at] == '\r' && at + 1 < text.size() && text[at + 1] == '\n')) {
          if (text[at] == '"') {
            throw std::invalid_argument(name + ":" + std::to_string(line) +
                                        ": a quote inside an unquoted field (quote the whole "
                                        "field and write the quote as \"\")");
          }
          field += text[at++];
        }
      }
      record.fields.push_back(field);
      if (at >= text.size()) {
        record_done = true;
      } else if (text[at] == ',') {
        ++at;
      } else {
        at += text[at] == '\r' ? 2 : 1;
        ++line;
        record_done = true;
      }
    }
    if (record.fields.size() == 1 && record.fields[0].empty()) continue;
    records.push_back(std::move(record));
  }
  return records;
}

std::string trimmed_lowercase(const std::string& text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  std::string out = text.substr(first, text.find_last_not_of(" \t") - first + 1);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

double gain_from(const std::string& text, const std::string& where) {
  double value = 0.0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end || !std::isfinite(value)) {
    throw std::invalid_argument(where + ": gain_db '" + text + "' is not a number");
  }
  if (value < min_gain_db || value > max_gain_db) {
    throw std::invalid_argument(where + ": gain_db " + text + " is not between " +
                                std::to_string(int(min_gain_db)) + " and " +
                                std::to_string(int(max_gain_db)) + " dB");
  }
  return value;
}

}  // namespace

bool is_matrix_file(const fs::path& filter) {
  return trimmed_lowercase(filter.extension().string()) == ".toml";
}

std::vector<JobRow> read_job_list(const fs::path& csv) {
  const std::string name = csv.string();
  std::string text;
  try {
    RegularFile file(csv);
    text = file.read_all(kMaxJobListBytes, "for a job list");
  } catch (const RegularFileError& e) {
    throw std::invalid_argument(std::string("--jobs ") + e.what());
  }
  const std::vector<Record> records = parse_csv(text, name);
  if (records.empty()) {
    throw std::invalid_argument(name +
                                ": empty; the first line names the columns: input, "
                                "filter, output (and optionally gain_db)");
  }
  // The header: each known column once, in any order.
  constexpr std::array<const char*, 4> kColumns = {"input", "filter", "output", "gain_db"};
  std::array<std::optional<std::size_t>, 4> where{};
  const Record& header = records.front();
  for (std::size_t i = 0; i < header.fields.size(); ++i) {
    const std::string column = trimmed_lowercase(header.fields[i]);
    const auto known = std::find(kColumns.begin(), kColumns.end(), column);
    if (known == kColumns.end()) {
      throw std::invalid_argument(name + ":" + std::to_string(header.line) + ": unknown column '" +
                                  header.fields[i] +
                                  "' (the columns are input, filter, output and gain_db)");
    }
    auto& slot = where[std::size_t(known - kColumns.begin())];
    if (slot) {
      throw std::invalid_argument(name + ":" + std::to_string(header.line) + ": the column " +
                                  column + " is named twice");
    }
    slot = i;
  }
  for (std::size_t c = 0; c < 3; ++c) {
    if (!where[c]) {
      throw std::invalid_argument(name + ":" + std::to_string(header.line) +
                                  ": the header has no column '" + kColumns[c] +
                                  "' (it needs input, filter and output)");
    }
  }
  const fs::path folder = csv.parent_path();
  const auto resolve = [&folder](const std::string& path) {
    const fs::path p(path);
    if (p.is_absolute()) return p;
    // "-" in a job list is a file of that name, never standard input or output.
    return folder.empty() && p == "-" ? fs::path(".") / p : folder / p;
  };
  std::vector<JobRow> rows;
  rows.reserve(records.size() - 1);
  for (std::size_t r = 1; r < records.size(); ++r) {
    const Record& record = records[r];
    const std::string at = name + ":" + std::to_string(record.line);
    if (record.fields.size() != header.fields.size()) {
      throw std::invalid_argument(at + ": " + std::to_string(record.fields.size()) +
                                  " fields, the header has " +
                                  std::to_string(header.fields.size()));
    }
    JobRow row;
    row.line = record.line;
    for (std::size_t c = 0; c < 3; ++c) {
      if (record.fields[*where[c]].empty()) {
        throw std::invalid_argument(at + ": the " + kColumns[c] + " is empty");
      }
    }
    row.input = resolve(record.fields[*where[0]]);
    row.filter = resolve(record.fields[*where[1]]);
    row.output = resolve(record.fields[*where[2]]);
    if (where[3] && !record.fields[*where[3]].empty()) {
      row.gain_db = gain_from(trimmed_lowercase(record.fields[*where[3]]), at);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace tapstream
