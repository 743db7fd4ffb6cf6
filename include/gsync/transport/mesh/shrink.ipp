#pragma once
/// \file
/// Shrinking to the survivors (`transport::tcp::shrink`, `communicator::shrink`): after a failure,
/// the ranks still alive agree on who they are and set up a new endpoint among themselves, numbered
/// in their old order, without a relaunch, also when rank 0 (the store's host) is the one lost.
///
/// How they agree (one coordinator decides, every survivor reads its decision):
///   - Each rank knows ranks it has seen die (`dead_`: the rank a failure named as lost first, a
///     peer whose connection closed without a failure record). The coordinator is the lowest rank
///     not known dead.
///   - Every rank opened a recovery listener at set-up and published its port in its set-up record
///     (never accepted on until now). The coordinator serves a fresh store on its own; the others
///     connect to it (`GSYNC_LIVENESS_S` to connect, else they count it dead and try the next
///     lowest), and each records "rank + the ranks it knows dead".
///   - The coordinator waits until every rank has joined or is known dead to someone, or for
///     twice the liveness time, then publishes the members: the ranks that joined, minus every
///     rank any of them knows dead. A rank that joins later, or is on someone's dead list, is told
///     it was excluded (errc::peer_lost). A coordinator that dies before publishing is counted dead
///     by the others, who move on to the next lowest rank.
///   - The members set up a new endpoint through the coordinator's store, as at start-up (the
///     coordinator is its rank 0); same key, same transport settings.
/// Part of transport::host_mesh (transport/mesh/host_mesh.hpp); included by transport/mesh/impl.ipp.

#include <charconv>
#include <set>

#include "gsync/transport/mesh/host_mesh.hpp"

