#pragma once
/// \file
/// `gsync::memory_registration`: the handle `communicator::register_memory(span)` returns, as
/// ncclCommRegister's. While it lives, the buffer is registered with every RDMA adapter the
/// communicator's links use, and sends of large payloads from inside it go to the peers without a
/// copy (transport/links/verbs_link.hpp); its end deregisters (once no write still reads it).
/// The buffer must stay allocated while the handle lives: a registration pins the pages it had,
/// so memory freed and allocated again at the same address would be sent from the old pages.
/// Nothing else keeps registrations: a buffer without a handle is copied, as before.
/// Without RDMA links (one host, TCP, shared memory) the handle holds nothing and costs nothing.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace gsync {

/// What keeps one adapter's registration of a buffer alive (a link's: verbs::user_region).
struct registration_hold {
  virtual ~registration_hold() = default;
  /// Writes that have read the buffer where it lies (no copy) so far.
  mutable std::atomic<std::uint64_t> zero_copy_writes{0};
};

/// A user buffer's registrations (see the file comment). Move-only; empty when default-made.
class memory_registration {
 public:
  memory_registration() = default;
  /// `bytes` registered through `holds` (one per adapter; each keeps its registration alive).
  memory_registration(std::span<const std::byte> bytes, std::vector<std::shared_ptr<const registration_hold>> holds)
      : bytes_(bytes), holds_(std::move(holds)) {}
  memory_registration(memory_registration&& o) noexcept : bytes_(std::exchange(o.bytes_, {})), holds_(std::move(o.holds_)) { o.holds_.clear(); }
  memory_registration& operator=(memory_registration&& o) noexcept {
    if (this != &o) {
      bytes_ = std::exchange(o.bytes_, {});
      holds_ = std::move(o.holds_);
      o.holds_.clear();
    }
    return *this;
  }
  memory_registration(const memory_registration&) = delete;
  memory_registration& operator=(const memory_registration&) = delete;

  /// The buffer registered.
  std::span<const std::byte> bytes() const noexcept { return bytes_; }
  /// Adapters it is registered with (0: no RDMA link needed it).
  std::size_t adapters() const noexcept { return holds_.size(); }
  /// Writes so far that sent from the buffer without a copy (whether the registration is used).
  std::uint64_t zero_copy_writes() const noexcept {
    std::uint64_t n = 0;
    for (const auto& h : holds_) n += h->zero_copy_writes.load(std::memory_order_relaxed);
    return n;
  }
  /// Ends the registration now (as the destructor does): later sends from the buffer are copied.
  void reset() noexcept {
    holds_.clear();
    bytes_ = {};
  }

 private:
  std::span<const std::byte> bytes_;
  std::vector<std::shared_ptr<const registration_hold>> holds_;
};

}  // namespace gsync
