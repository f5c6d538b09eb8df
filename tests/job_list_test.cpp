// The job list of `process --jobs` (daemon/commands/job_list.hpp): RFC 4180
// fields (quotes, commas, line breaks and "" inside quotes, CRLF, a byte order
// mark), columns in any order, paths from the CSV's folder; and every fault of
// the file refused before any work, naming the file, the line and the fault.

#include "daemon/commands/job_list.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <stdexcept>
#include <string>

#include "tests/process_support.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

fs::path write_csv(const TempDir& dir, const std::string& text) {
  const fs::path csv = dir / "jobs.csv";
  std::ofstream(csv, std::ios::binary) << text;
  return csv;
}

std::string refusal(const fs::path& csv) {
  try {
    read_job_list(csv);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(JobList, ColumnsInAnyOrderAndPathsFromTheFolderOfTheList) {
  TempDir dir;
  const fs::path csv = write_csv(dir,
                                 "output,Gain_dB , input,filter\n"
                                 "out/a.wav,-6,clean/a.wav,rirs/r1.wav\n"
                                 "/abs/b.wav,,clean/b.wav,/rirs/m.toml\n");
  const std::vector<JobRow> rows = read_job_list(csv);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].line, 2u);
  EXPECT_EQ(rows[0].input, dir.path() / "clean/a.wav");
  EXPECT_EQ(rows[0].filter, dir.path() / "rirs/r1.wav");
  EXPECT_EQ(rows[0].output, dir.path() / "out/a.wav");
  ASSERT_TRUE(rows[0].gain_db.has_value());
  EXPECT_EQ(*rows[0].gain_db, -6.0);
  EXPECT_EQ(rows[1].line, 3u);
  EXPECT_EQ(rows[1].output, fs::path("/abs/b.wav"));
  EXPECT_EQ(rows[1].filter, fs::path("/rirs/m.toml"));
  EXPECT_FALSE(rows[1].gain_db.has_value());
  EXPECT_TRUE(is_matrix_file(rows[1].filter));
  EXPECT_FALSE(is_matrix_file(rows[0].filter));
}

TEST(JobList, QuotedFieldsHoldCommasQuotesAndLineBreaks) {
  TempDir dir;
  const fs::path csv = write_csv(dir,
                                 "\xEF\xBB\xBFinput,filter,output\r\n"
                                 "\"a, b.wav\",\"say \"\"hi\"\".txt\",\"two\nlines.wav\"\r\n"
                                 "\r\n"
                                 "c.wav,f.txt,d.wav");
  const std::vector<JobRow> rows = read_job_list(csv);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].input.filename(), "a, b.wav");
  EXPECT_EQ(rows[0].filter.filename(), "say \"hi\".txt");
  EXPECT_EQ(rows[0].output.filename(), "two\nlines.wav");
  // The line break inside the quotes counts: the next row starts on line 5.
  EXPECT_EQ(rows[1].line, 5u);
  EXPECT_EQ(rows[1].output.filename(), "d.wav");
}

TEST(JobList, AHeaderOnlyListHasNoRows) {
  TempDir dir;
  EXPECT_TRUE(read_job_list(write_csv(dir, "input,filter,output\n")).empty());
}

TEST(JobList, FaultsOfTheFileAreRefusedNamingTheLine) {
  TempDir dir;
  struct Case {
    std::string text;
    std::string named;  // after "jobs.csv"
  };
  const std::vector<Case> cases = {
      {"", ": empty"},
      {"input,output\na.wav,b.wav\n", ":1: the header has no column 'filter'"},
      {"input,filter,output,speed\n", ":1: unknown column 'speed'"},
      {"input,filter,output,Input\n", ":1: the column input is named twice"},
      {"input,filter,output\na,b,c\nd,e\n", ":3: 2 fields, the header has 3"},
      {"input,filter,output\na,b,c,d\n", ":2: 4 fields, the header has 3"},
      {"input,filter,output\na,,c\n", ":2: the filter is empty"},
      {"input,filter,output\na,b,\"c\n\nd\n", ":2: a quoted field is never closed"},
      {"input,filter,output\na,b,\"c\"d\n", ":2: text after a closing quote"},
      {"input,filter,output\na,b\"x,c\n", ":2: a quote inside an unquoted field"},
      {"input,filter,output,gain_db\na,b,c,loud\n", ":2: gain_db 'loud' is not a number"},
      {"input,filter,output,gain_db\na,b,c,1e9\n", ":2: gain_db 1e9 is not between"},
      {"input,filter,output,gain_db\na,b,c,nan\n", ":2: gain_db 'nan' is not a number"},
  };
  for (const Case& c : cases) {
    const std::string message = refusal(write_csv(dir, c.text));
    EXPECT_NE(message.find("jobs.csv" + c.named), std::string::npos)
        << "'" << c.text << "': '" << message << "' does not say " << c.named;
  }
}

TEST(JobList, OnlyARegularFileIsRead) {
  TempDir dir;
  EXPECT_NE(refusal(dir / "missing.csv").find("missing.csv"), std::string::npos);
  EXPECT_NE(refusal(dir.path()).find("directory"), std::string::npos) << refusal(dir.path());
  EXPECT_NE(refusal("/dev/zero").find("/dev/zero"), std::string::npos);
}

}  // namespace
}  // namespace tapstream
