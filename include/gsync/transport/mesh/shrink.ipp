#pragma once
/// \file
/// Shrinking to the survivors (`transport::tcp::shrink`, `communicator::shrink`): after a failure,
/// the ranks of a communicator still alive agree on who they are and set up a new endpoint among
/// themselves, numbered in their old order, without a relaunch, also when rank 0 (the store's
/// host) is the one lost. The job's world and every communicator made by `split` shrink alike,
/// each over its own ranks (keys per communicator and attempt: "shrink/COMM/ROUND/...").
///
/// How they agree (one coordinator decides, every survivor reads its decision):
///   - Each rank knows ranks it has seen die (`dead_`: the rank a failure named as lost first, a
///     peer whose connection closed without a failure record; `hb_dead_`: those the heartbeat
///     reported). The coordinator is the communicator's lowest rank not known dead.
///   - Every rank opened a recovery listener at set-up and published its port in its set-up record.
///     The first time a rank coordinates, it serves an agreement store there, kept for the
///     endpoint's life. The others connect to it (`GSYNC_LIVENESS_S` to connect, else they count
///     it dead and try the next lowest), and each records "rank + the ranks it knows dead".
///   - The coordinator waits until every rank has joined or is known dead to someone, or for
///     twice the liveness time, then decides the members: the ranks that joined, minus every rank
///     any of them knows dead. It starts a fresh store for the new endpoint and publishes its port
///     with the members. A rank that joins later, or is on someone's dead list, is told it was
///     excluded (errc::peer_lost). A coordinator that dies before publishing is counted dead by
///     the others, who move on to the next lowest rank.
///   - The members set up the new endpoint through that store, as at start-up (the coordinator is
///     its rank 0), with two differences (`rejoin`): a member whose set-up record is not in the
///     store within the liveness time of the decision died meanwhile, and the set-up is all or
///     nothing (every member waits for every other at its end).
///   - If a member dies during that set-up, every member's set-up fails; they agree again (the
///     next round), without the ranks the failed set-up found missing or lost, while the
///     deadline allows. A coordinator lost there is found dead when the others try it again.
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

// The agreement store this rank serves on its recovery listener, started the first time it
// coordinates and kept for the endpoint's life (every later round and communicator uses it).
inline bootstrap::store_server& host_mesh::recovery_store() {
  if (!rec_.server) {
    if (rec_.listen_fd < 0)
      throw error(errc::system, "rank " + std::to_string(rank_) + ": shrink: this rank has no recovery listener (none could be opened at set-up) and cannot coordinate");
    const int fd = rec_.listen_fd;
    rec_.listen_fd = -1;  // the store owns it now, whatever happens
    rec_.server = std::make_shared<bootstrap::store_server>(fd, log_, key_, store_limits());
  }
  return *rec_.server;
}

