#include "dsp/files/background_commits.hpp"

#include <stdexcept>
#include <utility>

namespace tapstream {

BackgroundCommits::BackgroundCommits() : worker_([this] { work(); }) {}

BackgroundCommits::~BackgroundCommits() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  worker_.join();
}

void BackgroundCommits::add(std::unique_ptr<TemporaryFile> file) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return pending_.size() < kMaxPending; });
  pending_.push_back(std::move(file));
  changed_.notify_all();
}

std::vector<BackgroundCommits::Failure> BackgroundCommits::wait() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return pending_.empty() && !busy_; });
  return std::exchange(failures_, {});
}

void BackgroundCommits::work() {
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [&] { return stop_ || !pending_.empty(); });
    if (pending_.empty()) return;  // stopped, and nothing left
    std::unique_ptr<TemporaryFile> file = std::move(pending_.front());
    pending_.pop_front();
    busy_ = true;
    changed_.notify_all();  // room for add()
    lock.unlock();
    std::string problem;
    try {
      file->commit();
    } catch (const std::runtime_error& e) {
      problem = e.what();
    }
    const std::filesystem::path destination = file->destination();
    file.reset();  // removes the temporary file of a failed commit
    lock.lock();
    if (!problem.empty()) failures_.push_back({destination, problem});
    busy_ = false;
    changed_.notify_all();
  }
}

}  // namespace tapstream
