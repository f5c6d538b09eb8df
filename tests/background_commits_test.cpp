// BackgroundCommits: a batch's outputs flushed to disk and renamed on a
// thread of their own, every one of them, in order, failures named.

#include "dsp/files/background_commits.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>

namespace tapstream {
namespace {

namespace fs = std::filesystem;

class BackgroundCommitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    directory_ = fs::temp_directory_path() / ("tapstream-commits-" + std::string(info->name()) +
                                              "-" + std::to_string(std::random_device{}()));
    fs::create_directories(directory_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::remove_all(directory_, ignored);
  }
  // A complete temporary file for `name` holding `text`.
  std::unique_ptr<TemporaryFile> written(const std::string& name, const std::string& text) {
    auto file = std::make_unique<TemporaryFile>(directory_ / name);
    EXPECT_EQ(::write(file->fd(), text.data(), text.size()), static_cast<ssize_t>(text.size()));
    return file;
  }
  std::string content(const std::string& name) const {
    std::ifstream in(directory_ / name, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  std::size_t entries() const {
    return static_cast<std::size_t>(std::distance(fs::directory_iterator(directory_), {}));
  }
  fs::path directory_;
};

TEST_F(BackgroundCommitsTest, EveryFileHandedOverIsRenamedOntoItsDestination) {
  BackgroundCommits commits;
  // More than kMaxPending: add() waits for room rather than failing.
  for (int i = 0; i < 12; ++i) {
    commits.add(written("out" + std::to_string(i), "file " + std::to_string(i)));
  }
  EXPECT_TRUE(commits.wait().empty());
  for (int i = 0; i < 12; ++i)
    EXPECT_EQ(content("out" + std::to_string(i)), "file " + std::to_string(i));
  EXPECT_EQ(entries(), 12u);  // no temporary file left
}

TEST_F(BackgroundCommitsTest, AFailedRenameIsReportedWithItsDestinationAndLeavesNothing) {
  // A non-empty directory cannot be renamed over.
  fs::create_directories(directory_ / "taken" / "inside");
  BackgroundCommits commits;
  commits.add(written("taken", "lost"));
  commits.add(written("fine", "kept"));
  const auto failures = commits.wait();
  ASSERT_EQ(failures.size(), 1u);
  EXPECT_EQ(failures[0].destination, directory_ / "taken");
  EXPECT_NE(failures[0].problem.find("rename"), std::string::npos) << failures[0].problem;
  EXPECT_EQ(content("fine"), "kept");
  EXPECT_TRUE(fs::is_directory(directory_ / "taken"));
  EXPECT_EQ(entries(), 2u);  // "taken" and "fine": the failed one's temporary file is gone
  EXPECT_TRUE(commits.wait().empty());  // reported once
}

TEST_F(BackgroundCommitsTest, DestructionCommitsWhatIsStillWaiting) {
  {
    BackgroundCommits commits;
    for (int i = 0; i < 3; ++i) commits.add(written("late" + std::to_string(i), "done"));
  }
  for (int i = 0; i < 3; ++i) EXPECT_EQ(content("late" + std::to_string(i)), "done");
  EXPECT_EQ(entries(), 3u);
}

}  // namespace
}  // namespace tapstream
