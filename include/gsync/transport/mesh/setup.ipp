#pragma once
/// \file
/// Set-up of the host mesh (runs once, out of the data path): the store, the job nonce and the
/// ranks' set-up records, listening, the shared-memory rings, the connections made at start-up
/// (connect.ipp), the spin / yield settings and the start-up link probe; and the tear-down.
/// Part of transport::host_mesh (transport/mesh/host_mesh.hpp); included by transport/mesh/impl.ipp.

#include "gsync/transport/mesh/host_mesh.hpp"

namespace gsync::transport {

/// Rank 0 starts the store at any free port of its address and shares "ADDRESS PORT" through
/// `li.share_store` (launch_env.hpp); the others receive it. Rank 0 shares a failure too ("!why"),
/// so that no rank waits in the caller's broadcast for a store that will never exist.
inline void host_mesh::share_store(bootstrap::launch_info& li) {
  std::string text;
  if (rank_ == 0) {
    try {
      key_ = bootstrap::auth::job_key::resolve(li.job_key);
      const auto addr = li.master_addr.empty() ? bootstrap::own_address(io_, opt_.socket_ifname) : detail::resolve_host(io_, li.master_addr);
      bootstrap::auth::require_key(key_, !addr.is_loopback(), li.allow_unauthenticated, addr.to_string(), log_);
      server_ = std::make_unique<bootstrap::store_server>(addr.to_string(), 0, log_, key_, store_limits());  // that address only
      li.master_addr = addr.to_string();
      li.master_port = server_->port();
      text = li.master_addr + " " + std::to_string(li.master_port);
    } catch (const error& e) {
      text = std::string("!") + e.what();
      li.share_store(text);
      throw;
    }
    li.share_store(text);
    return;
  }
  li.share_store(text);
  if (text.starts_with('!')) throw error(errc::peer_lost, "rank " + std::to_string(rank_) + ": rank 0 could not start the store: " + text.substr(1));
  const auto sp = text.rfind(' ');
  unsigned long port = 0;
  try {
    port = sp == std::string::npos ? 0 : std::stoul(text.substr(sp + 1));
  } catch (const std::exception&) {
  }
  if (sp == std::string::npos || sp == 0 || port == 0 || port > 65535)
    throw error(errc::mismatch, "rank " + std::to_string(rank_) + ": rank 0 shared a bad store address '" + text.substr(0, 100) + "'");
  li.master_addr = text.substr(0, sp);
  li.master_port = static_cast<std::uint16_t>(port);
  key_ = bootstrap::auth::job_key::resolve(li.job_key);
}

/// Joins the job described by `li`: starts the store on rank 0, connects the full mesh.
/// Every wait of the setup ends at now + `timeout`.
inline host_mesh::host_mesh(const bootstrap::launch_info& given, std::chrono::milliseconds timeout, logger log, host_options opt,
                            std::unique_ptr<link_kit> kit, std::unique_ptr<bootstrap::store_server> server, const bootstrap::auth::job_key* key,
                            rejoin* rj)
    : rank_(given.rank), size_(given.size), log_(log), stall_(given.rank, given.size, opt.stall_warn_s, log, store_), opt_(opt), opt_given_(opt), acc_(io_), server_(std::move(server)),
      dial_timeout_(timeout), kit_(std::move(kit)) {
  if (!kit_) throw error(errc::invalid_argument, "transport: no link list");
  const deadline dl = std::chrono::steady_clock::now() + timeout;
  bootstrap::launch_info li = given;  // with the store's address, once shared
  if (rj) rec_.predecessor = rj->keep, rec_.rejoining = true;
  if (key) {
    key_ = *key;
  } else if (li.share_store) {
    share_store(li);
  } else {
    key_ = bootstrap::auth::job_key::resolve(li.job_key);
  }
  check_options(opt_);  // explicit values too: a bad one fails every rank the same way, before any connection
  const bool net_given = opt_.net_gbps > 0 || opt_.net_latency_us > 0;
  auto master = detail::resolve_host(io_, li.master_addr);
  // Every rank decides alike, before it opens a port: reachable beyond loopback needs a key.
  const std::string where = li.master_addr + ":" + std::to_string(li.master_port);
  bootstrap::auth::require_key(key_, !master.is_loopback(), li.allow_unauthenticated, where, log_);
  if (rank_ == 0 && !server_) {
    // The master's address only, never every interface (store_server says so when it is not
    // an address of this host).
    server_ = std::make_unique<bootstrap::store_server>(master.to_string(), li.master_port, log_, key_, store_limits());
  }
  // Rank 0 serves the store: if its set-up fails, it keeps serving until the others have left
  // (bounded), so that they fail naming the real cause rather than a vanished store.
  try {
    master_addr_ = li.master_addr;
    master_port_ = li.master_port;
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
    const auto me = bootstrap::pick_listen_address(io_, master, opt_.socket_ifname);
    bootstrap::auth::require_key(key_, !me.is_loopback(), li.allow_unauthenticated, where, log_);  // GSYNC_SOCKET_IFNAME
    listen(me);
    open_recovery_listener(me);
    // The heartbeat answers from now on (transport/mesh/heartbeat.hpp); it watches the ring once
    // set-up has ended (below). GSYNC_LIVENESS_S=0 turns it off.
    if (opt_.liveness_ms > 0 && size_ > 1) {
      hb_ = std::make_unique<heartbeat>(me, rank_, size_, std::chrono::milliseconds(opt_.liveness_ms), key_, log_);
      if (wake_fd_ < 0) wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);  // its alarm wakes a wait in poll(2)
    }
    // The job nonce ties every connection to this job: a stale rank of an earlier job on the same
    // port cannot slip in.
    if (rank_ == 0) store_->set("gsync/nonce", std::to_string(detail::random::u64()), dl);
    // Each rank publishes its record (listener, kernel, host) once and reads everyone's, with the
    // nonce, in one round trip (bootstrap/rank_record.hpp).
    const auto my_ep = acc_.local_endpoint();
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
      records_.reserve(static_cast<std::size_t>(size_));
      for (int j = 0; j < size_; ++j) records_.push_back(j == rank_ ? mine : bootstrap::rank_record::parse(got[static_cast<std::size_t>(j) + 1], j));
    }
    log_.info("rank " + std::to_string(rank_) + "/" + std::to_string(size_) + " (local rank " + std::to_string(li.local_rank) +
              ", from " + li.source + " variables) transport tcp, listening on " + my_ep.address().to_string() + ":" +
              std::to_string(my_ep.port()) + ", store at " + li.master_addr + ":" + std::to_string(li.master_port));
    peers_.resize(static_cast<std::size_t>(size_));  // placed once: a port may point at its peer's `ctl`
    for (auto& c : peers_) c.data = std::make_unique<link_port_of<tcp_link>>(0, c.ctl);  // until connect_links
    exchange_hosts(li);
    connect_links(dl);
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
    if (!opt_.lazy_connect) acc_.close();  // else it takes the connections made on first use
    // Rank 0 serves the store: it must not return (and possibly tear the store down) before every
    // rank has finished looking up addresses. A rank with a shared-memory segment waits too: once
    // every rank is ready, every peer has mapped the segment and its name can go.
    if (store_->add("gsync/ready", 1, dl) == size_) store_->set("gsync/ready_all", "1", dl);
    if (rank_ == 0 || bell_owner()) store_->wait({"gsync/ready_all"}, dl);
    if (doorbell_owner* own = bell_owner()) own->unlink();
    staging_ = detail::make_aligned_bytes(opt_.staging_bytes);
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
    log_.info("peers: " + how + "; " + std::to_string(connected_) + " of " + std::to_string(size_ - 1) + " connected at start-up" +
              (opt_.lazy_connect && connected_ < size_ - 1 ? ", the others on first use" : "") + " (" + std::to_string(local_size_) +
              " ranks on this host, " + std::to_string(machine_ranks_) + " on this machine, spin " +
              std::to_string(opt_.spin_us) + " us, yield " + std::to_string(opt_.yield_us) + " us, TCP yield " +
              std::to_string(opt_.tcp_yield_us) + " us" + reports + ")");
    if (topo_.hosts() > 1) {
      // The links between hosts, for the automatic choice of algorithms (core/links.hpp).
      link_estimate links = detail::override_links({}, opt_.net_gbps, opt_.net_latency_us);
      std::string how = net_given ? "GSYNC_NET_GBPS / GSYNC_NET_LATENCY_US, else assumed" : "assumed (GSYNC_NET_PROBE=0)";
      if (opt_.net_probe && !(opt_.net_gbps > 0 && opt_.net_latency_us > 0)) {
        const auto t0 = std::chrono::steady_clock::now();
        const probe_result pr = probe_links(*this, dl, cores_shared_);
        links = detail::override_links(pr.links, opt_.net_gbps, opt_.net_latency_us);
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
        how = "measured at start-up over the ring of " + std::to_string(size_) + " ranks in " + std::to_string(ms) +
              " ms: a step of 8 B takes " + detail::fixed(pr.small_step_us, 1) + " us, of 64 KiB " +
              detail::fixed(pr.mid_step_us, 1) + " us, of 1 MiB " + detail::fixed(pr.big_step_us, 1) + " us" +
              (pr.intra_step_us > 0 ? "; inside a host a step of 8 B takes " + detail::fixed(pr.intra_step_us, 1) + " us" : "") + (net_given ? "; GSYNC_NET_* given win" : "");
      }
      topo_.set_links(links);
      log_.info("links between hosts: " + detail::fixed(links.alpha_us, 1) + " us per message, " +
                detail::fixed(links.gbps(), 3) + " Gbit/s (" + how + ")" +
                (links.shared_msg_us > 0 ? "; ranks share cores: " + detail::fixed(links.shared_msg_us, 1) +
                                               " us of the machines' time per message" : ""));
    }
    if (hb_) {
      const auto& next = records_[static_cast<std::size_t>((rank_ + 1) % size_)];
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
  } catch (const error& raised) {
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
      rj->lost.insert(dead_.begin(), dead_.end());
      {
        std::lock_guard lk(hb_m_);
        rj->lost.insert(hb_dead_.begin(), hb_dead_.end());
      }
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
}

// Which of `keys` (the nonce, then every rank's set-up record) the store still lacks, in words,
// after set-up timed out waiting for them: one quick check per key, on this failure path only.
inline std::string host_mesh::missing_ranks(const std::vector<std::string>& keys, std::vector<int>* missing) {
  std::string who;
  bool nonce = false;
  try {
    const deadline d = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (store_->check(keys[i], d)) continue;
      if (i == 0) nonce = true;
      else {
        who += (who.empty() ? "" : ", ") + std::to_string(i - 1);
        if (missing) missing->push_back(static_cast<int>(i) - 1);
      }
    }
  } catch (const error&) {
    return "timed out at set-up waiting for the other ranks to join";
  }
  if (who.empty()) return nonce ? "timed out at set-up waiting for rank 0 to publish the job nonce" : "timed out at set-up";
  return "timed out at set-up waiting for ranks " + who +
         " to join: their set-up records never reached the store (not started, another store address or job key, or stuck before joining)";
}

