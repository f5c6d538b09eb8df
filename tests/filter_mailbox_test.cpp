// Tests of FilterMailbox: the control thread posts filter banks, the engine
// thread installs them at block boundaries (run under ThreadSanitizer too).

#include "dsp/realtime/filter_mailbox.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

namespace tapstream {
namespace {

// A bank that records on which thread it is destroyed.
struct TrackedBank {
  TrackedBank(float value, std::atomic<int>* freed_elsewhere, std::thread::id owner)
      : bank(FilterBank::shared({value, 0.5f}, 2, "tracked")),
        freed_elsewhere(freed_elsewhere),
        owner(owner) {}
  ~TrackedBank() {
    if (std::this_thread::get_id() != owner) freed_elsewhere->fetch_add(1);
  }
  FilterBank bank;
  std::atomic<int>* freed_elsewhere;
  std::thread::id owner;
};

std::shared_ptr<const FilterBank> make_bank(float value, std::atomic<int>* freed_elsewhere) {
  auto tracked = std::make_shared<TrackedBank>(value, freed_elsewhere, std::this_thread::get_id());
  return std::shared_ptr<const FilterBank>(tracked, &tracked->bank);
}

TEST(FilterMailbox, PollDoesNothingWhenNothingWasPosted) {
  FilterMailbox mailbox;
  bool called = false;
  EXPECT_FALSE(mailbox.poll([&](const FilterBank&) { called = true; }));
  EXPECT_FALSE(called);
  EXPECT_EQ(mailbox.acknowledged(), 0u);
}

TEST(FilterMailbox, PostedBankIsInstalledOnceAndAcknowledged) {
  std::atomic<int> freed_elsewhere{0};
  FilterMailbox mailbox;
  const auto sequence = mailbox.post(make_bank(3.0f, &freed_elsewhere));
  EXPECT_EQ(sequence, 1u);
  EXPECT_TRUE(mailbox.has_pending());
  EXPECT_EQ(mailbox.acknowledged(), 0u);
  float installed = 0;
  EXPECT_TRUE(mailbox.poll([&](const FilterBank& bank) { installed = bank.taps(0)[0]; }));
  EXPECT_EQ(installed, 3.0f);
  EXPECT_EQ(mailbox.acknowledged(), sequence);
  EXPECT_TRUE(mailbox.wait_acknowledged(sequence, std::chrono::milliseconds(0)));
  EXPECT_FALSE(mailbox.poll([&](const FilterBank&) { installed = -1; }));
  EXPECT_EQ(installed, 3.0f);
}

TEST(FilterMailbox, NewestPostWinsWhenTheEngineFallsBehind) {
  std::atomic<int> freed_elsewhere{0};
  FilterMailbox mailbox;
  mailbox.post(make_bank(1.0f, &freed_elsewhere));
  mailbox.post(make_bank(2.0f, &freed_elsewhere));
  const auto last = mailbox.post(make_bank(3.0f, &freed_elsewhere));
  std::vector<float> installed;
  while (mailbox.poll([&](const FilterBank& bank) { installed.push_back(bank.taps(0)[0]); })) {
  }
  EXPECT_EQ(installed, std::vector<float>{3.0f});
  EXPECT_EQ(mailbox.acknowledged(), last);
  EXPECT_TRUE(mailbox.wait_acknowledged(1, std::chrono::milliseconds(0)));
}

TEST(FilterMailbox, AThrowingInstallIsRejectedAndNotAcknowledged) {
  std::atomic<int> freed_elsewhere{0};
  FilterMailbox mailbox;
  const auto sequence = mailbox.post(make_bank(1.0f, &freed_elsewhere));
  EXPECT_THROW(mailbox.poll([](const FilterBank&) { throw std::runtime_error("too long"); }),
               std::runtime_error);
  EXPECT_EQ(mailbox.acknowledged(), 0u);
  EXPECT_EQ(mailbox.rejected(), sequence);
  EXPECT_EQ(mailbox.refusal(), "too long") << "the engine's reason reaches the control thread";
  EXPECT_FALSE(mailbox.wait_acknowledged(sequence, std::chrono::seconds(5)));
  EXPECT_FALSE(mailbox.has_pending());

  // A reason longer than the mailbox keeps is cut, not overrun.
  const auto second = mailbox.post(make_bank(2.0f, &freed_elsewhere));
  EXPECT_THROW(
      mailbox.poll([](const FilterBank&) { throw std::runtime_error(std::string(5000, 'x')); }),
      std::runtime_error);
  EXPECT_EQ(mailbox.rejected(), second);
  EXPECT_EQ(mailbox.refusal(), std::string(1023, 'x'));
}

TEST(FilterMailbox, WaitTimesOutWhenTheEngineNeverPolls) {
  std::atomic<int> freed_elsewhere{0};
  FilterMailbox mailbox;
  const auto sequence = mailbox.post(make_bank(1.0f, &freed_elsewhere));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(mailbox.wait_acknowledged(sequence, std::chrono::milliseconds(20)));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(20));
}

// The engine thread polls as if at block boundaries; the control thread posts
// many banks, sometimes waiting for the acknowledgement. The engine must see
// strictly increasing banks, end with the last one, and no bank may be freed
// on the engine thread.
TEST(FilterMailbox, EngineAndControlThreadsSwapManyBanksWithoutFreeingOnTheEngine) {
  std::atomic<int> freed_elsewhere{0};
  constexpr int posts = 20000;
  {
    FilterMailbox mailbox;
    std::atomic<bool> stop{false};
    std::atomic<int> out_of_order{0};
    std::atomic<float> last_installed{0.0f};
    std::atomic<long> installs{0};

    std::thread engine([&] {
      float previous = 0.0f;
      long count = 0;
      auto install = [&](const FilterBank& bank) {
        const float value = bank.taps(0)[0];
        if (!(value > previous) || bank.taps(1)[1] != 0.5f) out_of_order.fetch_add(1);
        previous = value;
        ++count;
      };
      while (!stop.load(std::memory_order_acquire)) {
        mailbox.poll(install);
        std::this_thread::yield();
      }
      mailbox.poll(install);  // whatever was posted last
      last_installed.store(previous);
      installs.store(count);
    });

    std::uint64_t last_sequence = 0;
    for (int i = 1; i <= posts; ++i) {
      last_sequence = mailbox.post(make_bank(static_cast<float>(i), &freed_elsewhere));
      if (i % 50 == 0) {
        EXPECT_TRUE(mailbox.wait_acknowledged(last_sequence, std::chrono::seconds(10)));
      }
    }
    EXPECT_TRUE(mailbox.wait_acknowledged(last_sequence, std::chrono::seconds(10)));
    stop.store(true, std::memory_order_release);
    engine.join();
    mailbox.collect();
    EXPECT_EQ(out_of_order.load(), 0);
    EXPECT_EQ(last_installed.load(), static_cast<float>(posts));
    EXPECT_EQ(mailbox.acknowledged(), last_sequence);
    EXPECT_GE(installs.load(), posts / 50);
    std::printf("%ld of %d posted banks installed\n", installs.load(), posts);
  }
  EXPECT_EQ(freed_elsewhere.load(), 0) << "a bank was freed on the engine thread";
}

}  // namespace
}  // namespace tapstream

