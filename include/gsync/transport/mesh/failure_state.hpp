#pragma once
/// \file
/// `transport::failure_state`: what one rank knows of failures (the error that broke its endpoint,
/// an abort and its reason, what the heartbeat reported, the ranks it has seen die), written by the
/// failure protocol (failure.ipp), the heartbeat's thread and `abort()`, read by every call, by
/// `health()` and by a shrink, from any thread. It holds state only: acting on the links (notices,
/// records in the store, shutting connections) is the mesh's.

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "gsync/core/error.hpp"
#include "gsync/core/health.hpp"
#include "gsync/transport/mesh/heartbeat.hpp"

namespace gsync::transport {

class failure_state {
 public:
  /// True once anything ended this endpoint's use: its own failure, an abort, or a peer the
  /// heartbeat found silent. One inline test at the entry of every call.
  bool any() const noexcept {
    return broken_.load(std::memory_order_acquire) || aborted_.load(std::memory_order_acquire) || alarm_.load(std::memory_order_acquire);
  }
  bool broken() const noexcept { return broken_.load(std::memory_order_acquire); }    ///< this endpoint failed
  bool aborted() const noexcept { return aborted_.load(std::memory_order_acquire); }  ///< abort() was called
  bool alarm() const noexcept { return alarm_.load(std::memory_order_acquire); }      ///< a peer stopped answering

  // The endpoint's own failure: recorded once (the first cause), then read unlocked.
  /// Records the failure; its kind and words are written before the flag that publishes them.
  void set_broken(errc kind, std::string msg, int lost) {
    kind_ = kind;
    msg_ = std::move(msg);
    lost_ = lost;
    broken_.store(true, std::memory_order_release);
  }
  errc broken_kind() const noexcept { return kind_; }              ///< valid once broken()
  const std::string& broken_msg() const noexcept { return msg_; }  ///< valid once broken()

  // abort(), from any thread.
  /// Marks the abort with its reason; false when it was marked already (abort is idempotent).
  bool start_abort(const std::string& why) noexcept {
    std::lock_guard lk(abort_m_);
    if (aborted_.load(std::memory_order_relaxed)) return false;
    try {
      abort_msg_ = why;
    } catch (...) {
    }
    aborted_.store(true, std::memory_order_release);
    return true;
  }
  /// abort() has tried to put its reason in the store (see wait_abort_recorded).
  void abort_recorded() noexcept { abort_recorded_.store(true, std::memory_order_release); }
  /// A wait that saw the abort fails while abort() may still write the reason to the store: the
  /// peers would look for it too early. Waits (at most `most`) until abort() got that far.
  void wait_abort_recorded(std::chrono::milliseconds most) const noexcept {
    const auto until = std::chrono::steady_clock::now() + most;
    while (!abort_recorded_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::string abort_reason() const {
    std::lock_guard lk(abort_m_);
    return abort_msg_;
  }

  // The heartbeat's news (its thread) and the ranks seen dead.
  /// Records what the heartbeat reported; true when the peer stopped answering (the alarm is
  /// raised: every wait and call fails), false when it left without a goodbye (only remembered).
  bool heard(const heartbeat::news& n) {
    {
      std::lock_guard lk(m_);
      hb_dead_.insert(n.rank);
      if (n.silent) hb_silent_.insert(n.rank);
      if (n.silent && silent_ < 0) silent_ = n.rank, silent_why_ = n.why;
      if (!n.silent && exited_ < 0) exited_ = n.rank, exited_why_ = n.why;
    }
    if (n.silent) alarm_.store(true, std::memory_order_release);
    return n.silent;
  }
  /// The first rank the heartbeat found silent, and its words.
  std::pair<int, std::string> first_silent() const {
    std::lock_guard lk(m_);
    return {silent_, silent_why_};
  }
  /// True when the heartbeat found rank 0, which serves the store, silent: the store is frozen
  /// with it, and a request would only wait for its deadline.
  bool store_silent() const {
    if (!alarm()) return false;
    std::lock_guard lk(m_);
    return hb_silent_.count(0) > 0;
  }
  /// A rank this one has seen die (the rank a failure named as lost first), for a shrink.
  void saw_dead(int r) {
    std::lock_guard lk(m_);
    seen_dead_.insert(r);
  }
  /// Every rank seen dead or reported by the heartbeat.
  std::set<int> dead() const {
    std::lock_guard lk(m_);
    std::set<int> all = seen_dead_;
    all.insert(hb_dead_.begin(), hb_dead_.end());
    return all;
  }

  /// What this rank (`rank`) knows of failures, without blocking: its own failure first, then an
  /// abort, then a peer the heartbeat reported.
  health_report health(int rank) const noexcept {
    health_report h;
    try {
      if (broken()) {
        h.kind = kind_;
        h.lost_rank = lost_;
        h.message = msg_;
        return h;
      }
      if (aborted()) {
        h.kind = errc::aborted;
        h.message = abort_reason();
        return h;
      }
      std::lock_guard lk(m_);
      if (silent_ >= 0 || exited_ >= 0) {
        const bool silent = silent_ >= 0;
        h.kind = errc::peer_lost;
        h.lost_rank = silent ? silent_ : exited_;
        h.message = "rank " + std::to_string(rank) + ": " + (silent ? silent_why_ : exited_why_);
      }
    } catch (...) {
      if (h.ok()) h.kind = errc::system;
    }
    return h;
  }

 private:
  std::atomic<bool> broken_{false};  // set last by set_broken, after the three below (read unlocked)
  errc kind_ = errc::system;
  std::string msg_;
  int lost_ = -1;  // the rank lost first, as the failure named it
  mutable std::mutex abort_m_;  // guards abort_msg_
  std::atomic<bool> aborted_{false};
  std::atomic<bool> abort_recorded_{false};
  std::string abort_msg_;
  mutable std::mutex m_;  // guards the seven below
  int silent_ = -1;       // the first rank the heartbeat found silent
  std::string silent_why_;
  int exited_ = -1;       // the first rank it found gone without a goodbye
  std::string exited_why_;
  std::set<int> hb_dead_;    // every rank the heartbeat reported
  std::set<int> hb_silent_;  // of which those that stopped answering
  std::set<int> seen_dead_;  // ranks the failures of this endpoint named lost
  std::atomic<bool> alarm_{false};
};

}  // namespace gsync::transport