// Refuses options no transport could run with, naming the field (and its variable).
inline void host_mesh::check_options(const host_options& o) {
  const auto bad = [](const std::string& what) { throw error(errc::invalid_argument, "host_options: " + what); };
  if (!host_options::valid_ring_bytes(o.shm_ring_bytes))
    bad("shm_ring_bytes (GSYNC_SHM_BYTES) = " + std::to_string(o.shm_ring_bytes) + " is not between 4K and 1G, multiple of 64");
  if (!host_options::valid_socket_buffer(o.socket_buffer_bytes))
    bad("socket_buffer_bytes (GSYNC_SOCKET_BUFFER) = " + std::to_string(o.socket_buffer_bytes) + " is not between 0 and 1G");
  if (o.staging_bytes < 64) bad("staging_bytes = " + std::to_string(o.staging_bytes) + " is below 64");
  if (o.stall_warn_s < 0) bad("stall_warn_s (GSYNC_STALL_WARN_S) is negative");
  if (o.spin_us < -1 || o.yield_us < -1 || o.tcp_yield_us < -1)
    bad("spin_us, yield_us and tcp_yield_us (GSYNC_SPIN_US, GSYNC_YIELD_US, GSYNC_TCP_YIELD_US) must be >= 0, or -1 for automatic");
  if (!(o.net_gbps >= 0) || !(o.net_latency_us >= 0))
    bad("net_gbps and net_latency_us (GSYNC_NET_GBPS, GSYNC_NET_LATENCY_US) must be positive, or 0 for measured");
}

