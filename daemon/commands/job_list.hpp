#pragma once
// `process --jobs FILE.csv`: a list of jobs, one a row, each naming its own
// input, filter and output (a dataset reverberated with one room impulse
// response per file). The file is CSV as RFC 4180 writes it (a field in double
// quotes may hold commas, line breaks and "" for a quote; lines end with LF or
// CRLF; an optional UTF-8 byte order mark); its header names the columns, in
// any order: input, filter, output, and optionally gain_db. Relative paths are
// taken from the CSV file's folder, so that a dataset's folder can move whole.
//
// The whole file is read and checked here, before any work: a bad header, an
// unknown or repeated column, a row with the wrong number of fields, an empty
// path, a gain that is not a number in range, or an unclosed quote refuses the
// whole list, naming the file and line. What depends on the files themselves
// (a missing input, a bad filter) is the batch's to find, row by row.

#include <cstddef>
#include <filesystem>
#include <optional>
#include <vector>

namespace tapstream {

struct JobRow {
  std::size_t line = 0;  // where the row starts in the CSV file (the header is line 1)
  std::filesystem::path input;
  std::filesystem::path filter;  // a coefficient file (as --taps), or a matrix .toml
  std::filesystem::path output;
  std::optional<double> gain_db;  // the row's gain_db; empty: --gain's
};

// Throws std::invalid_argument naming `csv` (and the line) and the problem.
std::vector<JobRow> read_job_list(const std::filesystem::path& csv);

// A filter file the job list names is a routing matrix (.toml, any case).
bool is_matrix_file(const std::filesystem::path& filter);

}  // namespace tapstream
