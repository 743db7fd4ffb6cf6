#pragma once
/// \file
/// The control page of one rank of a CUDA IPC group: a page of POSIX shared memory, mapped by
/// every rank of the group and registered with CUDA, holding the monotonic 64-bit counters that
/// order the group's streams (written and waited on by stream memory operations, so no kernel ever
/// spins on another process's kernel: without MPS, kernels of two processes sharing a GPU do not
/// run at the same time) and the words through which a failure reaches every rank.
///
/// Because the counters live in host memory, the host can see them too: the watchdog
/// (cuda/ipc_group.hpp) names the rank that never arrived, and on a failure writes peers' counters
/// forward so that no stream waits forever. Counters only grow; a waiter compares cyclically
/// ((int64)(word - value) >= 0), as cuStreamWaitValue64's GEQ does.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gsync/core/error.hpp"
#include "gsync/cuda/api.hpp"
#include "gsync/cuda/stream_holds.hpp"
#include "gsync/detail/posix_shm.hpp"
#include "gsync/detail/random.hpp"

namespace gsync::cuda::ipc {

/// Entries of a page's signature ring (the mismatch check of consecutive steps).
inline constexpr std::size_t signature_slots = 64;

/// The control page of one rank. Counters are written by the owner's stream (or, on failure, by
/// any rank's watchdog); the abort words by any rank.
struct control_page {
  alignas(64) std::uint64_t arrive = 0;   ///< last step whose chunk is in the owner's slot
  alignas(64) std::uint64_t reduced = 0;  ///< two-shot: last step whose slice the owner reduced
  alignas(64) std::uint64_t done = 0;     ///< last step the owner finished reading its peers
  alignas(64) std::uint64_t closed = 0;   ///< 1: the owner closed its mappings of peers' arenas
  alignas(64) std::uint64_t abort_by = 0;  ///< 0, or 1 + the rank that reported a failure first
  alignas(64) char why[256] = {};          ///< the owner's failure report (written before abort_by)
  /// What the owner's host enqueued at step g, in entry g mod signature_slots: {g, signature}.
  struct alignas(16) signature_entry {
    std::uint64_t step = 0;
    std::uint64_t sig = 0;
  };
  alignas(64) signature_entry sigs[signature_slots] = {};
};
static_assert(sizeof(control_page) <= 4096);

/// Bytes mapped per page.
inline constexpr std::size_t page_bytes = 4096;

/// Atomic view of a counter.
inline std::atomic_ref<std::uint64_t> word(std::uint64_t& w) noexcept { return std::atomic_ref<std::uint64_t>(w); }

/// True when counter value `have` has reached `want` (cyclic compare).
inline bool reached(std::uint64_t have, std::uint64_t want) noexcept { return static_cast<std::int64_t>(have - want) >= 0; }

/// A mapping of one control page (its own, created; or a peer's, opened by name).
class page_mapping {
 public:
  /// Creates a fresh page with a unique name and maps it. Throws errc::system on failure.
  static page_mapping create() {
    for (int attempt = 0;; ++attempt) {
      char what[32];
      std::snprintf(what, sizeof what, "ipc-%016llx", static_cast<unsigned long long>(gsync::detail::random::u64()));
      const std::string name = gsync::detail::shm_name(static_cast<long>(::getpid()), what);
      gsync::detail::posix_shm::failure why;
      page_mapping m;
      m.m_ = gsync::detail::posix_shm::create(name, page_bytes, /*populate=*/false, why);
      if (!m.m_ && why.err == EEXIST && attempt < 8) continue;
      if (!m.m_ && why.call == std::string_view("posix_fallocate"))
        throw error(errc::system, "cannot reserve a page of shared memory for " + name + ": " + std::strerror(why.err) +
                                      " (is /dev/shm full? GSYNC_CUDA_IPC_DISABLE=1 keeps device collectives on host staging)");
      if (!m.m_) throw error(errc::system, std::string(why.call) + "(" + name + ", create): " + std::strerror(why.err));
      new (m.m_.data()) control_page{};
      return m;
    }
  }