inline host_mesh::~host_mesh() {
  hb_.reset();  // first: its thread reports into this object; its goodbye tells the neighbours this rank left
  std::vector<int> gone(dead_.begin(), dead_.end());  // lost ranks may hold their store connections (stopped): not waited for below
  {
    std::lock_guard lk(hb_m_);
    gone.insert(gone.end(), hb_dead_.begin(), hb_dead_.end());
  }
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (doorbell_owner* own = bell_owner())  // same-host peers still waiting for this rank learn at once that it is gone
    own->mark_failed(broken_ ? own->bell().failed.load(std::memory_order_relaxed) : shm_left | static_cast<std::uint32_t>(rank_ + 1));
  for (auto& p : peers_) p.tcp().close();
  if (server_) {  // rank 0 hosts the store: serve the others until they have left (bounded)
    store_.reset();
    server_->linger(std::chrono::steady_clock::now() + store_linger, gone);
  }
}

inline void host_mesh::listen(const asio::ip::address& addr) {
  asio::ip::tcp::endpoint ep(addr, 0);
  asio::error_code ec;
  acc_.open(ep.protocol(), ec);
  if (!ec) detail::set_cloexec(acc_.native_handle());
  if (!ec) acc_.bind(ep, ec);
  if (!ec) detail::set_congestion(acc_.native_handle(), opt_.congestion);  // accepted connections inherit it
  if (!ec) acc_.listen(std::max(64, size_), ec);
  if (ec) throw error(errc::system, "rank " + std::to_string(rank_) + ": cannot listen on " + addr.to_string() + ": " + ec.message());
  acc_.non_blocking(true);
}

