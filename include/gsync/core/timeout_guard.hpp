#pragma once
/// \file
/// `gsync::timeout_guard`: what `communicator::with_timeout` returns (core/communicator.hpp). While
/// it lives, operations issued on that communicator use the per-call timeout; its end restores the
/// previous one (guards nest).

#include <atomic>
#include <cstdint>

#include "gsync/core/concepts.hpp"

namespace gsync {

template <transport_policy X>
class communicator;

/// Restores a communicator's previous per-call timeout when it goes out of scope.
class timeout_guard {
 public:
  timeout_guard(const timeout_guard&) = delete;
  timeout_guard& operator=(const timeout_guard&) = delete;
  ~timeout_guard() { slot_.store(prev_, std::memory_order_relaxed); }

 private:
  template <transport_policy X>
  friend class communicator;
  timeout_guard(std::atomic<std::int64_t>& slot, std::int64_t prev) : slot_(slot), prev_(prev) {}
  std::atomic<std::int64_t>& slot_;
  std::int64_t prev_;
};

}  // namespace gsync
