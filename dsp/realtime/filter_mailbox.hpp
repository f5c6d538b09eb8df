#pragma once
// The hand-off of a new FilterBank (or RoutingMatrix: MatrixMailbox) from the
// control thread (ctl socket, file watcher, SIGHUP) to the engine thread,
// which installs it at a block boundary.
//
// A matrix may come with the paths that changed (MatrixEngine::set_paths'
// PathTaps, pointing into the matrix the node keeps): the engine then
// installs those paths alone. A node that supersedes a pending one goes as
// the whole matrix (its list would miss the superseded one's paths).
//
// Threads: one control thread calls post(), collect(), acknowledged() and
// wait_acknowledged(); one engine thread calls poll() once per block. The
// audio callback never touches the mailbox. Neither side locks; the engine
// side never allocates or frees: every bank and every carrier node is created
// and destroyed on the control thread.
//
// How: post() wraps the bank in a Node and exchanges it into `pending_`; a
// node that was still pending (never taken) comes back from that exchange and
// is freed by post() itself. poll() exchanges `pending_` with null, so each
// node is owned by exactly one thread at any moment. After installing the
// bank, the engine pushes the node onto the `returned_` stack (a CAS loop with
// one pusher and one consumer that takes the whole stack with exchange, so
// there is no ABA), and collect() on the control thread frees it there.
//
// Why the orderings suffice: post() exchanges with release (acq_rel), so the
// engine's acquire exchange in poll() sees the fully built bank. The engine
// publishes `acknowledged_` with release after install() returned, so a
// control thread that reads it with acquire knows the swap has happened (and
// sees any state the engine wrote before it). A refusal's reason is copied
// into `refusal_` before `rejected_` is published with release, and read by
// the control thread after it saw its sequence there with acquire; the next
// refusal can only come from a later post(), by that same control thread, so
// the two never overlap. The returned_ push is a release
// CAS and collect()'s exchange is acquire, so the control thread frees a node
// only after the engine is done with it.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "dsp/model/filter_bank.hpp"
#include "dsp/model/matrix_engine.hpp"
#include "dsp/model/routing_matrix.hpp"

namespace tapstream {

// `Payload`: what is handed over whole (FilterBank, RoutingMatrix), immutable once posted.
template <typename Payload>
class Mailbox {
 public:
  Mailbox() = default;
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;
  ~Mailbox() {
    // Both threads have stopped using the mailbox by now.
    std::unique_ptr<Node> pending(pending_.exchange(nullptr, std::memory_order_acquire));
    collect();
  }

  // --- control thread -------------------------------------------------

  // Queues `bank` for the engine and returns its sequence number (1, 2, ...).
  // A bank posted before it and not yet taken is dropped: the newest wins,
  // and its acknowledgement also covers the dropped one.
  // `changed`: the paths that differ from the matrix posted before, their
  // taps in `*bank` (empty: install the whole of it).
  std::uint64_t post(std::shared_ptr<const Payload> bank, std::vector<PathTaps> changed = {}) {
    collect();
    auto node = std::make_unique<Node>();
    node->bank = std::move(bank);
    node->changed = std::move(changed);
    node->sequence = ++posted_;
    const std::uint64_t sequence = node->sequence;
    Node* const posted = node.get();
    std::unique_ptr<Node> superseded(pending_.exchange(node.release(), std::memory_order_acq_rel));
    if (superseded && !posted->changed.empty()) {
      // Still pending (the engine takes a node only through pending_, which
      // now holds `posted` until the exchange in poll()) unless taken since:
      // then it is the engine's, and this write would race. Take it back to
      // make it whole.
      Node* mine = pending_.exchange(nullptr, std::memory_order_acq_rel);
      if (mine != nullptr) {
        mine->changed.clear();
        pending_.store(mine, std::memory_order_release);
      }
    }
    return sequence;  // `superseded` (if any) is freed here, on the control thread
  }

