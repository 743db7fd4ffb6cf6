#pragma once
/// \file
/// `transport::waiter`: how a rank's thread waits on descriptors (a busy poll, then polls that
/// yield the core, then poll(2) blocking), with the eventfd that another thread writes to end a
/// blocked poll (shared mode: it queued sends; always: the heartbeat's alarm, an abort). It owns
/// that descriptor, the count of threads blocked in poll(2), the per-thread descriptor sets and
/// the count of late doorbell wake-ups; what to watch and what to do with what came is the mesh's
/// (progress.ipp).

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <vector>

namespace gsync::transport {

class waiter {
 public:
  /// Descriptors to poll, each with who it stands for (a peer's rank, or one of the slots below).
  struct poll_set {
    std::vector<pollfd> fds;
    std::vector<int> idx;
    void clear() noexcept {
      fds.clear();
      idx.clear();
    }
    void add(int fd, short events, int who) {
      fds.push_back({fd, events, 0});
      idx.push_back(who);
    }
    std::size_t size() const noexcept { return fds.size(); }
  };
  static constexpr int wake_slot = -1;  ///< poll_set::idx of the wake-up eventfd
  /// This thread's set (waits of several threads may overlap in shared mode).
  static poll_set& thread_set() noexcept {
    static thread_local poll_set p;
    return p;
  }

  waiter() = default;
  waiter(const waiter&) = delete;
  waiter& operator=(const waiter&) = delete;
  ~waiter() {
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  /// Opens the wake-up eventfd (idempotent). Without one, blocked polls end by their caps only.
  void open_wake() noexcept {
    if (wake_fd_ < 0) wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  }
  /// Ends a poll(2) blocked in `block` now or the next one; from any thread.
  void wake() noexcept {
    if (wake_fd_ < 0) return;
    const std::uint64_t one = 1;
    [[maybe_unused]] const auto w = ::write(wake_fd_, &one, sizeof one);
  }
  /// Wakes only when a thread is blocked in poll(2) (shared mode, under the endpoint's lock).
  void wake_pollers() noexcept {
    if (pollers_ > 0) wake();
  }

  /// Polls `ps` without blocking, again and again for `span` (giving the core away between polls
  /// when `yield`), until a descriptor is ready or `done()` says the wait is over. Returns
  /// poll's result, 0 when nothing came or `done()` ended it (then `ended` is set).
  /// `unlocked(f)` runs f with the endpoint's lock released (shared mode).
  template <class Unlocked, class Done>
  int spin(poll_set& ps, std::chrono::microseconds span, bool yield, Unlocked&& unlocked, Done&& done, bool& ended) {
    int r = 0;
    const auto until = std::chrono::steady_clock::now() + span;
    do {
      unlocked([&] {
        if (yield) ::sched_yield();
        r = ::poll(ps.fds.data(), ps.fds.size(), 0);
      });
      if (r == 0 && done()) return ended = true, 0;
    } while (r == 0 && std::chrono::steady_clock::now() < until);
    return r;
  }
  /// Blocks in poll(2) on `ps` and the wake-up eventfd, at most `ms`; poll's result.
  template <class Unlocked>
  int block(poll_set& ps, int ms, bool shared, Unlocked&& unlocked) {
    if (wake_fd_ >= 0) ps.add(wake_fd_, POLLIN, wake_slot);
    int r = 0;
    if (shared) ++pollers_;
    unlocked([&] { r = ::poll(ps.fds.data(), ps.fds.size(), ms); });
    if (shared) --pollers_;
    return r;
  }
  /// Empties the wake-up eventfd after it fired.
  void drain() noexcept {
    std::uint64_t v;
    [[maybe_unused]] const auto rd = ::read(wake_fd_, &v, sizeof v);
  }

  /// One pause of a busy wait.
  static void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  /// A doorbell sleep ran its full length although what it waited for had come: a lost wake-up.
  void late_wakeup() noexcept { ++late_wakeups_; }
  std::uint64_t late_wakeups() const noexcept { return late_wakeups_; }

 private:
  int wake_fd_ = -1;
  int pollers_ = 0;  // threads blocked in poll(2) now (shared mode: under the endpoint's lock)
  std::uint64_t late_wakeups_ = 0;
};

}  // namespace gsync::transport
