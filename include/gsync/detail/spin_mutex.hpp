#pragma once
/// \file
/// `detail::spin_mutex`: a lock for critical sections of a few dozen instructions that are almost
/// never contended (the operation counters). Taking it is one atomic exchange and releasing it a
/// plain store, where `std::mutex` pays an atomic read-modify-write for each (slower for a lock,
/// count and unlock: benchmarks/results/from_code_comments.md). A waiter spins with `pause`
/// and yields its core every 64 tries, so a holder that was preempted gets to finish. Meets the
/// standard's Lockable requirements (std::lock_guard, std::unique_lock).

#include <atomic>
#include <thread>

namespace gsync::detail {

class spin_mutex {
 public:
  spin_mutex() = default;
  spin_mutex(const spin_mutex&) = delete;
  spin_mutex& operator=(const spin_mutex&) = delete;

  /// Takes the lock, waiting as long as another thread holds it.
  void lock() noexcept {
    if (!locked_.exchange(true, std::memory_order_acquire)) return;
    lock_slow();
  }
  /// Takes the lock if it is free; true when it was taken.
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  /// Releases the lock (held by this thread).
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  void lock_slow() noexcept {
    for (unsigned tries = 1;; ++tries) {
      if (!locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire)) return;
      if (tries % 64 == 0) std::this_thread::yield();
#if defined(__x86_64__) || defined(__i386__)
      else __builtin_ia32_pause();
#endif
    }
  }

  std::atomic<bool> locked_{false};
};

}  // namespace gsync::detail
