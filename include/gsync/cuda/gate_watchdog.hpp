#pragma once
/// \file
/// The deadline of a staged gate when the progress engine itself stops: a user's stream waits for
/// a gate (cuda/staging.hpp) that only the communicator's engine opens, on success or on any
/// failure its waits detect; but an engine that never gets there (a user operator that never
/// returns, a `submit()` job blocked in user code) would hold the stream for ever. One thread per
/// process watches every closed gate: when its engine has made no progress (no operation or window
/// started or ended, `engine_shared::tick`) for the timeout plus a margin, it marks the
/// communicator broken (errc::timeout, naming the operation) and opens the gate, so the stream
/// goes on and the next call throws. The output of that operation is then unspecified, and the
/// staging state refuses to copy anything more into device memory (`device_state::abandon`).
/// A thread of our own (not Asio): it only sleeps until the nearest deadline.

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <unistd.h>

#include "gsync/core/error.hpp"
#include "gsync/core/request.hpp"

namespace gsync::cuda::detail {

/// What the watchdog needs of a gate's owner (cuda/staging.hpp `device_state`).
class gate_owner {
 public:
  virtual ~gate_owner() = default;
  /// True once gate `value` is open.
  virtual bool opened(std::uint64_t value) const noexcept = 0;
  /// Refuses further copies into device memory, then opens every gate closed so far.
  virtual void abandon() noexcept = 0;
};

/// The process's watchdog of closed gates (see the file comment).
class gate_watchdog {
 public:
  using clock = std::chrono::steady_clock;

  /// The process's watchdog (its thread starts with the first watch).
  static gate_watchdog& instance() {
    static gate_watchdog w;
    return w;
  }

  /// Watches gate `value` of `owner`, closed now for operation `what` of the engine `eng`, whose
  /// timeout is `limit`: it fires once the engine has made no progress for `limit` plus a margin
  /// (a quarter of it and a second, so that the engine's own failure path, which names the peer
  /// it waited for, normally comes first).
  /// Never throws: where the thread or the entry cannot be made, the gate goes unwatched (as
  /// before this watchdog) rather than failing an operation whose tickets are already taken.
  /// A new entry is due no earlier than the thread's next wake-up (at most a second away), so it
  /// is not woken.
  void watch(std::weak_ptr<gate_owner> owner, std::uint64_t value, std::shared_ptr<gsync::detail::engine_shared> eng,
             std::chrono::milliseconds limit, std::string what) noexcept {
    try {
      std::lock_guard lk(m_);
      entries_.push_back(entry{std::move(owner), value, std::move(eng), limit + limit / 4 + std::chrono::seconds(1), clock::now(), std::move(what)});
      if (thread_ && pid_ != ::getpid()) thread_ = nullptr;  // a forked child: the parent's thread is not here (its object is leaked)
      if (!thread_) {
        thread_ = new std::thread([this] { loop(); });
        pid_ = ::getpid();
      }
    } catch (...) {
    }
  }

  ~gate_watchdog() {
    {
      std::lock_guard lk(m_);
      stop_ = true;
      cv_.notify_one();
    }
    if (thread_ && pid_ == ::getpid()) {
      thread_->join();
      delete thread_;
    }
  }

 private:
  struct entry {
    std::weak_ptr<gate_owner> owner;
    std::uint64_t value;
    std::shared_ptr<gsync::detail::engine_shared> eng;
    std::chrono::milliseconds allowed;
    clock::time_point closed;
    std::string what;
    clock::time_point due() const noexcept { return std::max(closed, eng->last_progress()) + allowed; }
  };

  gate_watchdog() = default;

  void loop() {
    std::unique_lock lk(m_);
    while (!stop_) {
      const auto now = clock::now();
      auto next = now + std::chrono::seconds(1);  // also drops entries whose gates opened
      std::vector<std::pair<std::shared_ptr<gate_owner>, entry>> fire;
      // Owners are released only after the lock: the last reference may destroy one, which waits.
      std::vector<std::shared_ptr<gate_owner>> seen;
      for (std::size_t i = 0; i < entries_.size();) {
        entry& e = entries_[i];
        std::shared_ptr<gate_owner> o = e.owner.lock();
        if (o) seen.push_back(o);
        if (!o || o->opened(e.value)) {
          entries_[i] = std::move(entries_.back());
          entries_.pop_back();
          continue;
        }
        if (const auto due = e.due(); due <= now) {
          fire.emplace_back(std::move(o), std::move(e));
          entries_[i] = std::move(entries_.back());
          entries_.pop_back();
          continue;
        } else {
          next = std::min(next, due);
        }
        ++i;
      }
      if (!fire.empty() || !seen.empty()) {
        lk.unlock();
        seen.clear();
        for (auto& [o, e] : fire) {
          e.eng->mark_broken(errc::timeout, "device staging: " + e.what + " held its CUDA stream, and the communicator's engine made no "
                                                "progress for " + std::to_string(e.allowed.count()) +
                                                " ms (a user operator or submit() job that does not return?); the stream was released "
                                                "with the output unspecified");
          o->abandon();
        }
        const bool fired = !fire.empty();
        fire.clear();
        lk.lock();
        if (fired) continue;
      }
      if (stop_) break;
      cv_.wait_until(lk, next);
    }
  }

  mutable std::mutex m_;
  std::condition_variable cv_;
  std::vector<entry> entries_;
  bool stop_ = false;
  std::thread* thread_ = nullptr;  // a pointer, so a forked child can leave the parent's alone
  pid_t pid_ = 0;                  // the process that started it
};

}  // namespace gsync::cuda::detail
