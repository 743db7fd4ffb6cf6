#pragma once
/// \file
/// What one rank's endpoint keeps for shrinking to the survivors (transport/mesh/shrink.ipp):
/// its recovery listener and the store it serves there once it has coordinated, the round each
/// communicator's shrink is at, and what a shrink's set-up does differently from the job's
/// start (`rejoin`). Part of transport::host_mesh (transport/mesh/host_mesh.hpp).

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "gsync/bootstrap/store_server.hpp"

namespace gsync::transport {

namespace testing {
/// Test seam: when set, called on the shrinking thread at the named stages of a shrink with the
/// rank's number in the communicator being shrunk: "joined" (its join is recorded, the decision
/// not read yet) and "agreed" (the members are known, the new endpoint not set up yet). Tests make
/// a rank die there (tests/test_shrink.cpp, tests/mp_faults.cpp). Null unless a test sets it.
inline std::atomic<void (*)(int rank, const char* stage)> shrink_stage_hook{nullptr};
inline void shrink_stage(int rank, const char* stage) {
  if (auto* f = shrink_stage_hook.load(std::memory_order_acquire)) f(rank, stage);
}
}  // namespace testing

/// How the set-up of a shrink's new endpoint differs from the job's start (shrink.ipp).
struct rejoin {
  /// Every member's set-up record must reach the store within this time of the set-up's start
  /// (they are all running and agreed a moment ago): a member missing then died during the shrink.
  std::chrono::milliseconds join_within{0};
  /// On failure: the members (new numbering) found dead or failed during the set-up.
  std::set<int> lost;
  /// The store of the agreement (the coordinator's), kept with the new endpoint so that a rank
  /// arriving late is told it was excluded rather than finding no coordinator.
  std::shared_ptr<bootstrap::store_server> keep;
};

/// One endpoint's shrink bookkeeping.
struct shrink_state {
  int listen_fd = -1;  // the recovery listener, until this rank first coordinates (then the server's)
  std::shared_ptr<bootstrap::store_server> server;       // the agreement store this rank serves there
  std::shared_ptr<bootstrap::store_server> predecessor;  // the agreement store of the shrink that made this endpoint
  std::map<std::uint64_t, int> rounds;                    // per communicator: the next round's number
  std::mutex m;                                           // one shrink at a time on this endpoint

  shrink_state() = default;
  shrink_state(const shrink_state&) = delete;
  shrink_state& operator=(const shrink_state&) = delete;
  ~shrink_state() {
    if (listen_fd >= 0) ::close(listen_fd);
  }
};

}  // namespace gsync::transport
