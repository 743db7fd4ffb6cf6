#pragma once
/// \file
/// The endpoint's lock in shared mode: once several communicators share one endpoint
/// (transport::host_mesh, `share()`), possibly from several threads, every entry point holds the
/// endpoint's mutex (owned by `shared_mode`, transport/mesh/shared_mode.hpp, taken through its
/// `lock`) except while it waits (poll, doorbell sleep, spin, yield) or a reduction consumes a
/// piece. Before that nothing is locked: one communicator, one thread at a time. A thread that
/// already holds an endpoint's lock (an entry point calling another) does not take it again; each
/// thread remembers the lock it holds, and on which endpoint, so that a wait deep in the call can
/// release and retake it.

#include <atomic>
#include <mutex>

namespace gsync::transport {

class mesh_call_lock {
 public:
  /// Takes `mu` when `multi` is set and this thread does not hold `owner`'s lock already.
  mesh_call_lock(const void* owner, const std::atomic<bool>& multi, std::mutex& mu) {
    if (!multi.load(std::memory_order_acquire)) return;
    slot& h = held();
    if (h.owner == owner) return;  // already held by this thread
    lk_ = std::unique_lock<std::mutex>(mu);
    prev_ = h;
    h = slot{owner, &lk_};
    set_ = true;
  }
  mesh_call_lock(const mesh_call_lock&) = delete;
  mesh_call_lock& operator=(const mesh_call_lock&) = delete;
  ~mesh_call_lock() {
    if (set_) held() = prev_;
  }
  /// True when this object took the lock.
  bool locked() const noexcept { return set_; }
  /// The lock this thread holds on `owner` (and holds now), else null.
  static std::unique_lock<std::mutex>* held_on(const void* owner) noexcept {
    const slot& h = held();
    return h.owner == owner && h.lk && h.lk->owns_lock() ? h.lk : nullptr;
  }

 private:
  struct slot {
    const void* owner = nullptr;
    std::unique_lock<std::mutex>* lk = nullptr;
  };
  static slot& held() noexcept {
    static thread_local slot s;
    return s;
  }
  std::unique_lock<std::mutex> lk_;
  slot prev_{};
  bool set_ = false;
};

}  // namespace gsync::transport
