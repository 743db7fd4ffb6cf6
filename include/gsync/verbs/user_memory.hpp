#pragma once
/// \file
/// User buffers registered with a device (`communicator::register_memory`), and the registry a
/// device keeps of them, which the verbs link looks a frame's payload up in: a payload inside a
/// registered buffer is written to the peer from where it lies, not through the link's mirror.
///
/// The registry holds no registration itself (weak references only): a buffer is registered
/// exactly while the caller's handle lives, or a write reading it is in flight (which holds a
/// reference of its own), and is deregistered when the last of them ends. So a buffer freed after
/// its handle ended and memory reused at the same address is never read through the old pinned
/// pages: nothing registers it again unless the caller does. Memory freed while its handle lives
/// is the caller's error, as with ncclCommRegister (the registration pins the old pages).

#include "gsync/verbs/library.hpp"

#if GSYNC_HAVE_VERBS
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "gsync/core/error.hpp"
#include "gsync/core/memory_registration.hpp"

namespace gsync::verbs {

/// One user buffer registered with one protection domain (for local reads: the source of RDMA
/// writes). Deregistered on destruction; keeps its owner (the device) alive until then.
class user_region : public registration_hold {
 public:
  /// Registers `bytes` with `pd`; `owner` (the device) outlives the registration. `where` names the
  /// device in messages; `hint(errno)` explains a failure (the locked-memory limit).
  user_region(const library& lib, ibv_pd* pd, std::shared_ptr<const void> owner, std::span<const std::byte> bytes,
              const std::string& where, std::string (*hint)(int))
      : lib_(&lib), owner_(std::move(owner)), begin_(bytes.data()), end_(bytes.data() + bytes.size()) {
    // Access 0: local reads only, so that read-only memory registers too.
    mr_ = lib.reg_mr(pd, const_cast<std::byte*>(begin_), bytes.size(), 0);
    if (!mr_) {
      const int e = errno;
      throw error(errc::system, "verbs: cannot register " + std::to_string(bytes.size()) + " bytes at " + address(begin_) + " with " +
                                    where + ": " + std::strerror(e) + (hint ? hint(e) : std::string()));
    }
  }
  user_region(const user_region&) = delete;
  user_region& operator=(const user_region&) = delete;
  ~user_region() {
    if (mr_) lib_->dereg_mr(mr_);
  }

  std::uint32_t lkey() const noexcept { return mr_->lkey; }
  const std::byte* begin() const noexcept { return begin_; }
  const std::byte* end() const noexcept { return end_; }
  /// True when [p, p+n) lies inside.
  bool covers(const std::byte* p, std::size_t n) const noexcept {
    return p >= begin_ && p <= end_ && n <= static_cast<std::size_t>(end_ - p);
  }

 private:
  static std::string address(const void* p) {
    char b[32];
    std::snprintf(b, sizeof b, "%p", p);
    return b;
  }
  const library* lib_;
  std::shared_ptr<const void> owner_;
  const std::byte* begin_;
  const std::byte* end_;
  ibv_mr* mr_ = nullptr;
};

/// The user buffers registered with one device (see the file comment). Thread-safe: the caller
/// registers from its own thread while a progress thread looks payloads up.
class region_registry {
 public:
  /// A registration covering `bytes`: a live one that already does, else a new one made by `make`.
  template <class Make>
  std::shared_ptr<const user_region> add(std::span<const std::byte> bytes, Make&& make) {
    std::lock_guard lk(m_);
    if (auto r = find_locked(bytes.data(), bytes.size())) return r;
    std::shared_ptr<const user_region> r = make();
    live_.push_back(r);
    count_.store(live_.size(), std::memory_order_release);
    return r;
  }
  /// The live registration that covers [p, p+n), or null. Cheap while nothing is registered.
  std::shared_ptr<const user_region> find(const std::byte* p, std::size_t n) const {
    if (count_.load(std::memory_order_acquire) == 0) return nullptr;
    std::lock_guard lk(m_);
    return find_locked(p, n);
  }
  /// Registrations still alive (tests: nothing is kept after the handles and writes end).
  std::size_t live() const {
    std::lock_guard lk(m_);
    prune();
    return live_.size();
  }

 private:
  // Drops the references whose registrations ended.
  void prune() const {
    std::erase_if(live_, [](const std::weak_ptr<const user_region>& w) { return w.expired(); });
    count_.store(live_.size(), std::memory_order_release);
  }
  std::shared_ptr<const user_region> find_locked(const std::byte* p, std::size_t n) const {
    prune();
    for (const auto& w : live_)  // a handful per program (one per bucket or arena): a scan is enough
      if (auto r = w.lock(); r && r->covers(p, n)) return r;
    return nullptr;
  }
  mutable std::mutex m_;
  mutable std::vector<std::weak_ptr<const user_region>> live_;
  mutable std::atomic<std::size_t> count_{0};
};

}  // namespace gsync::verbs

#endif  // GSYNC_HAVE_VERBS