  /// Maps the existing page `name` (a peer's). Throws errc::system on failure.
  static page_mapping open(const std::string& name) {
    gsync::detail::posix_shm::failure why;
    page_mapping m;
    m.m_ = gsync::detail::posix_shm::open(name, page_bytes, /*populate=*/false, why);
    if (!m.m_ && why.err == EBADMSG) throw error(errc::mismatch, "CUDA IPC control page " + name + " has an unexpected size");
    if (!m.m_)
      throw error(errc::system, std::string(why.call) + "(" + name + "): " + std::strerror(why.err) + " (ranks of one machine must run as the same user)");
    return m;
  }

  control_page& page() const noexcept { return *reinterpret_cast<control_page*>(m_.data()); }  ///< the page
  void* base() const noexcept { return m_.data(); }                                           ///< its address
  const std::string& name() const noexcept { return m_.name(); }                              ///< its name
  /// Forgets the mapping without unmapping it (memory still registered with CUDA stays mapped).
  void* release_mapping() noexcept { return m_.release_mapping(); }
  /// Removes the name (the page lives on while mapped). Idempotent.
  void unlink() noexcept { m_.unlink(); }

 private:
  gsync::detail::posix_shm m_;
};

/// A control page as the ranks of one process share it: one mapping per page and process (so ranks
/// of one process address a page alike, and it stays mapped while any of them uses it), registered
/// with CUDA once, unregistered and unmapped when the last user lets go.
class shared_page {
 public:
  /// This process's mapping of this rank's new page.
  static std::shared_ptr<shared_page> create() { return remember(page_mapping::create()); }
  /// This process's mapping of page `name` (mapped now unless a rank of this process holds it).
  static std::shared_ptr<shared_page> open(const std::string& name) {
    {
      std::lock_guard lk(registry_mutex());
      if (auto* w = find(name))
        if (auto p = w->lock()) return p;
    }
    return remember(page_mapping::open(name));
  }
  shared_page(const shared_page&) = delete;
  shared_page& operator=(const shared_page&) = delete;
  ~shared_page() {
    if (api_) {
      try {  // unregistering synchronises the device: only while gsync holds no stream there
        gsync::cuda::detail::stream_holds::instance().exclusive(device_, std::chrono::steady_clock::now() + std::chrono::seconds(30),
                                                                "CUDA IPC teardown", [&] { api_->unregister_host(m_.base()); });
      } catch (...) {
        // left registered (and mapped) rather than a device wait risked
        (void)m_.release_mapping();
      }
    }
    std::lock_guard lk(registry_mutex());
    auto& r = registry();
    for (auto it = r.begin(); it != r.end(); ++it)
      if (it->first == m_.name()) {
        if (it->second.expired()) r.erase(it);
        break;
      }
  }

  control_page& page() const noexcept { return m_.page(); }  ///< the page
  void* base() const noexcept { return m_.base(); }          ///< its address in this process
  const std::string& name() const noexcept { return m_.name(); }  ///< its name
  void unlink() noexcept { m_.unlink(); }                   ///< removes its name (see page_mapping)
  /// Registers the page with `api` for `device` (once per process; later calls do nothing). The
  /// caller passes gsync's door for device-synchronising calls (cuda/stream_holds.hpp).
  void register_with(runtime_api& api, int device) {
    std::lock_guard lk(m_mutex_);
    if (api_) return;
    api.register_host(m_.base(), page_bytes);
    api_ = &api;
    device_ = device;
  }

 private:
  explicit shared_page(page_mapping m) : m_(std::move(m)) {}
  static std::shared_ptr<shared_page> remember(page_mapping m) {
    std::shared_ptr<shared_page> p(new shared_page(std::move(m)));
    std::lock_guard lk(registry_mutex());
    if (auto* w = find(p->name())) *w = p;
    else registry().emplace_back(p->name(), p);
    return p;
  }
  // A few pages per process (one per rank of a node): a vector searched in order.
  static std::vector<std::pair<std::string, std::weak_ptr<shared_page>>>& registry() {
    static std::vector<std::pair<std::string, std::weak_ptr<shared_page>>> r;
    return r;
  }
  static std::weak_ptr<shared_page>* find(const std::string& name) {
    for (auto& e : registry())
      if (e.first == name) return &e.second;
    return nullptr;
  }
  static std::mutex& registry_mutex() {
    static std::mutex m;
    return m;
  }
  page_mapping m_;
  std::mutex m_mutex_;
  runtime_api* api_ = nullptr;
  int device_ = 0;
};

}  // namespace gsync::cuda::ipc