// The recovery listener (shrink.ipp): bound and listening from set-up on, so that its port is
// in this rank's record, but accepted on only by the store of a shrink this rank coordinates.
// Without one (no descriptor left) this rank cannot coordinate: the next lowest rank will.
inline void host_mesh::open_recovery_listener(const asio::ip::address& addr) {
  const asio::ip::tcp::endpoint ep(addr, 0);
  const int fd = ::socket(ep.protocol().family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  if (::bind(fd, ep.data(), static_cast<socklen_t>(ep.size())) != 0 || ::listen(fd, std::max(64, size_)) != 0) {
    ::close(fd);
    return;
  }
  rec_.listen_fd = fd;
}
inline std::uint16_t host_mesh::recovery_port() const {
  sockaddr_storage sa{};
  socklen_t sl = sizeof sa;
  if (rec_.listen_fd < 0 || ::getsockname(rec_.listen_fd, reinterpret_cast<sockaddr*>(&sa), &sl) != 0) return 0;
  return ntohs(sa.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&sa)->sin6_port : reinterpret_cast<sockaddr_in*>(&sa)->sin_port);
}

// The store's record of the first rank lost, or "" (none, or the store is gone too).
inline std::string host_mesh::lost_rank() {
  try {
    const deadline d = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
    if (store_->check("gsync/lost", d)) return store_->get("gsync/lost", d);
  } catch (const error&) {
  }
  return {};
}