namespace gsync::transport {

namespace detail_shrink {
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
inline std::string join_ranks(const std::set<int>& r) {
  std::string s;
  for (int v : r) s += (s.empty() ? "" : " ") + std::to_string(v);
  return s;
}
}  // namespace detail_shrink

// The coordinator's side (see the file comment): serves the store on the recovery listener,
// collects the joins, decides and publishes the members.
inline host_mesh::shrink_agreement host_mesh::coordinate_shrink(std::set<int> dead, deadline dl, std::chrono::milliseconds window) {
  if (rec_fd_ < 0) throw error(errc::invalid_argument, "rank " + std::to_string(rank_) + ": shrink: this endpoint has coordinated a shrink already");
  shrink_agreement a;
  a.coordinator = rank_;
  const int fd = rec_fd_;
  rec_fd_ = -1;  // the store owns it now
  a.server = std::make_unique<bootstrap::store_server>(fd, log_, key_, store_limits());
  const auto& me = records_[static_cast<std::size_t>(rank_)];
  bootstrap::store_client sc(me.address, me.recovery_port, dl, key_, liveness());
  std::set<int> joined{rank_};
  std::string seen_by;  // "R D1 D2": rank R saw ranks D1, D2 die (for the log)
  std::int64_t seen = 0;
  const auto until = std::min(dl, std::chrono::steady_clock::now() + window);
  for (;;) {
    const std::int64_t n = sc.add("shrink/n", 0, dl);
    if (n > seen) {
      std::vector<std::string> keys;
      for (std::int64_t i = seen; i < n; ++i) keys.push_back("shrink/join/" + std::to_string(i));
      for (const auto& v : sc.get_many(keys, dl)) {
        std::vector<int> r;
        if (!detail_shrink::parse_ranks(v, size_, r) || r.empty())
          throw error(errc::mismatch, "rank " + std::to_string(rank_) + ": shrink: bad join record '" + v.substr(0, 100) + "'");
        joined.insert(r[0]);
        dead.insert(r.begin() + 1, r.end());
        if (r.size() > 1) seen_by += (seen_by.empty() ? "" : "; ") + v;
      }
      seen = n;
    }
    dead.erase(rank_);
    bool all = true;
    for (int r = 0; r < size_ && all; ++r) all = joined.count(r) || dead.count(r);
    if (all || std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::set<int> members;
  for (int r : joined)
    if (!dead.count(r)) members.insert(r);
  a.members.assign(members.begin(), members.end());
  sc.set("shrink/members", detail_shrink::join_ranks(members), dl);
  std::string gone;
  for (int r = 0; r < size_; ++r)
    if (!members.count(r)) gone += (gone.empty() ? "" : ", ") + std::to_string(r);
  log_.info("shrink: rank " + std::to_string(rank_) + " coordinated; " + std::to_string(members.size()) + " of " +
            std::to_string(size_) + " ranks go on" + (gone.empty() ? "" : ", without " + gone) +
            (seen_by.empty() ? "" : " (rank and the ranks it saw die: " + seen_by + ")"));
  return a;
}

// Finds the coordinator (the lowest rank not known dead that answers) and takes part in the
// agreement; returns the members decided.
inline host_mesh::shrink_agreement host_mesh::agree_survivors(deadline dl) {
  std::set<int> dead = dead_;
  {
    std::lock_guard lk(hb_m_);  // and those the heartbeat reported (heartbeat.hpp)
    dead.insert(hb_dead_.begin(), hb_dead_.end());
  }
  dead.erase(rank_);
  const auto live = liveness();
  std::string tried;
  for (;;) {
    int c = 0;
    while (dead.count(c)) ++c;
    if (c == rank_) return coordinate_shrink(dead, dl, 2 * live);
    const auto& rc = records_[static_cast<std::size_t>(c)];
    try {
      if (rc.recovery_port == 0) throw error(errc::peer_lost, "it published no recovery listener");
      bootstrap::store_client sc(rc.address, rc.recovery_port, dl, key_, live, std::min(dl, std::chrono::steady_clock::now() + live));
      const std::int64_t idx = sc.add("shrink/n", 1, dl) - 1;
      std::set<int> mine = dead;
      sc.set("shrink/join/" + std::to_string(idx), std::to_string(rank_) + (mine.empty() ? "" : " " + detail_shrink::join_ranks(mine)), dl);
      const std::string v = sc.get("shrink/members", dl);
      shrink_agreement a;
      a.coordinator = c;
      if (!detail_shrink::parse_ranks(v, size_, a.members) || a.members.empty() || a.members[0] != c)
        throw error(errc::mismatch, "rank " + std::to_string(rank_) + ": shrink: bad member list '" + v.substr(0, 100) + "' from rank " + std::to_string(c));
      if (std::find(a.members.begin(), a.members.end(), rank_) == a.members.end())
        throw error(errc::peer_lost, "rank " + std::to_string(rank_) + ": shrink: excluded by the survivors (rank " + std::to_string(c) +
                                         " coordinated: this rank joined too late, or another rank had seen it fail)");
      return a;
    } catch (const error& e) {
      if (e.kind() == errc::mismatch || e.kind() == errc::auth_failed || e.kind() == errc::invalid_argument) throw;
      if (std::string_view(e.what()).find("excluded by the survivors") != std::string_view::npos) throw;
      if (std::chrono::steady_clock::now() >= dl)
        throw error(errc::timeout, "rank " + std::to_string(rank_) + ": shrink: no coordinator answered before the deadline (" + tried +
                                       "rank " + std::to_string(c) + ": " + e.what() + ")");
      // Not reachable (the process is gone, its host too) or gone while coordinating: the next.
      tried += "rank " + std::to_string(c) + ": " + e.what() + "; ";
      log_.info("shrink: rank " + std::to_string(rank_) + ": rank " + std::to_string(c) + " does not coordinate (" + e.what() + "); trying the next");
      dead.insert(c);
    }
  }
}

// The endpoint over the survivors (see the file comment).
inline std::shared_ptr<host_mesh> host_mesh::shrink(std::chrono::milliseconds timeout) {
  const deadline dl = std::chrono::steady_clock::now() + timeout;
  const auto t0 = std::chrono::steady_clock::now();
  shrink_agreement a = agree_survivors(dl);
  bootstrap::launch_info li;
  const auto& mine = records_[static_cast<std::size_t>(rank_)];
  for (std::size_t i = 0; i < a.members.size(); ++i) {
    const int r = a.members[i];
    if (r == rank_) li.rank = static_cast<int>(i);
    if (records_[static_cast<std::size_t>(r)].host == mine.host) {
      if (r < rank_) ++li.local_rank;
      ++li.local_size;
    }
  }
  li.size = static_cast<int>(a.members.size());
  const auto& rc = records_[static_cast<std::size_t>(a.coordinator)];
  li.master_addr = rc.address;
  li.master_port = rc.recovery_port;
  li.host_id = mine.host;
  li.source = "shrink";
  li.allow_unauthenticated = true;  // this job passed the check at its start (bootstrap::auth::require_key)
  auto next = std::make_shared<host_mesh>(li, std::chrono::duration_cast<std::chrono::milliseconds>(dl - std::chrono::steady_clock::now()),
                                          logger(li.rank), opt_given_, std::move(a.server), &key_);
  log_.info("shrink: rank " + std::to_string(rank_) + " is rank " + std::to_string(li.rank) + " of " + std::to_string(li.size) + " after " +
            std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count()) + " ms");
  return next;
}

}  // namespace gsync::transport
