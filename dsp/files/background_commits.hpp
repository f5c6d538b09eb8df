#pragma once
// Commits TemporaryFiles (flush to disk, close, rename onto the destination)
// on a thread of their own, in the order given, so that making one output
// durable overlaps the work on the next (a batch of files). The guarantee
// per file is TemporaryFile's: the destination is replaced only by a file
// whose data reached the disk first. At most kMaxPending files wait (their
// descriptors open, their dirty pages in memory): add() blocks beyond that,
// so that a disk slower than the work holds the work back.

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dsp/files/temporary_file.hpp"

namespace tapstream {

class BackgroundCommits {
 public:
  static constexpr std::size_t kMaxPending = 4;

  struct Failure {
    std::filesystem::path destination;
    std::string problem;
  };

  BackgroundCommits();
  // Commits what is still waiting, then stops: every file handed over was
  // complete, so it is not thrown away.
  ~BackgroundCommits();
  BackgroundCommits(const BackgroundCommits&) = delete;
  BackgroundCommits& operator=(const BackgroundCommits&) = delete;

  // Hands over a complete file; blocks while kMaxPending wait.
  void add(std::unique_ptr<TemporaryFile> file);
  // Waits until every file handed over is committed or failed; returns (and
  // forgets) the failures so far.
  std::vector<Failure> wait();

 private:
  void work();

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::unique_ptr<TemporaryFile>> pending_;
  bool busy_ = false;  // the worker holds a file
  bool stop_ = false;
  std::vector<Failure> failures_;
  std::thread worker_;
};

}  // namespace tapstream
