#pragma once
/// \file
/// Shrinking to the survivors (`transport::tcp::shrink`, `communicator::shrink`): after a failure,
/// the ranks of a communicator still alive agree on who they are and set up a new endpoint among
/// themselves, numbered in their old order, without a relaunch, also when rank 0 (the store's
/// host) is the one lost. The job's world and every communicator made by `split` shrink alike,
/// each over its own ranks (keys per communicator and attempt: "shrink/COMM/ROUND/...").
///
/// How they agree (one coordinator decides, every survivor reads its decision):
///   - Each rank knows ranks it has seen die (`failure_state::dead()`: the rank a failure named as
///     lost first, a peer whose connection closed without a failure record, those the heartbeat
///     reported). The coordinator is the communicator's lowest rank not known dead.
///   - Every rank opened a recovery listener at set-up and published its port in its set-up record.
///     The first time a rank coordinates, it serves an agreement store there, kept for the
///     endpoint's life (keys per communicator: "shrink/COMM/..."). The others connect to it
///     (`GSYNC_LIVENESS_S` to connect, else they count it dead and try the next lowest), take a
///     join slot and record "rank + the ranks it knows dead" in it.
///   - The coordinator waits until every rank has joined or is known dead to someone, or for
///     twice the liveness time, then decides the members: the ranks that joined, minus every rank
///     any of them knows dead, with the fewest collectives any of them completed (each join
///     carries its count). It starts a fresh store for the new endpoint and answers every join
///     slot taken since its last decision with that store's port, the count and the members. A
///     rank on someone's dead list, or that joins after the decision, is told it was excluded
///     (errc::excluded). A coordinator that dies before answering is counted dead by the others,
///     who move on to the next lowest rank (a slot, not a round number, ties a join to its
///     answer, so a rank that never heard a decision joins the next coordinator like any).
///   - No split brain: the members must be a quorum of the communicator being shrunk (a
///     majority, or exactly half with its rank 0, or the largest min_size a joiner asked for:
///     core/shrink_terms.hpp). Each rank sets up at most one new endpoint per shrink, and each
///     set-up needs every member it names, so two endpoints would need two disjoint quorums,
///     which cannot exist. A coordinator that cannot reach a quorum (at once, when even the ranks
///     not known dead are too few, else at the end of its wait) decides nothing: it and the ranks
///     that joined it fail with errc::excluded (refuse_minority). So a rank cut off by a
///     partition, or stopped while the others went on and then resumed, never goes on alone.
///   - The members set up the new endpoint through that store, as at start-up (the coordinator is
///     its rank 0), with two differences (`rejoin`): a member whose set-up record is not in the
///     store within the liveness time of the decision died meanwhile, and the set-up is all or
///     nothing (every member waits for every other at its end; the last one's commit is refused
///     once a member is lost).
///   - If a member dies during that set-up, every member's set-up fails; they agree again without
///     the ranks the failed set-up found missing or lost, while the deadline allows. A
///     coordinator lost there is found dead when the others try it again.
///   - When its shrink ends, a rank closes its agreement store for the communicator: a join there
///     is answered at once rather than left waiting, "closed" (out: the others went on) when it
///     set up, "gone" (try the next rank) when it gave up.
/// Part of transport::host_mesh (transport/mesh/host_mesh.hpp); included by transport/mesh/impl.ipp.

#include "gsync/transport/mesh/host_mesh.hpp"

