// Tests of FileWatcher: files rewritten in place or renamed into place are
// reported once they are complete, half-written files never, bursts once.

#include "daemon/control/file_watcher.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/wait_for.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr auto debounce = 50ms;

class FileWatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tapstream-watch-test-" + std::to_string(::getpid()) + "-" +
                                        std::to_string(counter_++));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "other");
    write(dir_ / "left.txt", "1\n");
    write(dir_ / "right.txt", "1\n");
    write(dir_ / "other" / "third.txt", "1\n");
    write(sentinel(), "1\n");
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
  // A file every watcher of these tests watches, written to prove that the
  // watcher has come past the events before it: its name sorts after every
  // other watched file, so the watcher (one thread, reporting due files in
  // path order) reports everything due before it first.
  fs::path sentinel() const { return dir_ / "zz-sentinel.txt"; }

  // Waits (30 s at most) until `count` reports of `file` have arrived; false
  // if they did not.
  bool wait_for_reports(const fs::path& file, std::size_t count) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, 30s, [&] {
      return std::count(reports_.begin(), reports_.end(), file) >=
             static_cast<std::ptrdiff_t>(count);
    });
  }

  // The reports that came before the quiet period ended: rewrites the
  // sentinel and waits until it is reported (a debounce after this call,
  // so after any surplus report of an earlier event); returns the reports
  // but the sentinel's.
  std::vector<fs::path> reports_before_sentinel() {
    const std::size_t sentinels = reports_of(sentinel());
    write(sentinel(), "2\n");
    EXPECT_TRUE(wait_for_reports(sentinel(), sentinels + 1)) << "the sentinel was not reported";
    std::lock_guard lock(mutex_);
    std::vector<fs::path> before;
    for (const auto& file : reports_) {
      if (file != sentinel()) before.push_back(file);
    }
    return before;
  }

  // Waits until `count` reports arrived, then until the quiet period after
  // them has passed (reports_before_sentinel); returns all reports but the
  // sentinel's.
  std::vector<fs::path> reports_after(std::size_t count) {
    {
      std::unique_lock lock(mutex_);
      EXPECT_TRUE(changed_.wait_for(lock, 30s, [&] { return reports_.size() >= count; }))
          << reports_.size() << " of " << count << " reports";
    }
    return reports_before_sentinel();
  }

  std::size_t reports_of(const fs::path& file) {
    std::lock_guard lock(mutex_);
    return static_cast<std::size_t>(std::count(reports_.begin(), reports_.end(), file));
  }

  static inline int counter_ = 0;
  fs::path dir_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<fs::path> reports_;
};

TEST_F(FileWatcherTest, AFileRewrittenInPlaceIsReportedOnceAfterItIsClosed) {
  FileWatcher watcher({dir_ / "left.txt", dir_ / "right.txt", sentinel()}, record(), debounce);
  watcher.start();
  write(dir_ / "left.txt", "0.5\n0.5\n");
  EXPECT_EQ(reports_after(1), std::vector<fs::path>{dir_ / "left.txt"});
}

TEST_F(FileWatcherTest, AFileRenamedIntoPlaceIsReportedButNotTheTemporaryName) {
  FileWatcher watcher({dir_ / "left.txt", sentinel()}, record(), debounce);
  watcher.start();
  write(dir_ / "left.txt.tmp", "0.25\n");
  fs::rename(dir_ / "left.txt.tmp", dir_ / "left.txt");
  EXPECT_EQ(reports_after(1), std::vector<fs::path>{dir_ / "left.txt"});
}

TEST_F(FileWatcherTest, AFileStillBeingWrittenIsNeverReported) {
  FileWatcher watcher({dir_ / "left.txt", sentinel()}, record(), debounce);
  watcher.start();
  const int fd = ::open((dir_ / "left.txt").c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "0.1\n0.", 6), 6);  // half a file, flushed to the kernel
  ::fsync(fd);
  // The watcher has come past the half write (and a debounce more) once the
  // sentinel, written after it, is reported.
  EXPECT_TRUE(reports_before_sentinel().empty()) << "reported while still open for writing";
  ASSERT_EQ(::write(fd, "2\n", 2), 2);
  ::close(fd);
  EXPECT_EQ(reports_after(1), std::vector<fs::path>{dir_ / "left.txt"});
}

TEST_F(FileWatcherTest, OtherFilesInTheDirectoryAreIgnored) {
  FileWatcher watcher({dir_ / "left.txt", sentinel()}, record(), debounce);
  watcher.start();
  write(dir_ / "right.txt", "2\n");
  write(dir_ / "unrelated.txt", "3\n");
  fs::rename(dir_ / "unrelated.txt", dir_ / "renamed.txt");
  write(dir_ / "left.txt", "1\n");  // a sentinel, after the others in the event queue
  EXPECT_EQ(reports_after(1), std::vector<fs::path>{dir_ / "left.txt"});
}

TEST_F(FileWatcherTest, ABurstOfRewritesIsReportedOnce) {
  // A debounce far longer than the burst, even on a loaded machine.
  FileWatcher watcher({dir_ / "left.txt", sentinel()}, record(), 1s);
  watcher.start();
  for (int i = 0; i < 5; ++i) {
    write(dir_ / "left.txt", std::to_string(i) + "\n");
    // Pacing, not a wait: the burst's rewrites come a millisecond apart.
    std::this_thread::sleep_for(1ms);
  }
  // Reported once: the burst's report came, and nothing more before the
  // sentinel written after it.
  EXPECT_TRUE(wait_for_reports(dir_ / "left.txt", 1));
  EXPECT_EQ(reports_before_sentinel(), std::vector<fs::path>{dir_ / "left.txt"});
}

TEST_F(FileWatcherTest, FilesInSeveralDirectoriesAreEachReported) {
  FileWatcher watcher(
      {dir_ / "left.txt", dir_ / "other" / "third.txt", dir_ / "right.txt", sentinel()}, record(),
      debounce);
  watcher.start();
  write(dir_ / "other" / "third.txt", "3\n");
  write(dir_ / "right.txt", "2\n");
  auto reports = reports_after(2);
  std::sort(reports.begin(), reports.end());
  EXPECT_EQ(reports, (std::vector<fs::path>{dir_ / "other" / "third.txt", dir_ / "right.txt"}));
}

TEST_F(FileWatcherTest, ACallbackThatThrowsDoesNotStopTheWatcher) {
  std::atomic<int> calls{0};  // of left.txt
  const auto recorder = record();
  FileWatcher watcher(
      {dir_ / "left.txt", sentinel()},
      [&](const fs::path& file) {
        if (file == dir_ / "left.txt" && ++calls == 1) throw std::runtime_error("bad file");
        recorder(file);
      },
      debounce);
  watcher.start();
  write(dir_ / "left.txt", "x\n");
  ASSERT_TRUE(testing::wait_until(
      testing::long_wait, [&] { return calls.load() == 1; }, "the first call, which throws"));
  write(dir_ / "left.txt", "1\n");
  EXPECT_EQ(reports_after(1), std::vector<fs::path>{dir_ / "left.txt"});
  EXPECT_EQ(calls.load(), 2);
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
  // Not a wait for a condition (a pending report cannot be seen from
  // outside): time for the watcher to read the event, so that stop() has a
  // report to drop; were it not read yet, stop() must still be prompt.
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