// Socket options of a data connection; a congestion control the kernel refuses is logged once.
inline void host_mesh::tune(detail::net::tcp_socket& s) {
  if (!detail::tune_data_socket(s, opt_.socket_buffer_bytes, opt_.congestion, std::chrono::milliseconds(opt_.liveness_ms)) && !cc_warned_) {
    cc_warned_ = true;
    log_.info("TCP congestion control '" + opt_.congestion + "' refused by the kernel (" + detail::errno_text(errno) +
              "); data connections keep the system default (GSYNC_TCP_CONGESTION)");
  }
}

// The host identities (runs once, before any connection), from the ranks' set-up records: the
// topology, the ranks of this host and those on this machine follow.
inline void host_mesh::exchange_hosts(const bootstrap::launch_info& li) {
  std::vector<std::string> ids(static_cast<std::size_t>(size_));
  machine_ranks_ = 0;
  for (int j = 0; j < size_; ++j) {
    const auto& r = records_[static_cast<std::size_t>(j)];
    ids[static_cast<std::size_t>(j)] = r.host;
    machine_ranks_ += r.kernel == records_[static_cast<std::size_t>(rank_)].kernel;
  }
  topo_ = topology::from_ids(ids);
  local_size_ = static_cast<int>(topo_.ranks_on(topo_.host_of(rank_)).size());
  // Ranks that share this machine's cores: this host's (GSYNC_LOCAL_WORLD_SIZE or the host
  // identities), or more when other "hosts" (containers, network namespaces) run on the same
  // kernel, as the fake hosts of benchmarks/netcluster.sh do.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  cores_shared_ = static_cast<unsigned>(std::max(li.local_size > 0 ? li.local_size : local_size_, machine_ranks_)) > cores;
}

// Picks every peer's data link (runs once, after the host identities, before the TCP connections
// of connect.ipp): each link type's
// endpoint publishes what its peers need, then each peer gets the first type in the list whose
// endpoint connects the pair (both ranks decide alike from what both published), and the
// endpoints finish with every peer placed.
inline void host_mesh::connect_links(deadline dl) {
  link_setup s;
  s.rank = rank_;
  s.size = size_;
  s.store = store_.get();
  s.topo = &topo_;
  s.nonce = nonce_;
  s.shares_cores = cores_shared_;
  s.dl = dl;
  s.log = log_;
  kit_->open(s, opt_);
  for (int j = 0; j < size_; ++j) {
    if (j == rank_) continue;
    auto& c = peers_[static_cast<std::size_t>(j)];
    std::unique_ptr<link_port> l = kit_->connect(s, j, c.ctl);  // the first type whose endpoint connects the pair
    if (!l)
      throw error(errc::system, "rank " + std::to_string(rank_) + ": no link type of the transport's list (" + kit_->names() +
                                    ") connects it to rank " + std::to_string(j) + "; end the list with tcp_link, which connects every pair");
    c.on_ctl = l->as<tcp_link>() == &c.ctl;
    c.data = std::move(l);
    if (c.by_doorbell()) bell_peers_.push_back(j);
  }
  kit_->finish(s);
  bell_owner_ = kit_->bell_owner();
  if (!bell_peers_.empty() && !bell_owner_)
    throw error(errc::system, "rank " + std::to_string(rank_) + ": rank " + std::to_string(bell_peers_.front()) +
                                  "'s link is waited for by doorbell, but no endpoint of the transport's list (" + kit_->names() +
                                  ") holds this rank's doorbell (doorbell_owner)");
}

}  // namespace gsync::transport