namespace tapstream {
namespace {

RoutingMatrix two_paths(float first, float second) {
  MatrixPath a, b;
  a.input = 0;
  a.output = 0;
  a.taps = {first};
  b.input = 1;
  b.output = 1;
  b.taps = {second};
  return RoutingMatrix::make(2, 2, {a, b});
}

TEST(MatrixMailbox, ChangedPathsReachTheInstallWithTheMatrixTheyPointInto) {
  MatrixMailbox mailbox;
  const auto matrix = std::make_shared<const RoutingMatrix>(two_paths(1.0f, 2.0f));
  mailbox.post(matrix, {{1, matrix->paths()[1].taps}});
  std::vector<std::size_t> seen;
  EXPECT_TRUE(mailbox.poll([&](const RoutingMatrix& m, std::span<const PathTaps> changed) {
    EXPECT_EQ(&m, matrix.get());
    for (const PathTaps& p : changed) {
      seen.push_back(p.path);
      EXPECT_EQ(p.taps.data(), m.paths()[p.path].taps.data());
    }
  }));
  EXPECT_EQ(seen, std::vector<std::size_t>{1});
  // An install that does not take the paths still gets the matrix.
  mailbox.post(std::make_shared<const RoutingMatrix>(two_paths(3.0f, 4.0f)), {});
  EXPECT_TRUE(mailbox.poll([&](const RoutingMatrix& m) { EXPECT_EQ(m.paths()[0].taps[0], 3.0f); }));
}

TEST(MatrixMailbox, AnUpdateThatSupersedesAPendingOneGoesAsTheWholeMatrix) {
  // The engine falls behind: the second update (path 0 only) replaces the
  // first (path 1) before either is taken. Installing path 0 alone would
  // lose the first's path 1, so the whole matrix goes.
  MatrixMailbox mailbox;
  const auto first = std::make_shared<const RoutingMatrix>(two_paths(1.0f, 5.0f));
  mailbox.post(first, {{1, first->paths()[1].taps}});
  const auto second = std::make_shared<const RoutingMatrix>(two_paths(6.0f, 5.0f));
  const std::uint64_t sequence = mailbox.post(second, {{0, second->paths()[0].taps}});
  std::size_t changed_seen = 99;
  EXPECT_TRUE(mailbox.poll([&](const RoutingMatrix& m, std::span<const PathTaps> changed) {
    EXPECT_EQ(&m, second.get());
    changed_seen = changed.size();
  }));
  EXPECT_EQ(changed_seen, 0u);
  EXPECT_EQ(mailbox.acknowledged(), sequence);
}

}  // namespace
}  // namespace tapstream