  // The highest sequence number the engine has installed (0: none yet).
  // Every bank posted with a sequence number <= this is installed or superseded.
  std::uint64_t acknowledged() const { return acknowledged_.load(std::memory_order_acquire); }

  // The sequence number of the last post() whose install() threw (0: none).
  std::uint64_t rejected() const { return rejected_.load(std::memory_order_acquire); }

  // Why the engine refused the post rejected() names (its exception's
  // message, cut at 1 KiB); read after rejected() returned that sequence.
  std::string refusal() const { return std::string(refusal_.data()); }

  // Waits (sleeping, never spinning hard) until `sequence` is acknowledged or
  // rejected, or until `timeout` passes. Returns true when acknowledged.
  bool wait_acknowledged(std::uint64_t sequence, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      if (acknowledged() >= sequence) return true;
      if (rejected() == sequence) return false;
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  }

  // Frees the nodes (and with them the banks) the engine has handed back.
  // post() calls it; call it also now and then when nothing is posted.
  void collect() {
    Node* node = returned_.exchange(nullptr, std::memory_order_acquire);
    while (node != nullptr) {
      std::unique_ptr<Node> owned(node);
      node = owned->next;
    }
  }

  // --- engine thread --------------------------------------------------

  // At a block boundary: when a new bank is waiting, calls install(bank)
  // (or install(bank, changed paths), when `install` takes them) and
  // acknowledges it; returns true when a bank was installed. Never blocks,
  // allocates or frees. If install throws, the sequence is recorded as
  // rejected, the node still goes back to the control thread, and the
  // exception propagates.
  template <typename Install>
  bool poll(Install&& install) {
    Node* node = pending_.exchange(nullptr, std::memory_order_acquire);
    if (node == nullptr) return false;
    try {
      if constexpr (std::is_invocable_v<Install&, const Payload&, std::span<const PathTaps>>) {
        install(static_cast<const Payload&>(*node->bank), std::span<const PathTaps>(node->changed));
      } else {
        install(static_cast<const Payload&>(*node->bank));
      }
    } catch (...) {
      note_refusal(std::current_exception());
      rejected_.store(node->sequence, std::memory_order_release);
      give_back(node);
      throw;
    }
    const std::uint64_t sequence = node->sequence;
    give_back(node);
    acknowledged_.store(sequence, std::memory_order_release);
    return true;
  }

  // Whether a bank is waiting (a hint for either thread).
  bool has_pending() const { return pending_.load(std::memory_order_relaxed) != nullptr; }

 private:
  struct Node {
    std::shared_ptr<const Payload> bank;
    std::vector<PathTaps> changed;  // into *bank; empty: the whole bank
    std::uint64_t sequence = 0;
    Node* next = nullptr;  // link in the returned_ stack
  };

  // Copies the exception's message into refusal_: no allocation.
  void note_refusal(const std::exception_ptr& error) noexcept {
    const char* what = "an exception that is not a std::exception";
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    const std::size_t n = std::min(std::strlen(what), refusal_.size() - 1);
    std::memcpy(refusal_.data(), what, n);
    refusal_[n] = '\0';
  }

  void give_back(Node* node) {
    Node* head = returned_.load(std::memory_order_relaxed);
    do {
      node->next = head;
    } while (!returned_.compare_exchange_weak(head, node, std::memory_order_release,
                                              std::memory_order_relaxed));
  }

  std::uint64_t posted_ = 0;  // control thread only
  std::atomic<Node*> pending_{nullptr};
  std::atomic<Node*> returned_{nullptr};
  std::atomic<std::uint64_t> acknowledged_{0};
  std::atomic<std::uint64_t> rejected_{0};
  std::array<char, 1024> refusal_{};  // see the top: written before rejected_
};

using FilterMailbox = Mailbox<FilterBank>;
using MatrixMailbox = Mailbox<RoutingMatrix>;

}  // namespace tapstream