namespace gsync::transport {

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

// The coordinator's side (see the file comment): collects the joins not answered yet in its
// agreement store, decides, starts the new endpoint's store and answers each join with both.
// Without a quorum (core/shrink_terms.hpp) it decides nothing: see refuse_minority.
inline shrink_agreement host_mesh::coordinate_shrink(const shrink_round& sr, std::set<int> dead, deadline dl) {
  const int g = static_cast<int>(sr.group.size());
  bootstrap::store_server& agreement = recovery_store();
  shrink_agreement a;
  a.coordinator = sr.me;
  const auto& me = records_.mine();
  bootstrap::store_client sc(me.address, agreement.port(), dl, key_, liveness());
  sc.set(sr.prefix + "closed", "open", dl);  // (again) deciding
  std::int64_t& served = rec_.served[sr.comm];  // join slots answered by earlier decisions
  std::int64_t seen = served;
  std::set<std::int64_t> pending;  // join slots taken whose record has not arrived (its rank may have died in between)
  std::set<int> joined{sr.me};
  std::map<int, std::uint64_t> ops{{sr.me, sr.terms.completed_ops}};  // collectives each joiner completed
  int min_size = sr.terms.min_size;  // the largest any joiner asked for
  std::string seen_by;  // "R D1 D2": rank R saw ranks D1, D2 die (for the log)
  const auto until = std::min(dl, std::chrono::steady_clock::now() + 2 * liveness());
  for (;;) {
    const std::int64_t n = sc.add(sr.prefix + "n", 0, dl);
    for (; seen < n; ++seen) pending.insert(seen);
    std::vector<std::string> keys;
    std::vector<std::int64_t> slots;
    for (auto i : pending)
      if (sc.check(sr.prefix + "join/" + std::to_string(i), dl)) keys.push_back(sr.prefix + "join/" + std::to_string(i)), slots.push_back(i);
    if (!keys.empty()) {
      for (const auto& v : sc.get_many(keys, dl)) {
        std::uint64_t head[3];
        std::string_view rest;
        std::vector<int> r;
        if (!detail_shrink::parse_head(v, 3, head, rest) || head[0] >= static_cast<std::uint64_t>(g) || head[2] > static_cast<std::uint64_t>(g) ||
            !detail_shrink::parse_ranks(rest, g, r))
          throw error(errc::mismatch, "rank " + std::to_string(rank_) + ": shrink: bad join record '" + v.substr(0, 100) + "'");
        const int who = static_cast<int>(head[0]);
        joined.insert(who);
        ops[who] = head[1];
        min_size = std::max(min_size, static_cast<int>(head[2]));
        dead.insert(r.begin(), r.end());
        if (!r.empty()) seen_by += (seen_by.empty() ? "" : "; ") + std::to_string(who) + " " + std::string(rest);
      }
      for (auto i : slots) pending.erase(i);
    }
    dead.erase(sr.me);
    bool all = true;
    for (int r = 0; r < g && all; ++r) all = joined.count(r) || dead.count(r);
    // Every rank not known dead may still join: if even all of them are too few, waiting is pointless.
    const int could = g - static_cast<int>(dead.size());
    if (!detail::shrink_quorum(could, !dead.count(0), g, min_size)) {
      std::set<int> reached;
      for (int r : joined)
        if (!dead.count(r)) reached.insert(r);
      refuse_minority(sr, reached, dead, detail::shrink_needed(g, min_size, !dead.count(0)), seen);
    }
    if (all || std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::set<int> members;
  for (int r : joined)
    if (!dead.count(r)) members.insert(r);
  if (!detail::shrink_quorum(static_cast<int>(members.size()), members.count(0) != 0, g, min_size))
    refuse_minority(sr, members, dead, detail::shrink_needed(g, min_size, members.count(0) != 0), seen);
  a.members.assign(members.begin(), members.end());
  a.agreed_ops = ops[*members.begin()];
  for (int r : members) a.agreed_ops = std::min(a.agreed_ops, ops[r]);
  // The new endpoint's store: fresh for every attempt, so that a loss in a failed one does not
  // answer the next one's waits.
  a.server = std::make_unique<bootstrap::store_server>(me.address, 0, log_, key_, store_limits());
  a.store_port = a.server->port();
  const std::string decision = std::to_string(a.store_port) + " " + std::to_string(a.agreed_ops) + " " + detail_shrink::join_ranks(members);
  for (std::int64_t i = served; i < seen; ++i) sc.set(sr.prefix + "decision/" + std::to_string(i), decision, dl);
  served = seen;
  std::string gone;
  for (int r = 0; r < g; ++r)
    if (!members.count(r)) gone += (gone.empty() ? "" : ", ") + std::to_string(r);
  log_.info("shrink: rank " + std::to_string(sr.me) + " coordinated (" + sr.prefix + "); " + std::to_string(members.size()) + " of " +
            std::to_string(g) + " ranks go on" + (gone.empty() ? "" : ", without " + gone) + ", every one of them completed " +
            std::to_string(a.agreed_ops) + " collectives" + (seen_by.empty() ? "" : " (rank and the ranks it saw die: " + seen_by + ")"));
  return a;
}

// A coordinator that cannot gather a quorum: it may be the one cut off (a partition's smaller
// side, or stopped while the others went on), so neither it nor the ranks that joined it go on.
// It answers their joins so and fails with errc::excluded; a rank joining later is told "gone"
// (close_agreement) and tries the next rank, which may be on the larger side.
inline void host_mesh::refuse_minority(const shrink_round& sr, const std::set<int>& reached, const std::set<int>& dead, int need,
                                       std::int64_t seen) {
  const int g = static_cast<int>(sr.group.size());
  try {
    const deadline d = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    bootstrap::store_client sc(records_.mine().address, rec_.server->port(), d, key_, liveness());
    std::int64_t& served = rec_.served[sr.comm];
    const std::string mark = std::string(detail_shrink::minority) + " " + std::to_string(reached.size()) + " " + std::to_string(need);
    for (; served < seen; ++served) sc.set(sr.prefix + "decision/" + std::to_string(served), mark, d);
  } catch (...) {  // best effort: such a joiner then waits for its deadline
  }
  const std::string lost = dead.empty() ? std::string("none") : detail_shrink::join_ranks(dead);
  log_.warn("shrink: rank " + std::to_string(sr.me) + " reached " + std::to_string(reached.size()) + " of " + std::to_string(g) +
            " ranks (" + detail_shrink::join_ranks(reached) + "; known lost: " + lost + "), fewer than the " + std::to_string(need) +
            " a shrink needs: it does not go on");
  throw error(errc::excluded, "rank " + std::to_string(sr.me) + ": shrink: excluded: only " + std::to_string(reached.size()) + " of " +
                                  std::to_string(g) + " ranks could agree here (" + detail_shrink::join_ranks(reached) +
                                  "; ranks lost as seen from here: " + lost + "), and going on needs " + std::to_string(need) +
                                  " (a majority, half with rank 0, or shrink_options::min_size): this rank is cut off from the others, or they went on without it");
}

// After this rank's part in a shrink of communicator `comm` ended: no decision will come from its
// agreement store any more. Joins waiting there are answered, and a later one sees the mark at
// once, so that no rank waits for a decision until its deadline: "closed" when this rank set up
// the new endpoint (the joiner is out: the others went on without it), "gone" when it gave up
// (the joiner tries the next rank, as if this one had died). The mark goes up before the slots
// are counted: a join either took its slot before (and is answered) or sees the mark.
inline void host_mesh::close_agreement(std::uint64_t comm, bool done) noexcept {
  if (!rec_.server) return;
  try {
    const deadline d = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    const std::string p = detail_shrink::prefix(comm);
    bootstrap::store_client sc(records_.mine().address, rec_.server->port(), d, key_, liveness());
    const std::string mark(done ? detail_shrink::closed : detail_shrink::gone);
    sc.set(p + "closed", mark, d);
    std::int64_t& served = rec_.served[comm];
    const std::int64_t n = sc.add(p + "n", 0, d);
    for (; served < n; ++served) sc.set(p + "decision/" + std::to_string(served), mark, d);
  } catch (...) {  // best effort: such a rank then waits for its deadline
  }
}

// Finds the coordinator (the lowest rank not known dead that answers) and takes part in the
// agreement; returns the members decided. `dead`: ranks of the communicator known dead.
inline shrink_agreement host_mesh::agree_survivors(const shrink_round& sr, std::set<int> dead, deadline dl) {
  const int g = static_cast<int>(sr.group.size());
  dead.erase(sr.me);
  const auto live = liveness();
  std::string tried;
  for (;;) {
    int c = 0;
    while (dead.count(c)) ++c;
    if (c == sr.me) return coordinate_shrink(sr, dead, dl);
    const auto& rc = records_.of(sr.group[static_cast<std::size_t>(c)]);
    shrink_agreement a;
    a.coordinator = c;
    bool out = false;  // the coordinator has closed its agreement: this rank is out (not a reason to try the next rank)
    try {
      if (rc.recovery_port == 0) throw error(errc::peer_lost, "it published no recovery listener");
      // At least 3 s to connect: a stranger may hold the listener's backlog until the coordinator
      // accepts, and the kernel resends a dropped SYN after 1 s, then 2 s more.
      const auto connect_within = std::max<std::chrono::milliseconds>(live, std::chrono::seconds(3));
      bootstrap::store_client sc(rc.address, rc.recovery_port, dl, key_, live, std::min(dl, std::chrono::steady_clock::now() + connect_within));
      const std::int64_t slot = sc.add(sr.prefix + "n", 1, dl) - 1;
      testing::shrink_stage(sr.me, "slot");
      sc.set(sr.prefix + "join/" + std::to_string(slot),
             std::to_string(sr.me) + " " + std::to_string(sr.terms.completed_ops) + " " + std::to_string(sr.terms.min_size) +
                 (dead.empty() ? "" : " " + detail_shrink::join_ranks(dead)),
             dl);
      testing::shrink_stage(sr.me, "joined");
      std::string v;
      if (sc.check(sr.prefix + "closed", dl)) v = sc.get(sr.prefix + "closed", dl);  // see close_agreement
      if (v != detail_shrink::closed && v != detail_shrink::gone) v = sc.get(sr.prefix + "decision/" + std::to_string(slot), dl);
      if (v == detail_shrink::gone) throw error(errc::peer_lost, "it gave up its shrink");
      if (v == detail_shrink::closed) {
        out = true;
        throw error(errc::excluded, "rank " + std::to_string(sr.me) + ": shrink: excluded: rank " + std::to_string(c) +
                                        " no longer decides (the others went on without this rank)");
      }
      if (v.starts_with(detail_shrink::minority)) {
        out = true;
        throw error(errc::excluded, "rank " + std::to_string(sr.me) + ": shrink: excluded: rank " + std::to_string(c) +
                                        " coordinated and could not gather a quorum ('" + v.substr(0, 40) +
                                        "': ranks reached, ranks needed): these ranks are cut off from the others, or they went on without them");
      }
      std::uint64_t head[2];
      std::string_view rest;
      if (!detail_shrink::parse_head(v, 2, head, rest) || head[0] == 0 || head[0] > 65535 || !detail_shrink::parse_ranks(rest, g, a.members) ||
          a.members.empty() || a.members[0] != c)
        throw error(errc::mismatch, "rank " + std::to_string(rank_) + ": shrink: bad decision '" + v.substr(0, 100) + "' from rank " + std::to_string(c));
      a.store_port = static_cast<std::uint16_t>(head[0]);
      a.agreed_ops = head[1];
    } catch (const error& e) {
      if (out || e.kind() == errc::mismatch || e.kind() == errc::auth_failed || e.kind() == errc::invalid_argument || e.kind() == errc::excluded) throw;
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
      throw error(errc::excluded, "rank " + std::to_string(sr.me) + ": shrink: excluded by the survivors (rank " + std::to_string(c) +
                                       " coordinated: this rank joined too late, or another rank had seen it fail)");
    return a;
  }
}

// The endpoint over the survivors (see the file comment).
inline std::shared_ptr<host_mesh> host_mesh::shrink(std::chrono::milliseconds timeout, const shrink_terms& terms, shrink_report& report,
                                                    const std::vector<int>& group_in, std::uint64_t comm) {
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
    const std::set<int> job = fs_.dead();
    for (std::size_t i = 0; i < group.size(); ++i)
      if (job.count(group[i])) known.insert(static_cast<int>(i));
  }
  struct closing {  // whatever ends this call, this rank decides nothing more for `comm`
    host_mesh& m;
    std::uint64_t comm;
    bool done = false;
    ~closing() { m.close_agreement(comm, done); }
  } close_at_end{*this, comm};
  const shrink_round sr{group, me, detail_shrink::prefix(comm), comm, terms};
  for (std::size_t attempt = 1;; ++attempt) {
    shrink_agreement a = agree_survivors(sr, known, dl);
    testing::shrink_stage(me, "agreed");
    bootstrap::launch_info li;
    const auto& mine = records_.mine();
    bool placed = false;
    for (std::size_t i = 0; i < a.members.size(); ++i) {
      const int r = group[static_cast<std::size_t>(a.members[i])];
      if (r == rank_) li.rank = static_cast<int>(i), placed = true;
      if (records_.of(r).host == mine.host) {
        if (!placed) ++li.local_rank;  // same-host members before this one, in the new order
        ++li.local_size;
      }
    }
    li.size = static_cast<int>(a.members.size());
    li.master_addr = records_.of(group[static_cast<std::size_t>(a.coordinator)]).address;
    li.master_port = a.store_port;
    li.host_id = mine.host;
    li.source = "shrink";
    li.allow_unauthenticated = true;  // this job passed the check at its start (bootstrap::auth::require_key)
    rejoin rj;
    rj.join_within = liveness();
    rj.keep = rec_.server;
    try {
      auto next = std::make_shared<host_mesh>(li, std::chrono::duration_cast<std::chrono::milliseconds>(dl - std::chrono::steady_clock::now()),
                                              logger(li.rank), opt_given_, kit_->fresh(), std::move(a.server), &key_, &rj);
      // The links between hosts are the ones measured at the start (the same on every member).
      if (next->topo_.hosts() > 1 && topo_.links() && topo_.links()->measured) next->topo_.set_links(*topo_.links());
      log_.info("shrink: rank " + std::to_string(me) + " is rank " + std::to_string(li.rank) + " of " + std::to_string(li.size) + " after " +
                std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count()) + " ms" +
                (attempt > 1 ? " and " + std::to_string(attempt) + " attempts" : ""));
      close_at_end.done = true;
      report.agreed_ops = a.agreed_ops;
      report.my_ops = terms.completed_ops;
      report.old_size = static_cast<int>(group.size());
      report.old_ranks = a.members;
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
