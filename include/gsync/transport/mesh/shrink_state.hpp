#pragma once
/// \file
/// What one rank's endpoint keeps for shrinking to the survivors (transport/mesh/shrink.ipp):
/// its recovery listener and the store it serves there once it has coordinated, the round each
/// communicator's shrink is at, and what a shrink's set-up does differently from the job's
/// start (`rejoin`). Part of transport::host_mesh (transport/mesh/host_mesh.hpp).

#include <unistd.h>

#include <atomic>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "gsync/bootstrap/store_server.hpp"
#include "gsync/core/shrink_terms.hpp"

namespace gsync::transport {

namespace testing {
/// Test seam: when set, called on the shrinking thread at the named stages of a shrink with the
/// rank's number in the communicator being shrunk: "slot" (a join slot taken, the join not
/// recorded yet), "joined" (its join is recorded, the decision not read yet) and "agreed" (the
/// members are known, the new endpoint not set up yet). Tests make
/// a rank die there (tests/test_shrink.cpp, tests/mp_faults.cpp). Null unless a test sets it.
inline std::atomic<void (*)(int rank, const char* stage)> shrink_stage_hook{nullptr};
inline void shrink_stage(int rank, const char* stage) {
  if (auto* f = shrink_stage_hook.load(std::memory_order_acquire)) f(rank, stage);
}
}  // namespace testing

namespace detail_shrink {  // the agreement's records (shrink.ipp)
// "a b c" -> {a, b, c}, each in [0, n); false on anything else (the store is not trusted).
inline bool parse_ranks(std::string_view s, int n, std::vector<int>& out) {
  while (!s.empty()) {
    const auto sp = s.find(' ');
    const std::string_view t = s.substr(0, sp);
    int v = -1;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (t.empty() || ec != std::errc{} || end != t.data() + t.size() || v < 0 || v >= n) return false;
    out.push_back(v);
    s = sp == std::string_view::npos ? std::string_view{} : s.substr(sp + 1);
  }
  return true;
}
// "a b c" -> a, b, c as unsigned numbers, then the rest (after the third blank) in `rest`;
// false on anything else. The join records ("RANK OPS MIN_SIZE DEAD...") and decisions
// ("PORT AGREED_OPS MEMBERS...") start so.
inline bool parse_head(std::string_view s, std::size_t k, std::uint64_t* out, std::string_view& rest) {
  for (std::size_t i = 0; i < k; ++i) {
    const auto sp = s.find(' ');
    const std::string_view t = s.substr(0, sp);
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), out[i]);
    if (t.empty() || ec != std::errc{} || end != t.data() + t.size()) return false;
    s = sp == std::string_view::npos ? std::string_view{} : s.substr(sp + 1);
  }
  rest = s;
  return true;
}
// The answers to a join its coordinator will not decide (see host_mesh::close_agreement), and
// the one a coordinator without a quorum gives ("minority REACHED NEEDED", refuse_minority).
inline constexpr std::string_view closed = "closed", gone = "gone", minority = "minority";
inline std::string prefix(std::uint64_t comm) { return "shrink/" + std::to_string(comm) + "/"; }
inline std::string join_ranks(const std::set<int>& r) {
  std::string s;
  for (int v : r) s += (s.empty() ? "" : " ") + std::to_string(v);
  return s;
}
}  // namespace detail_shrink

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

/// What a shrink's agreement decided (shrink.ipp).
struct shrink_agreement {
  std::vector<int> members;                          // ranks in the communicator shrunk, ascending
  std::uint64_t agreed_ops = 0;                      // collectives every member completed
  int coordinator = -1;                              // the lowest of them, which serves the new store
  std::uint16_t store_port = 0;                      // where it serves it
  std::unique_ptr<bootstrap::store_server> server;   // that store, on the coordinator
};
/// The communicator a shrink is for (shrink.ipp).
struct shrink_round {
  const std::vector<int>& group;  // the communicator's ranks (ranks of this endpoint), in its order
  int me;                         // this rank's place in it
  std::string prefix;             // its keys in the agreement store
  std::uint64_t comm;             // its identity
  shrink_terms terms;             // this rank's (core/shrink_terms.hpp)
};

/// One endpoint's shrink bookkeeping.
struct shrink_state {
  int listen_fd = -1;  // the recovery listener, until this rank first coordinates (then the server's)
  std::shared_ptr<bootstrap::store_server> server;       // the agreement store this rank serves there
  std::shared_ptr<bootstrap::store_server> predecessor;  // the agreement store of the shrink that made this endpoint
  std::map<std::uint64_t, std::int64_t> served;           // per communicator: join slots answered here
  bool rejoining = false;                                 // this endpoint is a shrink's, setting up
  std::mutex m;                                           // one shrink at a time on this endpoint

  shrink_state() = default;
  shrink_state(const shrink_state&) = delete;
  shrink_state& operator=(const shrink_state&) = delete;
  ~shrink_state() {
    if (listen_fd >= 0) ::close(listen_fd);
  }
};

}  // namespace gsync::transport
