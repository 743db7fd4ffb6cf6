#pragma once
/// \file
/// Set-up of the host mesh (runs once, out of the data path): the store, the job nonce and the
/// ranks' set-up records, listening, the shared-memory rings, the connections made at start-up
/// (connect.ipp), the spin / yield settings; the link probe (measure_links); and the tear-down.
/// Part of transport::host_mesh (transport/mesh/host_mesh.hpp); included by transport/mesh/impl.ipp.

#include "gsync/transport/mesh/host_mesh.hpp"

namespace gsync::transport {

/// Times the links between hosts (transport/link_probe.hpp) for the automatic choice of
/// algorithms, unless there is one host, GSYNC_NET_PROBE=0, or both GSYNC_NET_GBPS and
/// GSYNC_NET_LATENCY_US are given (those win over what it measures). Collective: every rank
/// calls it, right after set-up (communicator::join does), before any operation.
inline void host_mesh::measure_links(deadline dl) {
  if (topo_.hosts() <= 1 || !opt_.net_probe || (opt_.net_gbps > 0 && opt_.net_latency_us > 0)) return;
  const bool net_given = opt_.net_gbps > 0 || opt_.net_latency_us > 0;
  const auto t0 = std::chrono::steady_clock::now();
  const probe_result pr = probe_links(*this, dl, cores_shared_);
  const link_estimate links = detail::override_links(pr.links, opt_.net_gbps, opt_.net_latency_us);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
  topo_.set_links(links);
  log_.info("links between hosts: " + detail::fixed(links.alpha_us, 1) + " us per message, " + detail::fixed(links.gbps(), 3) +
            " Gbit/s (measured over the ring of " + std::to_string(size_) + " ranks in " + std::to_string(ms) +
            " ms: a step of 8 B takes " + detail::fixed(pr.small_step_us, 1) + " us, of 64 KiB " + detail::fixed(pr.mid_step_us, 1) +
            " us, of 1 MiB " + detail::fixed(pr.big_step_us, 1) + " us" +
            (pr.intra_step_us > 0 ? "; inside a host a step of 8 B takes " + detail::fixed(pr.intra_step_us, 1) + " us" : "") +
            (net_given ? "; GSYNC_NET_* given win" : "") + ")" +
            (links.shared_msg_us > 0 ? "; ranks share cores: " + detail::fixed(links.shared_msg_us, 1) + " us of the machines' time per message" : ""));
}

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
    : rank_(given.rank), size_(given.size), log_(log), stall_(given.rank, given.size, opt.stall_warn_s, log, store_), opt_(opt), opt_given_(opt), server_(std::move(server)),
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
    join_store(li, dl, rj);
    const auto me = bootstrap::pick_listen_address(io_, master, opt_.socket_ifname);
    bootstrap::auth::require_key(key_, !me.is_loopback(), li.allow_unauthenticated, where, log_);  // GSYNC_SOCKET_IFNAME
    listener_.open(me, size_, opt_.congestion, "rank " + std::to_string(rank_));
    open_recovery_listener(me);
    start_heartbeat(me);
    exchange_records(li, dl, rj);
    peers_.resize(static_cast<std::size_t>(size_));  // placed once: a port may point at its peer's `ctl`
    shared_.place(size_);
    for (auto& c : peers_) c.data = std::make_unique<link_port_of<tcp_link>>(0, c.ctl);  // until connect_links
    exchange_hosts(li);
    connect_links(dl);
    connect_peers(dl);
    if (!opt_.lazy_connect) listener_.close();  // else it takes the connections made on first use
    finish(dl, rj);
  } catch (const error& raised) {
    failed_setup(raised, rj);
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
  const std::set<int> dead = fs_.dead();
  const std::vector<int> gone(dead.begin(), dead.end());  // lost ranks may hold their store connections (stopped): not waited for below
  if (doorbell_owner* own = bell_owner())  // same-host peers still waiting for this rank learn at once that it is gone
    own->mark_failed(fs_.broken() ? own->bell().failed.load(std::memory_order_relaxed) : shm_left | static_cast<std::uint32_t>(rank_ + 1));
  // Data links of their own (verbs) first: they deliver what was handed over before the TCP
  // connection's close tells the peer this rank has gone. All start at once (one wait for the
  // peers' acknowledgements, not one per link); a peer that closed its connection is not waited for.
  for (int p = 0; p < size_; ++p)
    if (p != rank_ && separate_control(p)) peers_[p].data->close_begin(peers_[p].tcp().seen_closed() || peers_[p].tcp().peer_gone());
  for (int p = 0; p < size_; ++p)
    if (p != rank_ && separate_control(p)) peers_[p].data->close();
  for (auto& p : peers_) p.tcp().close();
  if (server_) {  // rank 0 hosts the store: serve the others until they have left (bounded)
    store_.reset();
    server_->linger(std::chrono::steady_clock::now() + store_linger, gone);
  }
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
  machine_ranks_ = records_.on_my_kernel();
  topo_ = topology::from_ids(records_.hosts());
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
