// Tests of without_file_text (daemon/control/file_text.hpp): a loader's quote
// of a file's line goes, the file and the line number stay, and a message
// that quotes a key's value or the daemon's own words is left as it is.

#include "daemon/control/file_text.hpp"

#include <gtest/gtest.h>

#include <string>

namespace tapstream {
namespace {

TEST(FileText, ALoadersQuoteOfALineGoesAndTheFileAndLineStay) {
  EXPECT_EQ(without_file_text("/etc/shadow:1: cannot parse 'root:*:20228:0:99999:7:::' as a "
                              "number (one tap per line)"),
            "/etc/shadow:1: cannot parse (text not shown) as a number (one tap per line)");
  EXPECT_EQ(without_file_text("/d/n.txt:3: 'x = \"y\"' is not a finite number"),
            "/d/n.txt:3: (text not shown) is not a finite number");
  // A TOML parser's line and column.
  EXPECT_EQ(without_file_text("m.toml:1:5: expected '=', saw 'r'"),
            "m.toml:1:5: expected (text not shown)");
}

TEST(FileText, MessagesWithoutALineQuoteAreLeftAsTheyAre) {
  for (const std::string& message :
       {std::string("broken.toml: path[3].file = 'missing.txt': no such file (/d/missing.txt)"),
        std::string("/d/live.toml: the filters have 3 taps, more than [filter] max_taps = 2 "
                    "(raise max_taps, or 0 for the filters' own length)"),
        std::string("x.f32: tap 3 (counting from 0) is NaN"), std::string("")}) {
    EXPECT_EQ(without_file_text(message), message);
  }
}

}  // namespace
}  // namespace tapstream
