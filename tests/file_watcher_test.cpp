// Tests of FileWatcher: files rewritten in place or renamed into place are
// reported once they are complete, half-written files never, bursts once.

#include "daemon/control/file_watcher.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr auto debounce = 50ms;

class FileWatcherTest : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tapstream-watch-test-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(counter_++));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "other");
    write(dir_ / "left.txt", "1\n");
    write(dir_ / "right.txt", "1\n");
    write(dir_ / "other" / "third.txt", "1\n");
  }
  void TearDown() override { fs::remove_all(dir_); }

  static void write(const fs::path& file, const std::string& text) {
    std::ofstream out(file);
    out << text;
  }

  FileWatcher::Callback record() {
    return [this](const fs::path& file) {
      std::lock_guard lock(mutex_);
      reports_.push_back(file);
      changed_.notify_all();
    };
  }
  // Waits until `count` reports arrived (or 5 s passed), then a little longer
  // for any surplus ones; returns all reports.
  std::vector<fs::path> reports_after(std::size_t count) {
    std::unique_lock lock(mutex_);
    changed_.wait_for(lock, 5s, [&] { return reports_.size() >= count; });
    lock.unlock();
    std::this_thread::sleep_for(debounce * 4);
    lock.lock();
    return reports_;
  }

  static inline int counter_ = 0;
  fs::path dir_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<fs::path> reports_;
};

TEST_F(FileWatcherTest, AFileRewrittenInPlaceIsReportedOnceAfterItIsClosed) {
  FileWatcher watcher({dir_ / "left.txt", dir_ / "right.txt"}, record(), debounce);
  watcher.start();
  write(dir_ / "left.txt", "0.5\n0.5\n");
  EXPECT_EQ(reports_after(1), std::vector<fs::path>{dir_ / "left.txt"});
}

TEST_F(FileWatcherTest, AFileRenamedIntoPlaceIsReportedButNotTheTemporaryName) {
  FileWatcher watcher({dir_ / "left.txt"}, record(), debounce);
  watcher.start();
  write(dir_ / "left.txt.tmp", "0.25\n");
  fs::rename(dir_ / "left.txt.tmp", dir_ / "left.txt");
  EXPECT_EQ(reports_after(1), std::vector<fs::path>{dir_ / "left.txt"});
}

TEST_F(FileWatcherTest, AFileStillBeingWrittenIsNeverReported) {
  FileWatcher watcher({dir_ / "left.txt"}, record(), debounce);
  watcher.start();
  const int fd = ::open((dir_ / "left.txt").c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "0.1\n0.", 6), 6);  // half a file, flushed to the kernel
  ::fsync(fd);
  std::this_thread::sleep_for(debounce * 6);
  {
    std::lock_guard lock(mutex_);
    EXPECT_TRUE(reports_.empty()) << "reported while still open for writing";
  }
  ASSERT_EQ(::write(fd, "2\n", 2), 2);
  ::close(fd);
  EXPECT_EQ(reports_after(1), std::vector<fs::path>{dir_ / "left.txt"});
}

TEST_F(FileWatcherTest, OtherFilesInTheDirectoryAreIgnored) {
  FileWatcher watcher({dir_ / "left.txt"}, record(), debounce);
  watcher.start();
  write(dir_ / "right.txt", "2\n");
  write(dir_ / "unrelated.txt", "3\n");
  fs::rename(dir_ / "unrelated.txt", dir_ / "renamed.txt");
  write(dir_ / "left.txt", "1\n");  // a sentinel, after the others in the event queue
  EXPECT_EQ(reports_after(1), std::vector<fs::path>{dir_ / "left.txt"});
}

TEST_F(FileWatcherTest, ABurstOfRewritesIsReportedOnce) {
  FileWatcher watcher({dir_ / "left.txt"}, record(), 300ms);
  watcher.start();
  for (int i = 0; i < 5; ++i) {
    write(dir_ / "left.txt", std::to_string(i) + "\n");
    std::this_thread::sleep_for(1ms);
  }
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, 5s, [&] { return !reports_.empty(); });
  lock.unlock();
  std::this_thread::sleep_for(600ms);
  lock.lock();
  EXPECT_EQ(reports_, std::vector<fs::path>{dir_ / "left.txt"});
}

TEST_F(FileWatcherTest, FilesInSeveralDirectoriesAreEachReported) {
  FileWatcher watcher({dir_ / "left.txt", dir_ / "other" / "third.txt", dir_ / "right.txt"},
                      record(), debounce);
  watcher.start();
  write(dir_ / "other" / "third.txt", "3\n");
  write(dir_ / "right.txt", "2\n");
  auto reports = reports_after(2);
  std::sort(reports.begin(), reports.end());
  EXPECT_EQ(reports, (std::vector<fs::path>{dir_ / "other" / "third.txt", dir_ / "right.txt"}));
}

TEST_F(FileWatcherTest, ACallbackThatThrowsDoesNotStopTheWatcher) {
  int calls = 0;
  FileWatcher watcher(
      {dir_ / "left.txt"},
      [&](const fs::path& file) {
        if (++calls == 1) throw std::runtime_error("bad file");
        record()(file);
      },
      debounce);
  watcher.start();
  write(dir_ / "left.txt", "x\n");
  std::this_thread::sleep_for(debounce * 4);
  write(dir_ / "left.txt", "1\n");
  EXPECT_EQ(reports_after(1), std::vector<fs::path>{dir_ / "left.txt"});
  EXPECT_EQ(calls, 2);
}

TEST_F(FileWatcherTest, AMissingDirectoryIsNamedInTheError) {
  FileWatcher watcher({dir_ / "nodir" / "f.txt"}, record(), debounce);
  try {
    watcher.start();
    FAIL() << "no error";
  } catch (const FileWatcherError& e) {
    EXPECT_NE(std::string(e.what()).find((dir_ / "nodir").string()), std::string::npos) << e.what();
  }
}

TEST_F(FileWatcherTest, StopIsPromptDropsPendingReportsAndCanBeRepeated) {
  FileWatcher watcher({dir_ / "left.txt"}, record(), 10s);
  watcher.start();
  write(dir_ / "left.txt", "2\n");
  std::this_thread::sleep_for(50ms);
  const auto start = std::chrono::steady_clock::now();
  watcher.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  watcher.stop();
  std::lock_guard lock(mutex_);
  EXPECT_TRUE(reports_.empty());
}

}  // namespace
}  // namespace tapstream