// The coordinator's side (see the file comment): collects the joins in its agreement store,
// decides, starts the new endpoint's store and publishes both.
inline host_mesh::shrink_agreement host_mesh::coordinate_shrink(const shrink_round& sr, std::set<int> dead, deadline dl) {
  const int g = static_cast<int>(sr.group.size());
  bootstrap::store_server& agreement = recovery_store();
  shrink_agreement a;
  a.coordinator = sr.me;
  const auto& me = records_[static_cast<std::size_t>(rank_)];
  bootstrap::store_client sc(me.address, agreement.port(), dl, key_, liveness());
  std::set<int> joined{sr.me};
  std::string seen_by;  // "R D1 D2": rank R saw ranks D1, D2 die (for the log)
  std::int64_t seen = 0;
  const auto until = std::min(dl, std::chrono::steady_clock::now() + 2 * liveness());
  for (;;) {
    const std::int64_t n = sc.add(sr.prefix + "n", 0, dl);
    if (n > seen) {
      std::vector<std::string> keys;
      for (std::int64_t i = seen; i < n; ++i) keys.push_back(sr.prefix + "join/" + std::to_string(i));
      for (const auto& v : sc.get_many(keys, dl)) {
        std::vector<int> r;
        if (!detail_shrink::parse_ranks(v, g, r) || r.empty())
          throw error(errc::mismatch, "rank " + std::to_string(rank_) + ": shrink: bad join record '" + v.substr(0, 100) + "'");
        joined.insert(r[0]);
        dead.insert(r.begin() + 1, r.end());
        if (r.size() > 1) seen_by += (seen_by.empty() ? "" : "; ") + v;
      }
      seen = n;
    }
    dead.erase(sr.me);
    bool all = true;
    for (int r = 0; r < g && all; ++r) all = joined.count(r) || dead.count(r);
    if (all || std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::set<int> members;
  for (int r : joined)
    if (!dead.count(r)) members.insert(r);
  a.members.assign(members.begin(), members.end());
  // The new endpoint's store: fresh for every attempt, so that a loss in a failed one does not
  // answer the next one's waits.
  a.server = std::make_unique<bootstrap::store_server>(me.address, 0, log_, key_, store_limits());
  a.store_port = a.server->port();
  sc.set(sr.prefix + "store", std::to_string(a.store_port), dl);
  sc.set(sr.prefix + "members", detail_shrink::join_ranks(members), dl);
  std::string gone;
  for (int r = 0; r < g; ++r)
    if (!members.count(r)) gone += (gone.empty() ? "" : ", ") + std::to_string(r);
  log_.info("shrink: rank " + std::to_string(sr.me) + " coordinated (" + sr.prefix + "); " + std::to_string(members.size()) + " of " +
            std::to_string(g) + " ranks go on" + (gone.empty() ? "" : ", without " + gone) +
            (seen_by.empty() ? "" : " (rank and the ranks it saw die: " + seen_by + ")"));
  return a;
}

// Finds the coordinator (the lowest rank not known dead that answers) and takes part in the
// agreement; returns the members decided. `dead`: ranks of the communicator known dead.
inline host_mesh::shrink_agreement host_mesh::agree_survivors(const shrink_round& sr, std::set<int> dead, deadline dl) {
  const int g = static_cast<int>(sr.group.size());
  dead.erase(sr.me);
  const auto live = liveness();
  std::string tried;
  for (;;) {
    int c = 0;
    while (dead.count(c)) ++c;
    if (c == sr.me) return coordinate_shrink(sr, dead, dl);
    const auto& rc = records_[static_cast<std::size_t>(sr.group[static_cast<std::size_t>(c)])];
    shrink_agreement a;
    a.coordinator = c;
    try {
      if (rc.recovery_port == 0) throw error(errc::peer_lost, "it published no recovery listener");
      bootstrap::store_client sc(rc.address, rc.recovery_port, dl, key_, live, std::min(dl, std::chrono::steady_clock::now() + live));
      const std::int64_t idx = sc.add(sr.prefix + "n", 1, dl) - 1;
      sc.set(sr.prefix + "join/" + std::to_string(idx), std::to_string(sr.me) + (dead.empty() ? "" : " " + detail_shrink::join_ranks(dead)), dl);
      testing::shrink_stage(sr.me, "joined");
      const auto v = sc.get_many({sr.prefix + "members", sr.prefix + "store"}, dl);
      unsigned port = 0;
      const auto [end, ec] = std::from_chars(v[1].data(), v[1].data() + v[1].size(), port);
      if (!detail_shrink::parse_ranks(v[0], g, a.members) || a.members.empty() || a.members[0] != c || ec != std::errc{} ||
          end != v[1].data() + v[1].size() || port == 0 || port > 65535)
        throw error(errc::mismatch, "rank " + std::to_string(rank_) + ": shrink: bad decision '" + v[0].substr(0, 100) + "' / '" +
                                        v[1].substr(0, 20) + "' from rank " + std::to_string(c));
      a.store_port = static_cast<std::uint16_t>(port);
    } catch (const error& e) {
      if (e.kind() == errc::mismatch || e.kind() == errc::auth_failed || e.kind() == errc::invalid_argument) throw;
      if (std::chrono::steady_clock::now() >= dl)
        throw error(errc::timeout, "rank " + std::to_string(rank_) + ": shrink: no coordinator answered before the deadline (" + tried +
                                       "rank " + std::to_string(c) + ": " + e.what() + ")");
      // Not reachable (the process is gone, its host too) or gone while coordinating: the next.
      tried += "rank " + std::to_string(c) + ": " + e.what() + "; ";
      log_.info("shrink: rank " + std::to_string(sr.me) + ": rank " + std::to_string(c) + " does not coordinate (" + e.what() + "); trying the next");
      dead.insert(c);
      continue;
    }
    if (std::find(a.members.begin(), a.members.end(), sr.me) == a.members.end())
      throw error(errc::peer_lost, "rank " + std::to_string(sr.me) + ": shrink: excluded by the survivors (rank " + std::to_string(c) +
                                       " coordinated: this rank joined too late, or another rank had seen it fail)");
    return a;
  }
}

// The endpoint over the survivors (see the file comment).
inline std::shared_ptr<host_mesh> host_mesh::shrink(std::chrono::milliseconds timeout, const std::vector<int>& group_in, std::uint64_t comm) {
  const deadline dl = std::chrono::steady_clock::now() + timeout;
  const auto t0 = std::chrono::steady_clock::now();
  std::lock_guard one(rec_.m);
  std::vector<int> group = group_in;
  if (group.empty())
    for (int r = 0; r < size_; ++r) group.push_back(r);
  const auto at = std::find(group.begin(), group.end(), rank_);
  if (at == group.end()) throw error(errc::invalid_argument, "shrink: this rank is not in the communicator");
  const int me = static_cast<int>(at - group.begin());
  // Ranks of the communicator this rank knows dead: the rank a failure named, those the
  // heartbeat reported, then those lost in a failed attempt.
  std::set<int> known;
  {
    std::set<int> job = dead_;
    {
      std::lock_guard lk(hb_m_);
      job.insert(hb_dead_.begin(), hb_dead_.end());
    }
    for (std::size_t i = 0; i < group.size(); ++i)
      if (job.count(group[i])) known.insert(static_cast<int>(i));
  }
  for (std::size_t attempt = 1;; ++attempt) {
    const shrink_round sr{group, me, "shrink/" + std::to_string(comm) + "/" + std::to_string(rec_.rounds[comm]++) + "/"};
    shrink_agreement a = agree_survivors(sr, known, dl);
    testing::shrink_stage(me, "agreed");
    bootstrap::launch_info li;
    const auto& mine = records_[static_cast<std::size_t>(rank_)];
    for (std::size_t i = 0; i < a.members.size(); ++i) {
      const int r = group[static_cast<std::size_t>(a.members[i])];
      if (r == rank_) li.rank = static_cast<int>(i);
      if (records_[static_cast<std::size_t>(r)].host == mine.host) {
        if (r < rank_) ++li.local_rank;
        ++li.local_size;
      }
    }
    li.size = static_cast<int>(a.members.size());
    li.master_addr = records_[static_cast<std::size_t>(group[static_cast<std::size_t>(a.coordinator)])].address;
    li.master_port = a.store_port;
    li.host_id = mine.host;
    li.source = "shrink";
    li.allow_unauthenticated = true;  // this job passed the check at its start (bootstrap::auth::require_key)
    rejoin rj;
    rj.join_within = liveness();
    rj.keep = rec_.server;
    try {
      auto next = std::make_shared<host_mesh>(li, std::chrono::duration_cast<std::chrono::milliseconds>(dl - std::chrono::steady_clock::now()),
                                              logger(li.rank), opt_given_, std::move(a.server), &key_, &rj);
      log_.info("shrink: rank " + std::to_string(me) + " is rank " + std::to_string(li.rank) + " of " + std::to_string(li.size) + " after " +
                std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count()) + " ms" +
                (attempt > 1 ? " and " + std::to_string(attempt) + " attempts" : ""));
      return next;
    } catch (const error& e) {
      // A member lost while the new endpoint set up (after the agreement): every member's set-up
      // failed (it is all or nothing), so all of them agree again, without it.
      const bool again = e.kind() == errc::peer_lost || (e.kind() == errc::timeout && !rj.lost.empty());
      if (!again || std::chrono::steady_clock::now() >= dl || attempt >= group.size()) throw;
      std::string who;
      for (int r : rj.lost)
        if (r >= 0 && static_cast<std::size_t>(r) < a.members.size()) {
          known.insert(a.members[static_cast<std::size_t>(r)]);
          who += (who.empty() ? "" : ", ") + std::to_string(a.members[static_cast<std::size_t>(r)]);
        }
      log_.info("shrink: rank " + std::to_string(me) + ": the new communicator's set-up failed (" + e.what() + "); agreeing again" +
                (who.empty() ? "" : " without " + who));
    }
  }
}

}  // namespace gsync::transport
