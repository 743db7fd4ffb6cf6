#pragma once
/// \file
/// The steps of the host mesh's set-up, in the order the constructor (setup.ipp) runs them:
/// joining the store, the heartbeat, the ranks' records, the connections made at start-up, the
/// settings that follow from the placement, and what a failed set-up leaves for the others.
/// Part of transport::host_mesh (transport/mesh/host_mesh.hpp); included by transport/mesh/impl.ipp.

#include "gsync/transport/mesh/host_mesh.hpp"

namespace gsync::transport {

// Connects to the store and says hello as this rank.
inline void host_mesh::join_store(const bootstrap::launch_info& li, deadline dl, rejoin* rj) {
  // From hello on, if this rank dies the others hear of it from the store. Communicators made
  // one after another from the same variables meet at the same address: the previous one's
  // store (still waiting for its ranks to leave) turns this rank away, and it connects again
  // until the current one answers.
  // That store may also close while this rank is still talking to it (peer_lost): the same.
  for (;;) {
    try {
      // A shrink's store is up before its members hear of it: refused there means its host
      // (the coordinator, rank 0 of the new endpoint) is gone.
      const auto connect_by = rj ? std::optional<deadline>(std::min(dl, std::chrono::steady_clock::now() + rj->join_within)) : std::nullopt;
      store_ = std::make_unique<bootstrap::store_client>(li.master_addr, li.master_port, dl, key_, std::chrono::milliseconds(opt_.liveness_ms), connect_by);
      if (store_->hello(rank_, dl)) break;
    } catch (const error& e) {
      if (rj && rank_ != 0 && (e.kind() == errc::peer_lost || e.kind() == errc::timeout)) {
        rj->lost.insert(0);
        throw error(errc::peer_lost, "rank " + std::to_string(rank_) + ": shrink: the coordinator (rank 0 of the new communicator) is gone: " + e.what());
      }
      if (e.kind() != errc::peer_lost || std::chrono::steady_clock::now() + std::chrono::milliseconds(20) >= dl) throw;
    }
    store_.reset();
    if (std::chrono::steady_clock::now() + std::chrono::milliseconds(20) >= dl)
      throw error(errc::timeout, "rank " + std::to_string(rank_) + ": the gsync store at " + li.master_addr + ":" +
                                     std::to_string(li.master_port) + " still served a communicator that this rank had joined before, until the deadline (a communicator "
                                     "of this job made from the same variables is still open, or two processes claim rank " +
                                     std::to_string(rank_) + ")");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The heartbeat answers from now on (transport/mesh/heartbeat.hpp); it watches the ring once
// set-up has ended. GSYNC_LIVENESS_S=0 turns it off.
inline void host_mesh::start_heartbeat(const asio::ip::address& me) {
  if (opt_.liveness_ms <= 0 || size_ <= 1) return;
  hb_ = std::make_unique<heartbeat>(me, rank_, size_, std::chrono::milliseconds(opt_.liveness_ms), key_, log_);
  waiter_.open_wake();  // its alarm wakes a wait in poll(2)
}

// Publishes this rank's record and reads every rank's, with the job nonce.
inline void host_mesh::exchange_records(const bootstrap::launch_info& li, deadline dl, rejoin* rj) {
  // The job nonce ties every connection to this job: a stale rank of an earlier job on the same
  // port cannot slip in.
  if (rank_ == 0) store_->set("gsync/nonce", std::to_string(detail::random::u64()), dl);
  // Each rank publishes its record (listener, kernel, host) once and reads everyone's, with the
  // nonce, in one round trip (bootstrap/rank_record.hpp).
  const auto my_ep = listener_.acceptor().local_endpoint();
  bootstrap::rank_record mine{my_ep.address().to_string(), my_ep.port(), bootstrap::kernel_id(), bootstrap::host_id(li.host_id), recovery_port()};
  if (hb_) mine.heartbeat_port = hb_->port();
  store_->set(bootstrap::rank_record_key(rank_), mine.encode(), dl);
  {
    std::vector<std::string> keys{"gsync/nonce"};
    keys.reserve(static_cast<std::size_t>(size_) + 1);
    for (int j = 0; j < size_; ++j) keys.push_back(bootstrap::rank_record_key(j));
    std::vector<std::string> got;
    // A shrink's members are running and agreed a moment ago: one missing after `join_within`
    // died during the shrink, and the others go on without it (shrink.ipp).
    const deadline joined_by = rj ? std::min(dl, std::chrono::steady_clock::now() + rj->join_within) : dl;
    try {
      got = store_->get_many(keys, joined_by);
    } catch (const error& e) {
      if (e.kind() != errc::timeout) throw;
      std::vector<int> missing;
      const std::string which = missing_ranks(keys, &missing);
      std::erase(missing, 0);  // never the coordinator: it serves this store (if it were gone, so would the store be)
      if (rj && joined_by < dl && !missing.empty()) {
        // The others may fail first because this rank does (the store's lost-rank rule): they
        // read whom it found missing here, so that every member leaves out the same ranks.
        try {
          std::set<int> m(missing.begin(), missing.end());
          store_->set("gsync/missing", detail_shrink::join_ranks(m), std::chrono::steady_clock::now() + std::chrono::seconds(1));
        } catch (const error&) {
        }
        rj->lost.insert(missing.begin(), missing.end());
        throw error(errc::peer_lost, "rank " + std::to_string(rank_) + ": shrink: " + which + " within " +
                                         std::to_string(rj->join_within.count()) + " ms of the agreement (they died during the shrink)");
      }
      throw error(errc::timeout, "rank " + std::to_string(rank_) + ": " + which + " (" + e.what() + ")");
    }
    try {
      nonce_ = std::stoull(got[0]);
    } catch (const std::exception&) {
      throw error(errc::mismatch, "bad job nonce in the store: '" + got[0].substr(0, 40) + "'");
    }
    records_.take(rank_, mine, std::span<const std::string>(got).subspan(1));
  }
  log_.info("rank " + std::to_string(rank_) + "/" + std::to_string(size_) + " (local rank " + std::to_string(li.local_rank) +
            ", from " + li.source + " variables) transport tcp, listening on " + my_ep.address().to_string() + ":" +
            std::to_string(my_ep.port()) + ", store at " + li.master_addr + ":" + std::to_string(li.master_port));
}

// The connections made at start-up (connect.ipp), naming the root cause when one fails.
inline void host_mesh::connect_peers(deadline dl) {
  try {
    connect_at_start(dl);
  } catch (const error& e) {
    // A peer that vanished mid-handshake may itself have failed because another rank was lost
    // first: report that root cause when the store knows it.
    if (e.kind() == errc::timeout || e.kind() == errc::peer_lost)
      if (auto lost = lost_rank(); !lost.empty() && std::string_view(e.what()).find(lost) == std::string_view::npos)
        throw error(errc::peer_lost, "rank " + std::to_string(rank_) + ": " + lost + " (then: " + e.what() + ")");
    throw;
  }
}

// What follows from the placement and the links in use: the spin and yield settings left
// automatic, the transport's name, what a same-host hop costs, and the links between hosts
// (assumed until measure_links).
inline void host_mesh::settle_settings() {
  const bool net_given = opt_.net_gbps > 0 || opt_.net_latency_us > 0;
  topo_.set_cores_shared(cores_shared_);
  if (opt_.spin_us < 0) opt_.spin_us = cores_shared_ ? 0 : 50;
  struct medium {
    std::string_view name;
    int peers;
    bool shared;
    std::size_t type;
  };
  std::vector<medium> per_type;  // peers per data link type
  int nshm = 0;                  // peers whose data link shares memory with this rank
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    const link_port& l = data_link(p);
    nshm += l.costs.shared_memory;
    auto at = std::find_if(per_type.begin(), per_type.end(), [&](const medium& t) { return t.name == l.name; });
    if (at == per_type.end()) per_type.push_back({l.name, 1, l.costs.shared_memory, l.type});
    else ++at->peers;
  }
  std::sort(per_type.begin(), per_type.end(), [](const medium& a, const medium& b) { return a.type < b.type; });  // the list's order
  const int ntcp = size_ - 1 - nshm;  // peers over links that do not share memory
  if (opt_.yield_us < 0) opt_.yield_us = cores_shared_ && nshm > 0 && ntcp > 0 ? 0 : 2000;
  if (opt_.tcp_yield_us < 0) opt_.tcp_yield_us = cores_shared_ && nshm == 0 ? 50 : 0;
  name_.clear();  // the media in use, shared memory first: "shm", "tcp", "shm+tcp"
  for (bool shared : {true, false})
    for (const medium& t : per_type)
      if (t.shared == shared) name_ += (name_.empty() ? "" : "+") + std::string(t.name);
  if (name_.empty()) name_ = "tcp";  // a world of one
  // What the automatic choice prices a same-host hop with must be the same on every rank, or the
  // ranks choose different schedules: on one host, shared memory only when every pair uses it
  // (a rank whose segment failed leaves every rank with a TCP peer); across hosts, what the
  // options say (the same on every rank), whatever pairs fell back to TCP.
  const bool shm_costs = topo_.hosts() > 1 ? opt_.shm : nshm > 0 && ntcp == 0;
  const link_costs* shared = kit_->shared_memory_costs();
  local_costs_ = shm_costs && shared ? *shared : link_traits<tcp_link>::costs;
  local_costs_.name = name_;
  std::string how, reports;
  for (const medium& t : per_type) how += (how.empty() ? "" : ", ") + std::to_string(t.peers) + " over " + std::string(t.name);
  if (how.empty()) how = "none";
  if (const std::string r = kit_->report(); !r.empty()) reports = ", " + r;
  log_.info("peers: " + how + "; " + std::to_string(listener_.connected()) + " of " + std::to_string(size_ - 1) + " connected at start-up" +
            (opt_.lazy_connect && listener_.connected() < size_ - 1 ? ", the others on first use" : "") + " (" + std::to_string(local_size_) +
            " ranks on this host, " + std::to_string(machine_ranks_) + " on this machine, spin " +
            std::to_string(opt_.spin_us) + " us, yield " + std::to_string(opt_.yield_us) + " us, TCP yield " +
            std::to_string(opt_.tcp_yield_us) + " us" + reports + ")");
  if (topo_.hosts() > 1) {
    // Assumed (or given) until measure_links() times them (communicator::join calls it).
    const link_estimate links = detail::override_links({}, opt_.net_gbps, opt_.net_latency_us);
    topo_.set_links(links);
    if (!opt_.net_probe || (opt_.net_gbps > 0 && opt_.net_latency_us > 0))
      log_.info("links between hosts: " + detail::fixed(links.alpha_us, 1) + " us per message, " + detail::fixed(links.gbps(), 3) +
                " Gbit/s (" + (net_given ? "GSYNC_NET_GBPS / GSYNC_NET_LATENCY_US, else assumed" : "assumed (GSYNC_NET_PROBE=0)") + ")");
  }
}

// The end of set-up, once every rank is connected: the settings, the heartbeat's ring, and the
// wait for every rank to get this far (the names of the shared-memory segments can go then; a
// shrink commits).
inline void host_mesh::finish(deadline dl, rejoin* rj) {
  // Rank 0 serves the store: it must not return (and possibly tear the store down) before every
  // rank has finished looking up addresses. A rank with a shared-memory segment waits too: once
  // every rank is ready, every peer has mapped the segment and its name can go.
  if (store_->add("gsync/ready", 1, dl) == size_) store_->set("gsync/ready_all", "1", dl);
  if (rank_ == 0 || bell_owner()) store_->wait({"gsync/ready_all"}, dl);
  if (doorbell_owner* own = bell_owner()) own->unlink();
  staging_ = detail::make_aligned_bytes(opt_.staging_bytes);
  settle_settings();
  if (hb_) {
    const auto& next = records_.of((rank_ + 1) % size_);
    hb_->ring(next.address, next.heartbeat_port, nonce_, [this](const heartbeat::news& n) { on_heartbeat(n); });
  }
  rec_.rejoining = false;
  if (rj) {
    // A shrink's set-up is all or nothing: every member waits until all have set up. A member
    // lost before the last one arrives fails every wait here, the last one's commit included
    // (the store refuses a `gsync/commit/` key after a loss: bootstrap/store_protocol.hpp), so
    // that no member goes on with an endpoint the others have given up (shrink.ipp).
    if (store_->add("gsync/settled", 1, dl) == size_) store_->set("gsync/commit/settled", "1", dl);
    store_->wait({"gsync/commit/settled"}, dl);
  }
}

// A set-up failed: tell the store why (and, in a shrink, who was lost), let rank 0 serve the
// others a while, and throw the error (out of descriptors: which limit and how to raise it).
[[noreturn]] inline void host_mesh::failed_setup(const error& raised, rejoin* rj) {
  // Out of descriptors: say which limit and how to raise it, here and to the others.
  const error e = bootstrap::mentions_out_of_descriptors(raised) ? bootstrap::fd_exhausted(raised.what(), size_)
                  : server_ && server_->out_of_descriptors()
                      ? bootstrap::fd_exhausted("rank 0: the store cannot accept the ranks' connections (" + std::string(raised.what()) + ")", size_)
                      : raised;
  // Tell the store why, before its connection drops: the store then reports this rank as
  // failed for that reason, not as the first rank lost (which the others would blame).
  if (store_) {
    try {
      store_->set(failed_key(rank_), failure_record(e.kind(), e.what()), std::chrono::steady_clock::now() + std::chrono::seconds(1));
    } catch (const std::exception&) {
    }
  }
  if (rj) {  // for the next attempt of the shrink: who was lost (new numbering)
    for (int r : fs_.dead()) rj->lost.insert(r);
    if (store_) {
      if (const auto r = records::rank_lost(lost_rank()); r && *r != rank_ && *r < size_) rj->lost.insert(*r);
      try {  // another member found some missing first: which (see above)
        const deadline d = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        std::vector<int> m;
        if (store_->check("gsync/missing", d) && detail_shrink::parse_ranks(store_->get("gsync/missing", d), size_, m))
          rj->lost.insert(m.begin(), m.end());
      } catch (const error&) {
      }
    }
    rj->lost.erase(rank_);
  }
  if (server_) {
    // Serve the others a while so they read why, unless this rank could not reach its own store
    // (no reason recorded: the others would only wait for the linger to end).
    const bool recorded = store_ != nullptr;
    store_.reset();  // says goodbye: this rank is failing, not lost
    if (recorded) server_->linger(std::chrono::steady_clock::now() + store_linger, rj ? std::vector<int>(rj->lost.begin(), rj->lost.end()) : std::vector<int>{});
  }
  throw e;
}

}  // namespace gsync::transport
