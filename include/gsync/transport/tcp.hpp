#pragma once
/// \file
/// TCP transport over Asio sockets: one connection per pair of ranks, established through the
/// rendezvous store, then driven non-blocking by a small poll(2) progress loop.
///
/// Setup (non-templated, runs once): rank 0 starts the store server; every rank listens on an
/// ephemeral port of its chosen address, publishes `ip port` under `gsync/addr/R`, connects to every
/// lower rank (sending a hello frame naming itself and the job's nonce) and accepts from every
/// higher rank (checking the hello: a connection from another job or with garbage is closed,
/// logged, and setup goes on). Before the hello, both ends of every connection (and of every store
/// connection) run the job-key handshake of bootstrap/auth.hpp (GSYNC_JOB_KEY). Sockets get TCP_NODELAY, 4 MiB kernel buffers and CUBIC congestion
/// control (GSYNC_TCP_CONGESTION): a system default of BBR paces every connection at its estimate of
/// the path's bandwidth, which on loopback and short links is far below what the path carries
/// (measured on loopback, 2 ranks, 4 MiB allreduce: 2.1 GB/s busbw under BBR, 3.6 GB/s under CUBIC).
/// When the ranks span several hosts, set-up ends by timing the links between them
/// (transport/link_probe.hpp, recorded in `topo().links()` for the automatic algorithm choice).
///
/// Data path: `post_send` appends (header, pointer, length) to the peer's queue and writes what
/// the kernel takes at once; the rest is written whenever a blocking call waits. A blocking call
/// polls the socket it reads from plus every socket with queued bytes, so sends to one neighbour
/// progress while receiving from another (the ring's full-duplex overlap). Payloads go straight
/// from/to the caller's memory; only `recv_stream` reads through one bounded staging buffer
/// (256 KiB per communicator) so that a reduction can consume pieces while they are cache-hot.
///
/// Same-host peers (equal bootstrap::host_id(), see bootstrap/host_id.hpp) exchange data through
/// shared memory instead (transport/shm.hpp): each rank creates one segment holding a ring per
/// local peer for its inbound traffic; `post_send` copies into the receiver's ring, `recv` copies
/// out of it, and `recv_stream` hands the reduction pieces of the ring itself, so a reduce reads
/// the peer's data where the peer put it (one copy in, the reduction reads it once). A wait that
/// involves only shared-memory peers spins briefly, then sleeps on the rank's futex doorbell; a
/// wait that also involves sockets polls them with a 1 ms timeout and re-checks the rings. The TCP
/// connection to a same-host peer stays open, carrying no data, as its liveness signal: a peer that
/// dies closes it, and a waiting rank checks it (and the peer's `failed` flag) at least every
/// 100 ms. `GSYNC_SHM_DISABLE=1` keeps every peer on TCP; `GSYNC_SHM_BYTES` sizes the rings.
///
/// Failure: any error (peer closed, timeout, mismatch) shuts every connection of this rank down
/// (and raises its shared-memory `failed` flag), so neighbours blocked on it fail promptly too
/// instead of waiting for their own timeouts, and the transport refuses further use. Before the
/// connections close, the failing rank records its error in the store (`gsync/failed/R`: kind and
/// message, `gsync/failed/R/op`: the collective it was in) and writes a notice frame (kind, text,
/// first rank lost) to every peer whose stream is at a message boundary; a rank that then sees
/// the connection close reads the notice or looks the record up and fails with the same kind and
/// words, so every rank of a mismatched call reports the mismatch (both calls spelled out) and
/// every survivor of a killed rank names it, not the neighbour that failed after it.
/// `abort(reason)` may come from any thread: it records the abort through a store connection of
/// its own, then shuts the sockets down and rings the doorbells, which wakes this rank's wait.
///
/// Timeouts name the call (kind, arguments, bytes), how long it waited, for which peers, and,
/// from the store's progress records (which a waiting rank publishes after half its timeout or
/// half of GSYNC_STALL_WARN_S), which ranks had not reached the operation.

#include <sched.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <asio.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gsync/bootstrap/auth.hpp"
#include "gsync/bootstrap/host_id.hpp"
#include "gsync/bootstrap/interface.hpp"
#include "gsync/bootstrap/launch_env.hpp"
#include "gsync/bootstrap/store.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/config.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/log.hpp"
#include "gsync/core/topology.hpp"
#include "gsync/detail/aligned_buffer.hpp"
#include "gsync/detail/random.hpp"
#include "gsync/detail/socket.hpp"
#include "gsync/detail/tick_clock.hpp"
#include "gsync/transport/frame.hpp"
#include "gsync/transport/link_probe.hpp"
#include "gsync/transport/shm.hpp"

namespace gsync::transport {

/// Tunables of the TCP transport.
struct tcp_options {
  int socket_buffer_bytes = 4 << 20;          ///< SO_SNDBUF / SO_RCVBUF of data sockets
  /// Seconds an operation may wait before this rank logs a stall report (GSYNC_STALL_WARN_S; 0: never).
  int stall_warn_s = 60;
  /// TCP_CONGESTION of data sockets (GSYNC_TCP_CONGESTION; "default" or empty: the system's).
  std::string congestion = "cubic";
  std::size_t staging_bytes = 256 << 10;      ///< recv_stream staging buffer
  /// Microseconds a wait polls without sleeping before it blocks in poll(2) (GSYNC_SPIN_US).
  /// -1: automatic, 50 us when this host runs no more ranks than it has cores, else 0 (spinning
  /// on an oversubscribed host would steal the core from the rank being waited for).
  int spin_us = -1;
  /// Microseconds a shared-memory wait keeps polling, yielding the core between polls, after the
  /// busy spin and before it sleeps on its futex (GSYNC_YIELD_US). Sleeping costs a wake-up through
  /// the scheduler (tens of microseconds, milliseconds on a loaded host); yielding keeps the
  /// latency of a reply that comes soon low without starving the rank being waited for.
  /// -1: automatic, 2000 us, but 0 when this machine runs more ranks than cores and this rank has
  /// peers both through shared memory and over TCP: there the ranks that wait on sockets sleep,
  /// and the polling ones delay their wake-ups (measured on 2 fake hosts x 4 ranks sharing 2
  /// cores: a 64 B allreduce 1.1-1.8 ms without the window against 1.2-5 ms with it, 256 KiB
  /// 2.2-2.5 against 3.1-5.6 ms; one host alone, 8 ranks, is the other way round: 70 against 200 us).
  /// Those fake-host runs put every rank in a session of its own, where sched_yield(2) does nothing
  /// under autogroup scheduling, so the window was a busy poll there; not re-measured since.
  int yield_us = -1;
  /// Microseconds a wait for a small message from a TCP peer (at most `tcp_yield_bytes` still to
  /// come) keeps polling the sockets, yielding the core between polls, before it sleeps in poll(2)
  /// (GSYNC_TCP_YIELD_US). A sleeping rank pays a scheduler wake-up per message, which on a host
  /// running more ranks than cores is most of a small message's latency; a yielding one (as Open
  /// MPI's progress loop does when oversubscribed, without a limit) picks the message up at its
  /// next poll and leaves the core to whoever has work. -1: automatic, 50 us when this machine runs
  /// more ranks than cores and this rank's peers are all over TCP, else 0 (with shared-memory
  /// peers too, see `yield_us`; on a host with a core per rank the 50 us busy spin comes first).
  /// Measured on 8 fake hosts of benchmarks/netcluster.sh (all ranks sharing 2 cores, in one
  /// session; 3 runs of 1000 calls each, which move +-20% from run to run), windows of 50 us /
  /// 300 us / 2 ms: 8 B 110-149 / 101-151 / 106-115 us, 1 KiB 146-211 / 158-193 / 140-175 (Open MPI
  /// 178-251 at both sizes); no window is clearly better, and the shortest keeps a rank that
  /// waits long from taking its share of the cores. (The measurements behind the earlier notes
  /// here ran every rank in a session of its own, where sched_yield(2) does nothing under the
  /// kernel's autogroup scheduling: their "yielding" was busy polling.)
  int tcp_yield_us = -1;
  /// Largest message (payload bytes still to come) whose wait yields rather than sleeps. Measured
  /// on the fake clusters (ranks in one session; medians of 3-4 runs of 1000 calls), 64 KiB against
  /// 1 KiB: 8 hosts, recursive doubling 2 KiB 256 against 291 us, 4 KiB 268 against 295 (Open MPI
  /// 276-300), halving-doubling 16 KiB 432 against 498; 4 hosts, recursive doubling 2 KiB 64
  /// against 98 (Open MPI 94), halving-doubling 16 KiB 209 against 222; 64 KiB unchanged.
  std::size_t tcp_yield_bytes = 64 << 10;
  /// Use shared memory between ranks of one host (GSYNC_SHM_DISABLE=1 turns it off).
  bool shm = true;
  /// Let shared-memory peers signal without a full fence per message, the sleeping side issuing a
  /// membarrier(2) instead (transport/shm.hpp; used only when every rank of the host can, and not
  /// where ranks share cores). GSYNC_SHM_MEMBARRIER=0 turns it off.
  bool shm_light = true;
  /// Data bytes of each shared-memory ring (GSYNC_SHM_BYTES; a multiple of 64, >= 4 KiB).
  std::size_t shm_ring_bytes = 1 << 20;
  /// Time the links between hosts at start-up when the ranks span several hosts
  /// (transport/link_probe.hpp; GSYNC_NET_PROBE=0 turns it off). Every rank must agree.
  bool net_probe = true;
};

/// TCP transport endpoint of one rank (see file comment).
class tcp {
 public:
  /// Joins the job described by `li`: starts the store on rank 0, connects the full mesh.
  /// Every wait of the setup ends at now + `timeout`.
  tcp(const bootstrap::launch_info& li, std::chrono::milliseconds timeout, logger log, tcp_options opt = {})
      : rank_(li.rank), size_(li.size), log_(log), opt_(opt), acc_(io_) {
    const deadline dl = std::chrono::steady_clock::now() + timeout;
    key_ = li.job_key ? bootstrap::auth::job_key(*li.job_key) : bootstrap::auth::job_key::from_env();
    // Every setting is read and checked before any connection: a bad value fails every rank the
    // same way, at once, rather than the first one to reach it while the others wait for it.
    if (auto v = detail::env("GSYNC_SHM_DISABLE"); v && *v != "0" && !v->empty()) opt_.shm = false;
    if (auto v = detail::env("GSYNC_SHM_MEMBARRIER"); v && *v == "0") opt_.shm_light = false;
    if (auto b = detail::env("GSYNC_SHM_BYTES")) {
      auto v = detail::parse_size(*b);
      if (!v || *v < 4096 || *v > (std::size_t{1} << 30) || *v % 64)
        throw error(errc::invalid_argument, "GSYNC_SHM_BYTES='" + *b + "' is not a size between 4K and 1G, multiple of 64");
      opt_.shm_ring_bytes = *v;
    }
    if (auto b = detail::env("GSYNC_SOCKET_BUFFER")) {
      auto v = detail::parse_size(*b);
      if (!v || *v > (1u << 30)) throw error(errc::invalid_argument, "GSYNC_SOCKET_BUFFER='" + *b + "' is not a size such as 4M");
      opt_.socket_buffer_bytes = static_cast<int>(*v);  // 0: leave the kernel's autotuning alone
    }
    if (auto w = detail::env_int("GSYNC_STALL_WARN_S", 0, 1000000)) opt_.stall_warn_s = static_cast<int>(*w);
    if (auto c = detail::env("GSYNC_TCP_CONGESTION")) opt_.congestion = (*c == "default") ? std::string{} : *c;
    if (!detail::net_probe_enabled()) opt_.net_probe = false;
    const auto net_gbps = detail::env("GSYNC_NET_GBPS"), net_latency = detail::env("GSYNC_NET_LATENCY_US");
    detail::override_links({}, net_gbps, net_latency);  // checks the values
    auto master = detail::resolve_host(io_, li.master_addr);
    if (rank_ == 0) {
      std::string bind = master.is_loopback() ? master.to_string() : (master.is_v6() ? "::" : "0.0.0.0");
      server_ = std::make_unique<bootstrap::store_server>(bind, li.master_port, log_, key_);
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
          store_ = std::make_unique<bootstrap::store_client>(li.master_addr, li.master_port, dl, key_);
          if (store_->hello(rank_, dl)) break;
        } catch (const error& e) {
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
      const auto me = bootstrap::pick_listen_address(io_, master);
      listen(me);
      // The job nonce ties every connection to this job: a stale rank of an earlier job on the same
      // port cannot slip in.
      if (rank_ == 0) store_->set("gsync/nonce", std::to_string(detail::random::u64()), dl);
      nonce_ = std::stoull(store_->get("gsync/nonce", dl));
      const auto my_ep = acc_.local_endpoint();
      store_->set("gsync/addr/" + std::to_string(rank_), my_ep.address().to_string() + " " + std::to_string(my_ep.port()), dl);
      log_.info("rank " + std::to_string(rank_) + "/" + std::to_string(size_) + " (local rank " + std::to_string(li.local_rank) +
                ", from " + li.source + " variables) transport tcp, listening on " + my_ep.address().to_string() + ":" +
                std::to_string(my_ep.port()) + ", store at " + li.master_addr + ":" + std::to_string(li.master_port));
      peers_.resize(static_cast<std::size_t>(size_));
      try {
        connect_lower(dl);
        accept_higher(dl);
      } catch (const error& e) {
        // A peer that vanished mid-handshake may itself have failed because another rank was lost
        // first: report that root cause when the store knows it.
        if (e.kind() == errc::timeout || e.kind() == errc::peer_lost)
          if (auto lost = lost_rank(); !lost.empty() && std::string_view(e.what()).find(lost) == std::string_view::npos)
            throw error(errc::peer_lost, "rank " + std::to_string(rank_) + ": " + lost + " (then: " + e.what() + ")");
        throw;
      }
      acc_.close();
      setup_shm(li, dl);
      // Rank 0 serves the store: it must not return (and possibly tear the store down) before every
      // rank has finished looking up addresses. A rank with a shared-memory segment waits too: once
      // every rank is ready, every peer has mapped the segment and its name can go.
      if (store_->add("gsync/ready", 1, dl) == size_) store_->set("gsync/ready_all", "1", dl);
      if (rank_ == 0 || seg_) store_->wait({"gsync/ready_all"}, dl);
      seg_.unlink();
      staging_ = detail::make_aligned_bytes(opt_.staging_bytes);
      if (auto sp = detail::env_int("GSYNC_SPIN_US", 0, 1000000)) opt_.spin_us = static_cast<int>(*sp);
      if (auto y = detail::env_int("GSYNC_YIELD_US", 0, 10000000)) opt_.yield_us = static_cast<int>(*y);
      if (auto y = detail::env_int("GSYNC_TCP_YIELD_US", 0, 10000000)) opt_.tcp_yield_us = static_cast<int>(*y);
      // Ranks that share this machine's cores: this host's (GSYNC_LOCAL_WORLD_SIZE or the host
      // identities), or more when other "hosts" (containers, network namespaces) run on the same
      // kernel, as the fake hosts of benchmarks/netcluster.sh do.
      const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
      const bool machine_oversubscribed =
          static_cast<unsigned>(std::max(li.local_size > 0 ? li.local_size : local_size_, machine_ranks_)) > cores;
      topo_.set_cores_shared(machine_oversubscribed);
      if (opt_.spin_us < 0) opt_.spin_us = machine_oversubscribed ? 0 : 50;
      const int nshm = static_cast<int>(shm_peers_.size()), ntcp = size_ - 1 - nshm;
      if (opt_.yield_us < 0) opt_.yield_us = machine_oversubscribed && nshm > 0 && ntcp > 0 ? 0 : 2000;
      if (opt_.tcp_yield_us < 0) opt_.tcp_yield_us = machine_oversubscribed && nshm == 0 ? 50 : 0;
      name_ = nshm == 0 ? "tcp" : ntcp == 0 ? "shm" : "shm+tcp";
      log_.info("connected to " + std::to_string(size_ - 1) + " peers: " + std::to_string(nshm) + " through shared memory, " +
                std::to_string(ntcp) + " over TCP (" + std::to_string(local_size_) + " ranks on this host, " +
                std::to_string(machine_ranks_) + " on this machine, spin " +
                std::to_string(opt_.spin_us) + " us, yield " + std::to_string(opt_.yield_us) + " us, TCP yield " +
                std::to_string(opt_.tcp_yield_us) + " us" + (nshm > 0 ? std::string(shm_light_ ? ", shared-memory fences: membarrier" : ", shared-memory fences: full") : "") + ")");
      if (topo_.hosts() > 1) {
        // The links between hosts, for the automatic choice of algorithms (core/links.hpp).
        link_estimate links = detail::override_links({}, net_gbps, net_latency);
        std::string how = net_gbps || net_latency ? "GSYNC_NET_GBPS / GSYNC_NET_LATENCY_US, else assumed" : "assumed (GSYNC_NET_PROBE=0)";
        if (opt_.net_probe && !(net_gbps && net_latency)) {
          const auto t0 = std::chrono::steady_clock::now();
          const probe_result pr = probe_links(*this, dl, machine_oversubscribed);
          links = detail::override_links(pr.links, net_gbps, net_latency);
          const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0).count();
          how = "measured at start-up over the ring of " + std::to_string(size_) + " ranks in " + std::to_string(ms) +
                " ms: a step of 8 B takes " + detail::fixed(pr.small_step_us, 1) + " us, of 64 KiB " +
                detail::fixed(pr.mid_step_us, 1) + " us, of 1 MiB " + detail::fixed(pr.big_step_us, 1) + " us" +
                (pr.intra_step_us > 0 ? "; inside a host a step of 8 B takes " + detail::fixed(pr.intra_step_us, 1) + " us" : "") + (net_gbps || net_latency ? "; GSYNC_NET_* given win" : "");
        }
        topo_.set_links(links);
        log_.info("links between hosts: " + detail::fixed(links.alpha_us, 1) + " us per message, " +
                  detail::fixed(links.gbps(), 3) + " Gbit/s (" + how + ")" +
                  (links.shared_msg_us > 0 ? "; ranks share cores: " + detail::fixed(links.shared_msg_us, 1) +
                                                 " us of the machines' time per message" : ""));
      }
    } catch (const error& e) {
      // Tell the store why, before its connection drops: the store then reports this rank as
      // failed for that reason, not as the first rank lost (which the others would blame).
      if (store_) {
        try {
          store_->set(failed_key(rank_), failure_record(e.kind(), e.what()), std::chrono::steady_clock::now() + std::chrono::seconds(1));
        } catch (const std::exception&) {
        }
      }
      if (server_) {
        store_.reset();  // says goodbye: this rank is failing, not lost
        server_->linger(std::chrono::steady_clock::now() + store_linger);
      }
      throw;
    }
  }
  tcp(const tcp&) = delete;
  tcp& operator=(const tcp&) = delete;
  ~tcp() {
    if (seg_) {  // same-host peers still waiting for this rank learn at once that it is gone
      if (!broken_) seg_.bell().failed.store(shm_left | static_cast<std::uint32_t>(rank_ + 1), std::memory_order_release);
      for (int p : shm_peers_) shm::notify(*peers_[p].peer_bell);
    }
    for (auto& p : peers_)
      if (p.s && p.s->is_open()) {
        asio::error_code ig;
        p.s->close(ig);
      }
    if (server_) {  // rank 0 hosts the store: serve the others until they have left (bounded)
      store_.reset();
      server_->linger(std::chrono::steady_clock::now() + store_linger);
    }
  }

  int rank() const noexcept { return rank_; }                  ///< this rank
  int size() const noexcept { return size_; }                  ///< world size
  /// Transport name for logs and algorithm selection: "tcp", "shm" (every peer on this host) or "shm+tcp".
  std::string_view name() const noexcept { return name_; }
  /// Ranks on this host (including this one), from the host identities.
  int local_size() const noexcept { return local_size_; }
  /// Which rank runs on which host (from every rank's host identity).
  const topology& topo() const noexcept { return topo_; }
  /// True when `peer` is reached through shared memory.
  bool is_shm_peer(int peer) const noexcept { return peers_[static_cast<std::size_t>(peer)].shm; }
  /// True when this host's shared-memory peers signal with asymmetric fences (transport/shm.hpp).
  bool shm_asymmetric_fences() const noexcept { return shm_light_; }
  /// Sleeps on this rank's doorbell that ran their full length although what they waited for had
  /// arrived: lost wake-ups, which cost a sleep's length each (at most 100 ms). Should stay 0.
  std::uint64_t shm_late_wakeups() const noexcept { return shm_late_wakeups_; }
  /// Bytes this rank has read so far from shared-memory peer `peer`'s ring (0 for other peers).
  std::uint64_t shm_read_position(int peer) const noexcept {
    return peer >= 0 && peer < size_ && peers_[static_cast<std::size_t>(peer)].shm ? peers_[static_cast<std::size_t>(peer)].in_pos : 0;
  }
  bootstrap::store_client& store() { return *store_; }         ///< the job's rendezvous store

  /// Aborts this endpoint; thread-safe, callable while another thread waits in it. Records
  /// `why` in the store for the peers (through a connection of its own, at most ~1 s), then shuts
  /// every connection down and rings the doorbells: the waiting thread wakes and fails with
  /// `errc::aborted`, and so does every later call; peers blocked on this rank fail at once,
  /// reporting the abort. Idempotent.
  void abort(const std::string& why) noexcept {
    {
      std::lock_guard lk(abort_m_);
      if (aborted_.load(std::memory_order_relaxed)) return;
      try {
        abort_msg_ = why;
      } catch (...) {
      }
      aborted_.store(true, std::memory_order_release);
    }
    try {
      // The reason goes to the store before the peers are woken below, so that they report it:
      // 3 s for a fresh connection (1 s was too short on a loaded machine under a sanitizer: the
      // peers then reported a lost rank without the reason).
      const deadline d = std::chrono::steady_clock::now() + std::chrono::seconds(3);
      bootstrap::store_client sc(master_addr_, master_port_, d, key_);
      sc.set(failed_key(rank_), failure_record(errc::aborted, why), d);
    } catch (...) {
      // best effort: the peers will see the connections close and report a lost rank instead
    }
    abort_recorded_.store(true, std::memory_order_release);
    for (auto& p : peers_)
      if (p.fd >= 0) ::shutdown(p.fd, SHUT_RDWR);
    if (seg_) {
      seg_.bell().failed.store(static_cast<std::uint32_t>(rank_ + 1), std::memory_order_release);
      for (int p : shm_peers_) shm::notify(*peers_[p].peer_bell);
      seg_.bell().sleepers.store(1, std::memory_order_relaxed);  // force the wake-up of our own sleeper
      shm::notify(seg_.bell());
    }
  }

  /// Payload bytes handed to post_send so far (frame headers not counted): what this rank sent,
  /// counted, for reports such as the gradient layer's bytes on the wire (`counting_transport`).
  std::uint64_t payload_bytes_posted() const noexcept { return posted_bytes_; }

  /// Queues [src, src+n) for `peer` and writes what the kernel accepts now.
  void post_send(int peer, message_id id, const std::byte* src, std::size_t n) {
    check_usable();
    posted_bytes_ += n;
    if (id.tag < 0x80000000u) cur_op_ = id.seq;
    check_peer(peer);
    auto& c = peers_[peer];
    if (c.shm && c.q.empty()) {
      // Nothing queued before it: a message whose payload its stamp covers goes into the ring now
      // if there is room, without a trip through the queue.
      std::uint64_t head = c.out->head.load(std::memory_order_relaxed);
      if (shm::stamped_payload(shm::align64(head), n, c.out_cap) == n && shm_begin(c, head, make_header(id, n), src, n) != SIZE_MAX) {
        shm_publish(c, head);
        return;
      }
    }
    c.q.push_back(send_op{make_header(id, n), src, n, 0});
    ++queued_;
    if (c.shm) {
      ++shm_queued_;
      if (c.q.size() == 1) pump_shm(peer);
    } else if (c.q.size() == 1) {
      pump(peer);
    }
  }

  /// Receives the next message from `peer` into dst (header checked against id and n).
  void recv(int peer, message_id id, std::byte* dst, std::size_t n, deadline dl) {
    check_usable();
    if (id.tag < 0x80000000u) cur_op_ = id.seq;
    check_peer(peer);
    frame_header h;
    if (peers_[peer].shm) {
      shm_read_header(peer, h, dl, id);
      check(h, id, n, peer, nullptr, 0);
      shm_read_payload(peer, dst, n, 1, nullptr, dl, id);
      return;
    }
    const std::size_t got = read_header(peer, h, dst, n, dl, id);
    check(h, id, n, peer, dst, got);
    read_exact(peer, dst + got, n - got, dl, id);
  }

  /// Receives the next message from `peer` through the staging buffer, handing `consume` pieces
  /// whose sizes are multiples of `align`.
  void recv_stream(int peer, message_id id, std::size_t n, std::size_t align,
                   detail::function_ref<void(std::span<const std::byte>)> consume, deadline dl) {
    check_usable();
    if (id.tag < 0x80000000u) cur_op_ = id.seq;
    check_peer(peer);
    if (align == 0 || align > opt_.staging_bytes) align = 1;
    frame_header h;
    if (peers_[peer].shm) {  // the reduction reads the peer's bytes where they lie, in the ring
      shm_read_header(peer, h, dl, id);
      check(h, id, n, peer, nullptr, 0);
      if (8 % align != 0) align = 1;  // payloads start 8-byte aligned in the ring (shm.hpp)
      shm_read_payload(peer, nullptr, n, align, &consume, dl, id);
      return;
    }
    const std::size_t cap = opt_.staging_bytes - opt_.staging_bytes % align;
    std::size_t have = read_header(peer, h, staging_.get(), std::min(cap, n), dl, id);
    check(h, id, n, peer, staging_.get(), have);
    std::size_t remaining = n - have;
    for (bool first = true; first || remaining > 0; first = false) {
      if (!first || have == 0) {
        std::size_t got = read_some(peer, staging_.get() + have, std::min(cap - have, remaining), dl, id);
        have += got;
        remaining -= got;
      }
      const std::size_t ready = have - have % align;
      if (ready == 0) continue;
      consume(std::span<const std::byte>(staging_.get(), ready));
      if (have > ready) std::memmove(staging_.get(), staging_.get() + ready, have - ready);
      have -= ready;
    }
  }

  /// Writes out every queued send (the kernel then owns the bytes).
  void flush_sends(deadline dl) {
    check_usable();
    while (queued_ > 0) wait_progress(-1, dl, message_id{});
  }

  /// Hands queued sends to the kernel (sockets) and to the peers' rings (shared memory) as far as
  /// they take them now, without waiting: a schedule that computes between messages calls it so
  /// that its links keep moving (see `send_progress_transport`).
  void progress_sends() {
    check_usable();
    if (queued_ == 0) return;
    pump_sockets();
    pump_all_shm();
  }

  /// Called when an operation has ended: a stall record it published is withdrawn at once, so
  /// that a rank busy outside gsync afterwards is not reported as stuck in it.
  void op_finished() noexcept { withdraw_stall_record(); }

 private:
  struct send_op {
    frame_header h;
    const std::byte* p;
    std::size_t n;
    std::size_t done;  // bytes written, header included
  };
  struct peer_conn {
    std::unique_ptr<asio::ip::tcp::socket> s;
    int fd = -1;
    std::deque<send_op> q;
    // Shared memory (same-host peers only).
    bool shm = false;
    shm::ring_ctl* out = nullptr;       // ring this rank writes, in the peer's segment
    std::byte* out_data = nullptr;
    std::uint64_t out_cap = 0;
    std::uint64_t out_tail = 0;         // the consumer's tail as last read (reread only when short of room)
    std::uint64_t out_key = 0;          // stamp key of `out` (shm.hpp)
    shm::ring_ctl* in = nullptr;        // ring the peer writes, in this rank's segment
    std::byte* in_data = nullptr;
    std::uint64_t in_cap = 0;
    std::uint64_t need_head = 0;        // a wait on `in` ends once head reaches this
    std::uint64_t need_stamp = 0;       // ... or, when not 0, once this stamp is at in_data + stamp_at
    std::uint64_t stamp_at = 0;
    std::uint64_t in_known = 0;         // `in` holds bytes up to here (a stamp or head said so)
    std::uint64_t in_key = 0;           // stamp key of `in`
    std::uint64_t in_pos = 0;           // bytes of `in` read; published as its tail after each piece
    bool closed = false;                 // seen closed while not waited for, with no failure record
    shm::doorbell* peer_bell = nullptr;  // the peer's doorbell
  };
  struct hello {
    std::uint32_t magic = 0x48595347u;  // "GSYH"
    std::uint32_t version = 1;
    std::int32_t rank = -1;
    std::int32_t size = 0;
    std::uint64_t nonce = 0;
  };

  void listen(const asio::ip::address& addr) {
    asio::ip::tcp::endpoint ep(addr, 0);
    asio::error_code ec;
    acc_.open(ep.protocol(), ec);
    if (!ec) acc_.bind(ep, ec);
    if (!ec) detail::set_congestion(acc_.native_handle(), opt_.congestion);  // accepted connections inherit it
    if (!ec) acc_.listen(std::max(64, size_), ec);
    if (ec) throw error(errc::system, "rank " + std::to_string(rank_) + ": cannot listen on " + addr.to_string() + ": " + ec.message());
    acc_.non_blocking(true);
  }

  // The store's record of the first rank lost, or "" (none, or the store is gone too).
  std::string lost_rank() {
    try {
      const deadline d = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
      if (store_->check("gsync/lost", d)) return store_->get("gsync/lost", d);
    } catch (const error&) {
    }
    return {};
  }

  // Socket options of a data connection; a congestion control the kernel refuses is logged once.
  void tune(asio::ip::tcp::socket& s) {
    if (!detail::tune_data_socket(s, opt_.socket_buffer_bytes, opt_.congestion) && !cc_warned_) {
      cc_warned_ = true;
      log_.info("TCP congestion control '" + opt_.congestion + "' refused by the kernel (" + detail::errno_text(errno) +
                "); data connections keep the system default (GSYNC_TCP_CONGESTION)");
    }
  }

  void connect_lower(deadline dl) {
    for (int j = 0; j < rank_; ++j) {
      const std::string a = store_->get("gsync/addr/" + std::to_string(j), dl);
      const auto sp = a.find(' ');
      if (sp == std::string::npos) throw error(errc::mismatch, "bad address record for rank " + std::to_string(j) + ": " + a);
      asio::ip::tcp::endpoint ep(asio::ip::make_address(a.substr(0, sp)),
                                 static_cast<std::uint16_t>(std::stoi(a.substr(sp + 1))));
      auto s = std::make_unique<asio::ip::tcp::socket>(detail::connect_retry(io_, ep, dl, "rank " + std::to_string(j), opt_.congestion));
      tune(*s);
      bootstrap::auth::client_handshake(s->native_handle(), key_, dl, "rank " + std::to_string(j));
      hello h;
      h.rank = rank_;
      h.size = size_;
      h.nonce = nonce_;
      detail::write_all(s->native_handle(), &h, sizeof h, dl, "rank " + std::to_string(j));
      peers_[j].fd = s->native_handle();
      peers_[j].s = std::move(s);
    }
  }

  void accept_higher(deadline dl) {
    int missing = size_ - 1 - rank_;
    while (missing > 0) {
      auto s = std::make_unique<asio::ip::tcp::socket>(io_);
      // Wait in slices, asking the store between them whether a rank was lost: a rank that died
      // before connecting must not keep this one waiting until the setup deadline.
      bool got = false;
      while (!got) {
        const deadline slice = std::min(dl, std::chrono::steady_clock::now() + std::chrono::milliseconds(250));
        got = detail::accept_until(acc_, *s, slice);
        if (got || slice >= dl) break;
        if (store_->check("gsync/lost", dl))
          throw error(errc::peer_lost, "rank " + std::to_string(rank_) + ": while waiting for higher ranks to connect: " +
                                           store_->get("gsync/lost", dl));
      }
      if (!got) {
        std::string who;
        for (int j = rank_ + 1; j < size_; ++j)
          if (!peers_[j].s) who += (who.empty() ? "" : ", ") + std::to_string(j);
        throw error(errc::timeout, "rank " + std::to_string(rank_) + ": timed out waiting for ranks " + who + " to connect");
      }
      tune(*s);
      hello h;
      std::string from;
      try {
        asio::error_code ig;
        from = s->remote_endpoint(ig).address().to_string();
        // A stranger gets a few seconds to identify itself, never the whole setup deadline.
        const deadline hdl = std::min(dl, std::chrono::steady_clock::now() + std::chrono::seconds(5));
        std::string why;
        if (!bootstrap::auth::accept_handshake(s->native_handle(), key_, hdl, "connecting peer " + from, why)) {
          log_.warn("rejected a connection from " + from + ": " + why);
          continue;
        }
        detail::read_all(s->native_handle(), &h, sizeof h, hdl, "connecting peer " + from);
      } catch (const error& e) {
        log_.warn("rejected a connection from " + from + ": " + e.what());
        continue;
      }
      if (h.magic != hello{}.magic || h.version != 1 || h.size != size_ || h.nonce != nonce_ || h.rank <= rank_ ||
          h.rank >= size_ || peers_[h.rank].s) {
        log_.warn("rejected a connection from " + from + ": not a rank of this job (bad hello)");
        continue;
      }
      peers_[h.rank].fd = s->native_handle();
      peers_[h.rank].s = std::move(s);
      --missing;
    }
  }

  // Shared-memory setup (runs once, after the TCP mesh): find the ranks of this host, create this
  // rank's segment (a ring per local rank), publish its name, map every local peer's segment.
  // A pair uses shared memory only when both ranks have a segment, so both sides always agree.
  void setup_shm(const bootstrap::launch_info& li, deadline dl) {
    const std::string me = bootstrap::host_id(li.host_id), kernel = bootstrap::kernel_id();
    store_->set("gsync/host/" + std::to_string(rank_), kernel + "\n" + me, dl);  // kernel id first: it has no newline
    std::vector<std::string> ids(static_cast<std::size_t>(size_));
    machine_ranks_ = 0;
    for (int j = 0; j < size_; ++j) {
      const std::string r = j == rank_ ? kernel + "\n" + me : store_->get("gsync/host/" + std::to_string(j), dl);
      const auto nl = r.find('\n');
      ids[j] = nl == std::string::npos ? r : r.substr(nl + 1);
      machine_ranks_ += r.substr(0, nl) == kernel;
    }
    topo_ = topology::from_ids(ids);
    const std::vector<int>& local = topo_.ranks_on(topo_.host_of(rank_));
    local_size_ = static_cast<int>(local.size());
    auto slot_of = [&](int r) { return static_cast<std::uint32_t>(std::find(local.begin(), local.end(), r) - local.begin()); };
    std::string rec = "-";
    // Asymmetric fences (shm.hpp) take the fence off every message's path and put a membarrier call
    // on every sleep. Where ranks share cores they sleep often (their spin is short), so there the
    // plain fences stay. Every rank of the host must agree: each one says whether it can, and the
    // host uses them only if all can.
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const bool shares_cores = static_cast<unsigned>(std::max(li.local_size > 0 ? li.local_size : local_size_, machine_ranks_)) > cores;
    const bool light_capable = opt_.shm_light && !shares_cores && shm::asymmetric_fences_available();
    if (opt_.shm && local.size() > 1) {
      char nb[96];
      std::snprintf(nb, sizeof nb, "/gsync-%ld-%016llx-%d", static_cast<long>(::getpid()), static_cast<unsigned long long>(nonce_), rank_);
      try {
        seg_ = shm::segment::create(nb, static_cast<std::uint32_t>(local.size()), opt_.shm_ring_bytes);
        rec = std::string(nb) + " " + std::to_string(opt_.shm_ring_bytes) + (light_capable ? " 1" : " 0");
      } catch (const error& e) {
        log_.warn(std::string(e.what()) + "; ranks on this host will talk to rank " + std::to_string(rank_) + " over TCP");
      }
    }
    store_->set("gsync/shm/" + std::to_string(rank_), rec, dl);
    if (!seg_) return;
    peer_segs_.resize(static_cast<std::size_t>(size_));
    const std::uint32_t my_slot = slot_of(rank_);
    shm_light_ = light_capable;
    for (int j : local) {
      if (j == rank_) continue;
      const std::string r = store_->get("gsync/shm/" + std::to_string(j), dl);
      if (r == "-") continue;
      const auto sp = r.find(' ');
      if (sp == std::string::npos) throw error(errc::mismatch, "bad shared-memory record for rank " + std::to_string(j) + ": " + r);
      const std::size_t rb = std::stoull(r.substr(sp + 1));
      const auto sp2 = r.find(' ', sp + 1);
      if (sp2 == std::string::npos || r.substr(sp2 + 1) != "1") shm_light_ = false;
      peer_segs_[j] = shm::segment::open(r.substr(0, sp), static_cast<std::uint32_t>(local.size()), rb);
      auto& c = peers_[j];
      c.shm = true;
      c.out = &peer_segs_[j].ctl(my_slot);
      c.out_data = peer_segs_[j].data(my_slot);
      c.out_cap = rb;
      c.out_key = c.out->stamp_key;
      std::memset(c.out_data, 0, rb);  // touch every page of our ring now, not on the first pass (shm::segment::map)
      c.in = &seg_.ctl(slot_of(j));
      c.in_data = seg_.data(slot_of(j));
      c.in_cap = opt_.shm_ring_bytes;
      c.in_key = c.in->stamp_key;
      c.peer_bell = &peer_segs_[j].bell();
      shm_peers_.push_back(j);
    }
  }

  // Copies as much of `peer`'s queue into its ring as there is room for. Returns true if any
  // byte moved. Messages start on 64-byte boundaries: [stamp][frame header][payload]; the stamp
  // goes in once the header and the payload's stamped bytes are written (shm.hpp).
  bool pump_shm(int peer) {
    auto& c = peers_[peer];
    const std::uint64_t cap = c.out_cap;
    std::uint64_t head = c.out->head.load(std::memory_order_relaxed);  // only this rank writes it
    bool moved = false, unpublished = false;
    auto publish = [&] {  // one release store and one wake-up check per piece, header and payload together
      shm_publish(c, head);
      unpublished = false;
    };
    while (!c.q.empty()) {
      auto& op = c.q.front();
      if (op.done == 0) {
        const std::size_t first = shm_begin(c, head, op.h, op.p, op.n);
        if (first == SIZE_MAX) break;
        op.done = sizeof(frame_header) + first;
        moved = unpublished = true;
      }
      while (op.done < sizeof(frame_header) + op.n) {
        if (!shm_room(c, head, 1)) break;
        const std::size_t off = op.done - sizeof(frame_header);
        const std::uint64_t pos = head % cap;
        const std::size_t k = static_cast<std::size_t>(
            std::min<std::uint64_t>({cap - (head - c.out_tail), cap - pos, op.n - off, shm_chunk}));
        std::memcpy(c.out_data + pos, op.p + off, k);
        head += k;
        op.done += k;
        moved = true;
        publish();
      }
      if (unpublished) publish();
      if (op.done < sizeof(frame_header) + op.n) break;
      c.q.pop_front();
      --queued_;
      --shm_queued_;
    }
    return moved;
  }

  // True when `c`'s ring has room for `need` more bytes at `head`. The consumer's tail is used
  // as last read: it only grows, so it errs on the safe side, and rereading it (a cache line the
  // consumer writes after every message) only when it shows too little room saves a cache-line
  // transfer per message.
  bool shm_room(peer_conn& c, std::uint64_t head, std::uint64_t need) {
    if (head + need - c.out_tail <= c.out_cap) return true;
    c.out_tail = c.out->tail.load(std::memory_order_acquire);
    return head + need - c.out_tail <= c.out_cap;
  }

  // Starts message (h, p, n) in `c`'s ring at the first 64-byte boundary from `head`, if there is
  // room for its header and stamped payload bytes: writes them, then the stamp, and moves `head`
  // past them. Returns the payload bytes written, or SIZE_MAX (nothing written) without room.
  std::size_t shm_begin(peer_conn& c, std::uint64_t& head, const frame_header& h, const std::byte* p, std::size_t n) {
    const std::uint64_t start = shm::align64(head);
    const std::size_t first = shm::stamped_payload(start, n, c.out_cap);
    if (!shm_room(c, head, start - head + shm::header_slot + first)) return SIZE_MAX;
    std::byte* at = c.out_data + start % c.out_cap;
    std::memcpy(at + shm::header_offset, &h, sizeof h);
    if (first) std::memcpy(at + shm::header_slot, p, first);
    shm::put_stamp(at, shm::stamp_of(start, c.out_key));
    head = start + shm::header_slot + first;
    return first;
  }

  // Publishes `c`'s head (release) and wakes the consumer if it sleeps.
  void shm_publish(peer_conn& c, std::uint64_t head) {
    c.out->head.store(head, std::memory_order_release);
    shm::notify(*c.peer_bell, shm_light_);
  }

  bool pump_all_shm() {
    bool moved = false;
    if (shm_queued_ == 0) return false;
    for (int p : shm_peers_)
      if (!peers_[p].q.empty()) moved |= pump_shm(p);
    return moved;
  }

  // True once `peer`'s ring holds what the pending read needs: the next message's stamp (a wait
  // for a header), or head >= need_head (a wait for more payload).
  bool shm_ready(int peer) const {
    const auto& c = peers_[peer];
    if (c.need_stamp) return shm::get_stamp(c.in_data + c.stamp_at) == c.need_stamp;
    return c.in->head.load(std::memory_order_acquire) >= c.need_head;
  }

  // Reads the next message's header, waiting for its stamp (the stamped payload bytes are then
  // known to be there too). The tail is published with the payload's first piece (or at its end,
  // for an empty payload): one store and one wake-up check per small message.
  void shm_read_header(int peer, frame_header& h, deadline dl, message_id id) {
    static_assert(sizeof(frame_header) == shm::header_slot - shm::header_offset);
    auto& c = peers_[peer];
    const std::uint64_t start = shm::align64(c.in_pos);
    c.stamp_at = start % c.in_cap;
    c.need_stamp = shm::stamp_of(start, c.in_key);
    while (!shm_ready(peer)) wait_progress(peer, dl, id);
    c.need_stamp = 0;
    std::memcpy(&h, c.in_data + c.stamp_at + shm::header_offset, sizeof h);
    c.in_pos = start + shm::header_slot;
    c.in_known = c.in_pos + shm::stamped_payload(start, static_cast<std::size_t>(h.bytes), c.in_cap);
  }

  // Publishes what this rank has read from `peer`'s ring, waking the peer if it waits for room.
  void shm_release(peer_conn& c) {
    c.in->tail.store(c.in_pos, std::memory_order_release);
    shm::notify(*c.peer_bell, shm_light_);
  }

  // Reads n payload bytes: copied to dst, or handed to `consume` in pieces that are multiples
  // of `align` (which divides 64, so no element straddles the ring's end).
  void shm_read_payload(int peer, std::byte* dst, std::size_t n, std::size_t align,
                        detail::function_ref<void(std::span<const std::byte>)>* consume, deadline dl, message_id id) {
    auto& c = peers_[peer];
    std::size_t got = 0;
    while (got < n) {
      const std::uint64_t tail = c.in_pos;
      if (c.in_known < tail + (n - got)) c.in_known = std::max(c.in_known, c.in->head.load(std::memory_order_acquire));
      const std::uint64_t avail = c.in_known - tail;
      const std::uint64_t pos = tail % c.in_cap;
      std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>({avail, c.in_cap - pos, n - got}));
      if (consume) k -= k % align;
      if (k == 0) {
        if (c.in->tail.load(std::memory_order_relaxed) != tail) shm_release(c);  // the header's bytes: room for the peer
        c.need_head = tail + std::min<std::size_t>(align, n - got);
        wait_progress(peer, dl, id);
        continue;
      }
      if (consume) (*consume)(std::span<const std::byte>(c.in_data + pos, k));
      else std::memcpy(dst + got, c.in_data + pos, k);
      got += k;
      c.in_pos = tail + k;
      shm_release(c);
    }
    if (c.in->tail.load(std::memory_order_relaxed) != c.in_pos) shm_release(c);  // an empty payload
  }

  // Progress without blocking on shared memory: pumps queued sends, reports whether the pending
  // read from `in_peer` (if a shared-memory peer) can go on.
  bool shm_progress(int in_peer) {
    bool p = pump_all_shm();
    if (in_peer >= 0 && peers_[in_peer].shm && shm_ready(in_peer)) p = true;
    return p;
  }

  // A wait that involves only shared-memory peers: spin, then sleep on this rank's doorbell (at
  // most max_sleep_ms at a time, checking that the peers it waits for are still alive).
  // With `sockets`, also hands queued TCP sends to the kernel between polls.
  void shm_block(int in_peer, deadline dl, message_id id, int max_sleep_ms = 100, bool sockets = false) {
    if (opt_.spin_us > 0) {
      // Look at the ring after every pause: one pause takes 5-150 cycles depending on the CPU (26 ns
      // measured on this project's AMD EPYC machines), and a message is often ready within tens of
      // nanoseconds. Checking only every 64 pauses added up to 1.7 us to every message there (a
      // 2-rank 8-byte allreduce took 1.2 us against Open MPI's 0.25 over its shared memory).
      // The clock and the sockets are looked at every 32 checks (the clock first after them: a
      // read costs ~25 ns, and most waits end sooner).
      std::chrono::steady_clock::time_point until{};
      for (;;) {
        for (int i = 0; i < 32; ++i) {
          if (shm_progress(in_peer)) return;
          cpu_relax();
        }
        if (sockets) pump_sockets();
        const auto now = std::chrono::steady_clock::now();
        if (until == std::chrono::steady_clock::time_point{}) until = now + std::chrono::microseconds(opt_.spin_us);
        else if (now >= until) break;
      }
    }
    if (opt_.yield_us > 0) {  // give the core to whoever runs (often the rank waited for), stay awake
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(opt_.yield_us);
      do {
        ::sched_yield();
        if (shm_progress(in_peer)) return;
        if (sockets) pump_sockets();
      } while (std::chrono::steady_clock::now() < until);
    }
    auto& bell = seg_.bell();
    const std::uint32_t seen = shm::arm(bell, shm_light_);
    if (shm_progress(in_peer) || aborted_.load(std::memory_order_acquire)) return shm::disarm(bell);
    // A peer that fails or leaves rings this bell; one killed outright is noticed by the liveness
    // check after the timed sleep.
    const int ms = std::min(max_sleep_ms, detail::ms_left(dl));
    const bool rang = !shm::sleep(bell, seen, ms);
    if (shm_progress(in_peer)) {
      // Progress after a full sleep during which nobody rang: a wake-up was lost (see shm.hpp),
      // or the data came in the few nanoseconds between the sleep's end and this check.
      if (!rang && bell.bell.load(std::memory_order_relaxed) == seen) ++shm_late_wakeups_;
      return;
    }
    check_shm_peers(in_peer, id);
    if (sockets) watch_idle_sockets(id);
    if (std::chrono::steady_clock::now() >= dl) timed_out(in_peer, id);
  }

  // Checks, without waiting, whether a TCP peer with nothing queued has closed its connection (a
  // wait on the sockets watches them the same way): a wait for a same-host peer with sends to
  // other hosts queued calls it after each sleep, so a failed peer on another host is noticed
  // within a millisecond or so, not at the timeout.
  void watch_idle_sockets(message_id id) {
    pfds_.clear();
    pidx_.clear();
    for (int p = 0; p < size_; ++p)
      if (p != rank_ && !peers_[p].shm && peers_[p].fd >= 0 && !peers_[p].closed && peers_[p].q.empty()) {
        pfds_.push_back({peers_[p].fd, POLLRDHUP, 0});
        pidx_.push_back(p);
      }
    if (pfds_.empty() || ::poll(pfds_.data(), pfds_.size(), 0) <= 0) return;
    for (std::size_t i = 0; i < pfds_.size(); ++i)
      if (pfds_[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) closed_elsewhere(pidx_[i], id);
  }

  // Fails with peer_lost if a shared-memory peer this wait depends on has failed or exited,
  // naming the rank that was lost first when the peer's failure was itself caused by a loss.
  void check_shm_peers(int in_peer, message_id id) {
    int culprit = -1;
    auto gone = [&](int p) -> std::string {  // empty while p is alive
      auto& c = peers_[p];
      if (const std::uint32_t v = c.peer_bell->failed.load(std::memory_order_acquire)) {
        if (v & shm_left) return culprit = p, "left (its communicator was destroyed)";
        culprit = static_cast<int>(v & ~shm_left) - 1;
        if (culprit == p || culprit < 0 || culprit >= size_) return culprit = p, "failed";
        return "failed after losing rank " + std::to_string(culprit);
      }
      pollfd f{c.fd, POLLIN, 0};
      if (::poll(&f, 1, 0) <= 0) return {};
      char b;
      const ssize_t r = ::recv(c.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
      if (r > 0)
        fail(errc::mismatch, "rank " + std::to_string(rank_) + ": unexpected bytes on the control connection of same-host rank " +
                                 std::to_string(p));
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return {};
      return culprit = p, "exited or crashed";
    };
    if (in_peer >= 0 && peers_[in_peer].shm && !shm_ready(in_peer))
      if (auto why = gone(in_peer); !why.empty())
        lost(in_peer, "rank " + std::to_string(rank_) + ": rank " + std::to_string(in_peer) + " (same host) " + why +
                          " during op #" + std::to_string(id.seq) + " while this rank waited for its data", culprit);
    for (int p : shm_peers_)  // a same-host peer that failed (not one that left normally) fails this wait too
      if (const std::uint32_t v = peers_[p].peer_bell->failed.load(std::memory_order_acquire); v && !(v & shm_left) && p != in_peer) {
        const int first = static_cast<int>(v) - 1;
        const bool chain = first != p && first >= 0 && first < size_;
        lost(p, "rank " + std::to_string(rank_) + ": rank " + std::to_string(p) + " (same host) failed" +
                    (chain ? " after losing rank " + std::to_string(first) : std::string()) +
                    (id.seq ? " during op #" + std::to_string(id.seq) : std::string(" while this rank's sends were pending")),
             chain ? first : p);
      }
    for (int p : shm_peers_)
      if (!peers_[p].q.empty())
        if (auto why = gone(p); !why.empty())
          lost(p, "rank " + std::to_string(rank_) + ": rank " + std::to_string(p) + " (same host) " + why +
                         " during op #" + std::to_string(id.seq) + " before taking the data sent to it", culprit);
  }

  static void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  // Timeout of the operation `id`: names the call, its bytes, how long it waited and for whom,
  // and (from the store's progress records) which ranks had not reached it.
  [[noreturn]] void timed_out(int in_peer, message_id id) {
    std::string what = in_peer >= 0 ? "data from rank " + std::to_string(in_peer) : std::string("peers to accept queued data");
    std::string blocked;
    for (int p = 0; p < size_; ++p)
      if (!peers_[p].q.empty()) blocked += (blocked.empty() ? "" : ", ") + std::to_string(p);
    const auto now = std::chrono::steady_clock::now();
    const double waited = (id.seq == stall_.seq && id.tag == stall_.tag)
                              ? std::chrono::duration<double>(now - stall_.since).count() : 0.0;
    char w[32];
    std::snprintf(w, sizeof w, "%.1f", waited);
    std::string msg = "rank " + std::to_string(rank_) + ": " + describe_message(id.tag, id.seq, id.fp) + " (" +
                      std::to_string(payload_bytes(id.fp)) + " bytes per rank) timed out after waiting " + w + " s for " + what +
                      (blocked.empty() ? "" : " (sends still queued to ranks " + blocked + ")");
    if (id.tag >= 0x80000000u) msg += p2p_wait_hint(in_peer);
    else if (id.seq != 0) {
      if (auto m = other_call(id, now + std::chrono::seconds(1))) fail(errc::mismatch, *m);
      msg += behind_report(id.seq, now + std::chrono::seconds(1));
    }
    fail(errc::timeout, msg);
  }

  // pump() for every TCP peer with queued sends.
  void pump_sockets() {
    for (int p = 0; p < size_; ++p)
      if (!peers_[p].shm && !peers_[p].q.empty()) pump(p);
  }

  // Writes as much of the peer's queue as the kernel takes now; several queued messages go out in
  // one sendmsg. Returns when the queue is empty or the socket would block.
  void pump(int peer) {
    auto& c = peers_[peer];
    while (!c.q.empty()) {
      iovec iov[32];
      int k = 0;
      for (auto it = c.q.begin(); it != c.q.end() && k + 2 <= 32; ++it) {
        std::size_t d = it->done;
        if (d < sizeof(frame_header)) {
          iov[k++] = {reinterpret_cast<char*>(&it->h) + d, sizeof(frame_header) - d};
          d = 0;
        } else {
          d -= sizeof(frame_header);
        }
        if (it->n > d) iov[k++] = {const_cast<std::byte*>(it->p) + d, it->n - d};
      }
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = static_cast<std::size_t>(k);
      ssize_t w = ::sendmsg(c.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (w < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        lost(peer, "rank " + std::to_string(rank_) + ": connection to rank " + std::to_string(peer) + " lost while sending (" +
                       detail::errno_text(errno) + "): the peer exited or crashed");
      }
      auto left = static_cast<std::size_t>(w);
      while (left > 0) {
        auto& op = c.q.front();
        const std::size_t need = sizeof(frame_header) + op.n - op.done;
        const std::size_t take = std::min(need, left);
        op.done += take;
        left -= take;
        if (op.done == sizeof(frame_header) + op.n) {
          c.q.pop_front();
          --queued_;
        } else {
          break;
        }
      }
    }
  }

  // Reads the next frame header and, in the same system call when available, up to `n` payload
  // bytes into dst (never more than the expected message, so a well-formed stream is never
  // over-read; a malformed one fails the header check and poisons the transport anyway).
  // Returns the payload bytes read.
  std::size_t read_header(int peer, frame_header& h, std::byte* dst, std::size_t n, deadline dl, message_id id) {
    std::size_t got = 0;
    auto* hb = reinterpret_cast<char*>(&h);
    while (got < sizeof h) {
      iovec iov[2] = {{hb + got, sizeof h - got}, {dst, n}};
      msghdr mh{};
      mh.msg_iov = iov;
      mh.msg_iovlen = n ? 2 : 1;
      ssize_t r = ::recvmsg(peers_[peer].fd, &mh, MSG_DONTWAIT);
      if (r > 0) {
        got += static_cast<std::size_t>(r);
        continue;
      }
      if (r == 0) lost_while_receiving(peer, id, 0);
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) lost_while_receiving(peer, id, errno);
      wait_progress(peer, dl, id, n);
    }
    return got - sizeof h;
  }

  [[noreturn]] void lost_while_receiving(int peer, message_id id, int err) {
    if (err == 0)
      lost(peer, "rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) +
                     " closed its connection (it exited, crashed or failed) during op #" + std::to_string(id.seq), peer);
    lost(peer, "rank " + std::to_string(rank_) + ": connection to rank " + std::to_string(peer) + " lost while receiving (" +
                   detail::errno_text(err) + ")");
  }

  // Reads up to n bytes from peer, waiting (and progressing sends) until at least one arrives.
  std::size_t read_some(int peer, std::byte* dst, std::size_t n, deadline dl, message_id id) {
    if (n == 0) return 0;
    for (;;) {
      ssize_t r = ::recv(peers_[peer].fd, dst, n, MSG_DONTWAIT);
      if (r > 0) return static_cast<std::size_t>(r);
      if (r == 0) lost_while_receiving(peer, id, 0);
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) lost_while_receiving(peer, id, errno);
      wait_progress(peer, dl, id, n);
    }
  }

  void read_exact(int peer, std::byte* dst, std::size_t n, deadline dl, message_id id) {
    while (n > 0) {
      std::size_t got = read_some(peer, dst, n, dl, id);
      dst += got;
      n -= got;
    }
  }

  // Blocks until `in_peer` (if >= 0) has data, pumping every queue that can move. Sockets are
  // polled; shared-memory rings are checked between polls (see file comment). May return early
  // (the caller re-checks and calls again). `expect`: payload bytes still to come from in_peer
  // for the pending read, when known.
  void wait_progress(int in_peer, deadline dl, message_id id, std::size_t expect = SIZE_MAX) {
    if (aborted_.load(std::memory_order_acquire)) fail(errc::aborted, "");
    if (const auto now = stall_check(in_peer, id, dl)) cross_check(in_peer, id, *now);
    const bool in_shm = in_peer >= 0 && peers_[in_peer].shm;
    if (shm_progress(in_peer)) return;
    const bool sock_in = in_peer >= 0 && !in_shm;
    const bool sock_out = queued_ > shm_queued_;
    const bool shm_wait = in_shm || shm_queued_ > 0;
    if (!sock_in && !sock_out) {
      if (shm_wait) shm_block(in_peer, dl, id);
      return;
    }
    if (!sock_in && shm_wait) {
      // Waiting for a same-host peer while sends to other hosts are queued (a hierarchical
      // schedule overlapping its levels, or a host's last rank in a flat ring): wait as for
      // shared memory alone, which a same-host message ends at once, handing the sockets what
      // they take between polls and sleeping on the doorbell at most a millisecond at a time. A
      // poll on the sockets instead would only wake on them and leave the same-host data waiting.
      pump_sockets();
      shm_block(in_peer, dl, id, /*max_sleep_ms=*/1, /*sockets=*/true);
      return;
    }
    pfds_.clear();
    pidx_.clear();
    if (sock_in) {
      pfds_.push_back({peers_[in_peer].fd, POLLIN, 0});
      pidx_.push_back(in_peer);
    }
    for (int p = 0; p < size_; ++p)
      if (!peers_[p].shm && !peers_[p].q.empty()) {
        if (p == in_peer) pfds_[0].events |= POLLOUT;
        else {
          pfds_.push_back({peers_[p].fd, POLLOUT, 0});
          pidx_.push_back(p);
        }
      }
    int r = 0;
    if (opt_.spin_us > 0 || shm_wait) {  // short busy poll: a reply often comes within microseconds
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(std::max(opt_.spin_us, shm_wait ? 20 : 0));
      do {
        r = ::poll(pfds_.data(), pfds_.size(), 0);
        if (r == 0 && shm_wait && shm_progress(in_peer)) return;
      } while (r == 0 && std::chrono::steady_clock::now() < until);
    }
    if (r == 0 && sock_in && opt_.tcp_yield_us > 0 && expect <= opt_.tcp_yield_bytes) {
      // A small message on its way: stay awake, giving the core to whoever runs (see tcp_options).
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(opt_.tcp_yield_us);
      do {
        ::sched_yield();
        r = ::poll(pfds_.data(), pfds_.size(), 0);
        if (r == 0 && shm_wait && shm_progress(in_peer)) return;
      } while (r == 0 && std::chrono::steady_clock::now() < until);
    }
    // While blocked, also watch every other TCP peer for a close: one that failed (a mismatch it
    // detected, an abort, a timeout) left a record in the store, and this rank fails at once
    // instead of waiting for a message that will never come. A peer that left normally has no
    // record and is not watched again.
    const std::size_t watch_from = pfds_.size();
    if (r == 0)
      for (int p = 0; p < size_; ++p)
        if (p != rank_ && p != in_peer && !peers_[p].shm && peers_[p].fd >= 0 && !peers_[p].closed && peers_[p].q.empty()) {
          pfds_.push_back({peers_[p].fd, POLLRDHUP, 0});
          pidx_.push_back(p);
        }
    // Block at most a second at a time, so that stall_check runs while an operation hangs.
    if (r == 0) r = ::poll(pfds_.data(), pfds_.size(), shm_wait ? std::min(1, detail::ms_left(dl)) : std::min(1000, detail::ms_left(dl)));
    if (r < 0) {
      if (errno == EINTR) return;
      fail(errc::system, "poll: " + detail::errno_text(errno));
    }
    if (r == 0) {
      if (shm_wait) {
        if (shm_progress(in_peer)) return;
        check_shm_peers(in_peer, id);
      }
      if (std::chrono::steady_clock::now() < dl) return;
      timed_out(in_peer, id);
    }
    for (std::size_t i = 0; i < pfds_.size(); ++i) {
      if (i >= watch_from) {
        if (pfds_[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) closed_elsewhere(pidx_[i], id);
        continue;
      }
      if ((pfds_[i].revents & (POLLOUT | POLLERR | POLLHUP)) && !peers_[pidx_[i]].q.empty()) pump(pidx_[i]);
    }
  }

  // Stall report. An operation that has waited half of GSYNC_STALL_WARN_S, or half of its own
  // timeout, publishes "gsync/stall/R" = its op number and call in the store (silently), and from
  // then on compares the record of the peer it waits for once a second: a peer waiting in another
  // collective under the same op number is a mismatch, raised at once (`other_call`). At
  // GSYNC_STALL_WARN_S it logs, once, what it waits for and which ranks have not reached its op
  // according to the store: a rank with no record, or one stalled at an earlier op, is the one to
  // look at. A timeout reports the same (timed_out). Nothing is sent while operations progress.
  // Returns the time it read, or nothing on an operation's first wait (nothing to check yet).
  // Its clock is detail::tick_clock: read on every wait, at a tenth of a second's precision needed.
  std::optional<std::chrono::steady_clock::time_point> stall_check(int in_peer, message_id id, deadline dl) {
    if (id.seq == 0) return std::nullopt;
    const auto now = detail::tick_clock::now();
    if (id.seq != stall_.seq || id.tag != stall_.tag) {
      withdraw_stall_record();  // the stalled op finished
      stall_ = stall_state{id.tag, id.seq, now, 0};
      return std::nullopt;
    }
    const auto waited = now - stall_.since;
    const auto warn = std::chrono::seconds(opt_.stall_warn_s > 0 ? opt_.stall_warn_s : 1000000000);
    const auto publish_at = std::min<std::chrono::steady_clock::duration>(warn / 2, (dl - stall_.since) / 2);
    if (stall_.stage == 0 && waited >= publish_at) {
      stall_.stage = 1;
      try {
        store_->set("gsync/stall/" + std::to_string(rank_), stall_record(id), now + std::chrono::seconds(2));
      } catch (const error&) {
      }
    }
    // A peer stalled in another collective under the same operation number can never meet this
    // one (a rank skipped or added a collective, and neither side sends the other anything this
    // call could check): a mismatch, reported now rather than as a timeout later.
    // Only the peer waited for is asked (one store request a second however large the job); a
    // timeout asks them all (timed_out).
    if (stall_.stage >= 1 && in_peer >= 0 && now - stall_.checked >= std::chrono::seconds(1)) {
      stall_.checked = now;
      if (auto m = other_call(id, now + std::chrono::seconds(2), in_peer)) fail(errc::mismatch, *m);
    }
    if (opt_.stall_warn_s <= 0 || stall_.stage != 1 || waited < warn) return now;
    stall_.stage = 2;
    std::string msg = "rank " + std::to_string(rank_) + ": " + describe_message(id.tag, id.seq, id.fp) + " has waited " +
                      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(waited).count()) + " s for " +
                      (in_peer >= 0 ? "data from rank " + std::to_string(in_peer) : std::string("peers to take queued data"));
    log_.warn(msg + (id.tag >= 0x80000000u ? p2p_wait_hint(in_peer) : behind_report(id.seq, now + std::chrono::seconds(2))));
    return now;
  }

  // Why a point-to-point message may never come (its numbers are per pair, so the collective
  // progress records say nothing about it).
  static std::string p2p_wait_hint(int in_peer) {
    if (in_peer < 0) return "; the receiver has not taken this point-to-point message yet";
    return "; rank " + std::to_string(in_peer) +
           " has not sent it yet. Operations on a communicator run one at a time in issue order, so ranks that each "
           "issue a recv (or recv_async) before their own send to the next rank wait for each other in a cycle: "
           "exchange with gsync::sendrecv (both directions at once), or order the calls so that the cycle breaks";
  }

  // Sets this rank's stall record back to "0" (no record) if it had published one (best effort).
  void withdraw_stall_record() noexcept {
    if (stall_.stage == 0) return;
    stall_.stage = 0;
    stall_.seq = 0;
    try {
      store_->set("gsync/stall/" + std::to_string(rank_), "0", std::chrono::steady_clock::now() + std::chrono::seconds(2));
    } catch (...) {
    }
  }

  // A stall record: "SEQ TAG FP" (FP: the fingerprint's 16 bytes in hex), so that a peer can tell
  // which call this rank waits in; readers take the leading number as the operation number.
  static std::string stall_record(message_id id) {
    static constexpr char hex[] = "0123456789abcdef";
    std::string r = std::to_string(id.seq) + " " + std::to_string(id.tag) + " ";
    unsigned char b[sizeof(fingerprint)];
    std::memcpy(b, &id.fp, sizeof b);
    for (unsigned char c : b) r += hex[c >> 4], r += hex[c & 15];
    return r;
  }

  // The other side of a collective mismatch that the store shows: a peer (`only`, else any) whose
  // stall record names the same operation number as `id` but another call. Collectives only
  // (point-to-point messages are numbered per pair). Best effort: nullopt when there is none or
  // the store cannot say.
  std::optional<std::string> other_call(message_id id, deadline sdl, int only = -1) {
    if (id.seq == 0 || id.tag >= 0x80000000u) return std::nullopt;
    try {
      for (int j = only >= 0 ? only : 0; j < (only >= 0 ? only + 1 : size_); ++j) {
        if (j == rank_) continue;
        const std::string key = "gsync/stall/" + std::to_string(j);
        if (!store_->check(key, sdl)) continue;
        std::istringstream in(store_->get(key, sdl));
        std::uint64_t seq = 0;
        std::uint32_t tag = 0;
        std::string fph;
        if (!(in >> seq >> tag >> fph) || seq != id.seq || fph.size() != 2 * sizeof(fingerprint) || tag >= 0x80000000u) continue;
        unsigned char b[sizeof(fingerprint)];
        bool ok = true;
        for (std::size_t i = 0; i < sizeof b && ok; ++i) {
          unsigned v = 0;
          ok = std::sscanf(fph.c_str() + 2 * i, "%2x", &v) == 1;
          b[i] = static_cast<unsigned char>(v);
        }
        fingerprint fp;
        std::memcpy(&fp, b, sizeof fp);
        if (!ok || (tag == id.tag && fp == id.fp)) continue;
        std::string m = "rank " + std::to_string(rank_) + " called " + describe_message(id.tag, id.seq, id.fp) + ", rank " +
                        std::to_string(j) + " called " + describe_message(tag, seq, fp);
        m += tag != id.tag ? ": different operations" : ": they disagree on the " + fingerprint_difference(id.fp, fp);
        return m + " (both wait, each in its own call: a rank skipped or added a collective?)";
      }
    } catch (const std::exception&) {
    }
    return std::nullopt;
  }

  // "; ranks that have not reached op #S: ..." from the other ranks' progress records in the store.
  std::string behind_report(std::uint64_t seq, deadline sdl) {
    try {
      std::string behind, waiting;
      for (int j = 0; j < size_; ++j) {
        if (j == rank_) continue;
        const std::string key = "gsync/stall/" + std::to_string(j);
        const std::uint64_t at = store_->check(key, sdl) ? std::stoull(store_->get(key, sdl)) : 0;
        if (at == 0) behind += (behind.empty() ? "" : ", ") + std::to_string(j) + " (no record: busy elsewhere or hung outside gsync)";
        else if (at < seq) behind += (behind.empty() ? "" : ", ") + std::to_string(j) + " (stuck at op #" + std::to_string(at) + ")";
        else waiting += (waiting.empty() ? "" : ", ") + std::to_string(j);
      }
      std::string m = behind.empty() ? "; every other rank has reached it and is waiting too (a lost message or a dead link?)"
                                     : "; ranks that have not reached op #" + std::to_string(seq) + ": " + behind;
      if (!waiting.empty()) m += "; waiting at or after it: " + waiting;
      return m;
    } catch (const std::exception& e) {
      return std::string("; the store could not be asked which ranks are behind: ") + e.what();
    }
  }

  // Checks a received header; `have` holds the `got` bytes that followed it (TCP), so that a
  // failure notice can be read out.
  // The expected frame passes inline; anything else goes to the out-of-line report.
  void check(const frame_header& h, message_id id, std::size_t n, int peer, const std::byte* have, std::size_t got) {
    if (h.magic == frame_magic && h.tag == id.tag && h.seq == id.seq && h.bytes == n && h.fp == id.fp) [[likely]] return;
    bad_frame(h, id, n, peer, have, got);
  }
  [[gnu::cold, gnu::noinline]] void bad_frame(const frame_header& h, message_id id, std::size_t n, int peer, const std::byte* have, std::size_t got) {
    if (h.magic == notice_magic) on_notice(peer, h, have, got, id);
    try {
      check_header(h, id, n, rank_, peer);
    } catch (const error& e) {
      fail(e.kind(), e.what());
    }
  }

  // `peer` failed and said why in a notice frame (see send_notices): fail with its kind if it is
  // a mismatch or an abort (so every rank reports what actually went wrong), else peer_lost.
  [[noreturn]] void on_notice(int peer, const frame_header& h, const std::byte* have, std::size_t got, message_id id) {
    const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(h.bytes, max_notice_bytes));
    std::string why(len, '\0');
    std::size_t at = std::min(got, len);
    if (at) std::memcpy(why.data(), have, at);
    try {
      const deadline d = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      if (peers_[peer].shm) shm_read_payload(peer, reinterpret_cast<std::byte*>(why.data()), len, 1, nullptr, d, id);
      else if (at < len) read_exact(peer, reinterpret_cast<std::byte*>(why.data()) + at, len - at, d, id);
    } catch (const error&) {
      if (broken_) throw;
      why += " [cut short]";
    }
    const std::string pre = "rank " + std::to_string(peer) + " reported: ";
    if (why.rfind(pre, 0) == 0) why = why.substr(pre.size());  // keep one level of "reported"
    const auto k = static_cast<errc>(h.tag);
    if (k == errc::mismatch || k == errc::aborted)
      fail(k, "rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) + " reported: " + why);
    const int first = h.seq > 0 && h.seq <= static_cast<std::uint64_t>(size_) ? static_cast<int>(h.seq) - 1 : peer;
    fail(errc::peer_lost, "rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) + " failed" +
                              (first != peer ? " after losing rank " + std::to_string(first) : std::string()) +
                              (id.seq ? " during op #" + std::to_string(id.seq) : std::string()) + ": " + why, first);
  }

  // The last words of a failing rank: to every peer whose outgoing stream is at a message
  // boundary (nothing queued, or the first queued message not started), a notice frame with the
  // error's kind and text, so that a peer waiting for data from this rank learns why it stops
  // (sockets: written without blocking; rings: as far as there is room). Best effort.
  void send_notices(errc kind, const std::string& msg, int lost) {
    notice_text_ = msg.substr(0, max_notice_bytes);
    const std::uint64_t first = lost >= 0 ? static_cast<std::uint64_t>(lost) + 1 : 0;  // the rank lost first, if any
    const frame_header nh{notice_magic, static_cast<std::uint32_t>(kind), first, notice_text_.size(), fingerprint{}};
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      auto& c = peers_[p];
      if (!c.q.empty() && c.q.front().done != 0) continue;  // mid-message: the stream cannot carry it
      if (c.shm) {
        queued_ -= c.q.size();
        shm_queued_ -= c.q.size();
        c.q.clear();
        c.q.push_back(send_op{nh, reinterpret_cast<const std::byte*>(notice_text_.data()), notice_text_.size(), 0});
        ++queued_;
        ++shm_queued_;
        pump_shm(p);
      } else if (c.fd >= 0) {
        iovec iov[2] = {{const_cast<frame_header*>(&nh), sizeof nh}, {notice_text_.data(), notice_text_.size()}};
        msghdr mh{};
        mh.msg_iov = iov;
        mh.msg_iovlen = 2;
        [[maybe_unused]] ssize_t w = ::sendmsg(c.fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
      }
    }
  }
  // The checks at the entry of every transport call: inline tests, out-of-line errors (the hot
  // path of a small message stays a few instructions).
  void check_peer(int peer) const {
    if (peer < 0 || peer >= size_ || peer == rank_) [[unlikely]] bad_peer(peer);
  }
  [[noreturn, gnu::cold, gnu::noinline]] void bad_peer(int peer) const {
    throw error(errc::invalid_argument, "rank " + std::to_string(rank_) + ": invalid peer rank " + std::to_string(peer));
  }
  void check_usable() {
    if (broken_ || aborted_.load(std::memory_order_acquire)) [[unlikely]] unusable();
  }
  [[noreturn, gnu::cold, gnu::noinline]] void unusable() {
    if (!broken_) fail(errc::aborted, "");
    throw error(broken_kind_, "rank " + std::to_string(rank_) + ": communicator unusable after an earlier error: " + broken_msg_);
  }
  static std::string failed_key(int r) { return "gsync/failed/" + std::to_string(r); }
  static std::string failure_record(errc kind, const std::string& msg) { return std::to_string(static_cast<int>(kind)) + " " + msg; }

  // A collective that has waited 100 ms looks at the next frame every other peer has sent this
  // rank (without consuming it): a frame of this very operation carrying another fingerprint is
  // a mismatch now, and a failure notice fails this rank now, rather than at the timeout. This
  // catches the calls where the disagreeing ranks never read from each other (two ranks each
  // believing to be a broadcast's root wait for different parents). Point-to-point messages are
  // numbered per pair and are not compared across peers.
  void cross_check(int in_peer, message_id id, std::chrono::steady_clock::time_point now) {
    if (id.seq == 0 || id.tag >= 0x80000000u || id.seq != stall_.seq || id.tag != stall_.tag) return;
    if (now - stall_.since < std::chrono::milliseconds(100)) return;
    for (int p = 0; p < size_; ++p) {
      if (p == rank_ || p == in_peer) continue;
      auto& c = peers_[p];
      frame_header h;
      if (c.shm) {
        const std::uint64_t start = shm::align64(c.in_pos);
        if (shm::get_stamp(c.in_data + start % c.in_cap) != shm::stamp_of(start, c.in_key)) continue;
        std::memcpy(&h, c.in_data + start % c.in_cap + shm::header_offset, sizeof h);
      } else {
        if (c.fd < 0 || c.closed) continue;
        if (::recv(c.fd, &h, sizeof h, MSG_PEEK | MSG_DONTWAIT) != static_cast<ssize_t>(sizeof h)) continue;
      }
      if (h.magic == notice_magic) {  // consume and report it
        if (c.shm) shm_read_header(p, h, std::chrono::steady_clock::now() + std::chrono::seconds(1), id);
        else read_exact(p, reinterpret_cast<std::byte*>(&h), sizeof h, std::chrono::steady_clock::now() + std::chrono::seconds(1), id);
        on_notice(p, h, nullptr, 0, id);
      }
      if (h.magic == frame_magic && h.tag == id.tag && h.seq == id.seq && !(h.fp == id.fp))
        check(h, id, static_cast<std::size_t>(h.bytes), p, nullptr, 0);
    }
  }

  // `peer`, which this rank is not waiting for, closed its connection: fail with its failure
  // record if it left one, else (it left normally, or died: the peers it was talking to will
  // report that) stop watching it.
  // Only a failure during this collective or an earlier one ends the current operation: a peer
  // that has finished its part and failed in a later collective, or one this point-to-point
  // message does not involve, is met (as a closed stream) when it is next needed.
  void closed_elsewhere(int peer, message_id id) {
    peers_[peer].closed = true;
    if (id.tag >= 0x80000000u || id.seq == 0) return;
    try {
      const deadline d = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      if (!store_->check(failed_key(peer), d)) return;
      const std::string at = store_->check(failed_key(peer) + "/op", d) ? store_->get(failed_key(peer) + "/op", d) : "0";
      const std::uint64_t op = std::strtoull(at.c_str(), nullptr, 10);
      if (op > id.seq) return;
    } catch (const error&) {
      return;
    }
    lost(peer, "rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) + " failed during op #" + std::to_string(id.seq));
  }

  // A peer's connection closed or its `failed` flag rose: if it left a failure record (a mismatch
  // it detected, an abort), fail with that kind and its words; otherwise peer_lost with `msg`.
  [[noreturn]] void lost(int peer, const std::string& msg, int culprit = -1) {
    if (!broken_ && !aborted_.load(std::memory_order_acquire)) {
      try {
        const deadline d = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        if (store_->check(failed_key(peer), d)) {
          const std::string rec = store_->get(failed_key(peer), d);
          const auto sp = rec.find(' ');
          const int k = sp == std::string::npos ? 0 : std::atoi(rec.substr(0, sp).c_str());
          std::string why = rec.substr(sp + 1);
          const std::string pre = "rank " + std::to_string(peer) + " reported: ";
          if (why.rfind(pre, 0) == 0) why = why.substr(pre.size());  // keep one level of "reported"
          if (k == static_cast<int>(errc::mismatch) || k == static_cast<int>(errc::aborted))
            fail(static_cast<errc>(k), "rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) + " reported: " + why);
          fail(errc::peer_lost, msg + "; it had failed: " + why, culprit);
        }
      } catch (const error&) {
        if (broken_) throw;  // the fail() above
        if (rank_ != 0 && peer != 0)  // the store, served by rank 0, is gone too: say so, it is likely the cause
          fail(errc::peer_lost, msg + "; the store (served by rank 0) cannot be reached either: rank 0 has probably died first", 0);
      }
    }
    fail(errc::peer_lost, msg, culprit);
  }

  // Poisons the transport and throws. `lost` names the rank whose loss caused this (shared with
  // same-host peers through this rank's `failed` word, so that they can name it too). After
  // abort() every failure is reported as the abort. A mismatch or an abort is recorded in the
  // store before the connections close (see file comment).
  [[noreturn]] void fail(errc kind, const std::string& msg_in, int lost = -1) {
    std::string msg = msg_in;
    if (aborted_.load(std::memory_order_acquire) && kind != errc::aborted) kind = errc::aborted, msg.clear();
    if (kind == errc::aborted && msg.empty()) {
      std::lock_guard lk(abort_m_);
      msg = abort_msg_;
    }
    if (!broken_) {
      // A wait that saw aborted_ fails here while abort() may still be writing the reason to the
      // store (a fresh connection: milliseconds, seconds on a loaded machine). Closing the
      // connections or raising `failed` now would let the peers look for the record too early and
      // report a lost rank without the reason, so wait for abort() to get that far (its store
      // deadline is 3 s).
      if (kind == errc::aborted && aborted_.load(std::memory_order_acquire)) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(4);
        while (!abort_recorded_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      broken_ = true;
      broken_kind_ = kind;
      broken_msg_ = msg;
      if (kind != errc::aborted || !aborted_.load(std::memory_order_acquire)) {  // abort() recorded its own
        try {
          const deadline d = std::chrono::steady_clock::now() + std::chrono::seconds(1);
          store_->set(failed_key(rank_) + "/op", std::to_string(cur_op_), d);  // before the record: readers see both
          store_->set(failed_key(rank_), failure_record(kind, msg), d);
        } catch (const std::exception&) {
        }
      }
      try {
        send_notices(kind, msg, lost);
      } catch (const std::exception&) {
      }
      for (auto& p : peers_) {
        if (p.fd >= 0) ::shutdown(p.fd, SHUT_RDWR);
        p.q.clear();  // unsent bytes may belong to buffers the caller frees after the error
      }
      queued_ = 0;
      shm_queued_ = 0;
      if (seg_) {
        seg_.bell().failed.store(static_cast<std::uint32_t>((lost >= 0 ? lost : rank_) + 1), std::memory_order_release);
        for (int p : shm_peers_) shm::notify(*peers_[p].peer_bell);
      }
      log_.warn(msg);
    }
    throw error(kind, msg);
  }

  int rank_, size_;
  logger log_;
  bootstrap::auth::job_key key_;  // launch_info::job_key or GSYNC_JOB_KEY (bootstrap/auth.hpp)
  bool cc_warned_ = false;
  struct stall_state {
    std::uint32_t tag = 0;
    std::uint64_t seq = 0;
    std::chrono::steady_clock::time_point since{};
    int stage = 0;  // 0: quiet, 1: published in the store, 2: reported
    std::chrono::steady_clock::time_point checked{};  // when the peers' records were last compared
  } stall_;
  tcp_options opt_;
  asio::io_context io_;
  asio::ip::tcp::acceptor acc_;
  std::unique_ptr<bootstrap::store_server> server_;
  std::unique_ptr<bootstrap::store_client> store_;
  std::uint64_t nonce_ = 0;
  std::vector<peer_conn> peers_;
  std::size_t queued_ = 0;       // messages queued, all peers
  std::uint64_t posted_bytes_ = 0;  // payload bytes handed to post_send (payload_bytes_posted)
  std::size_t shm_queued_ = 0;   // of which to shared-memory peers
  detail::aligned_bytes staging_;
  std::string name_ = "tcp";
  int local_size_ = 1;
  bool shm_light_ = false;  // every shared-memory rank of this host uses asymmetric fences (shm.hpp)
  std::uint64_t shm_late_wakeups_ = 0;  // see shm_late_wakeups()
  int machine_ranks_ = 1;
  std::uint64_t cur_op_ = 0;  // the collective this rank is in (or was last in), for failure records  // ranks on this kernel (same bootstrap::kernel_id()), whatever their host identity
  topology topo_;
  shm::segment seg_;                     // this rank's segment (its inbound rings and doorbell)
  std::vector<shm::segment> peer_segs_;  // same-host peers' segments, by rank
  std::vector<int> shm_peers_;           // ranks reached through shared memory
  static constexpr std::size_t shm_chunk = 64 << 10;  // bytes published per ring update
  static constexpr auto store_linger = std::chrono::seconds(10);  // longest wait of rank 0 for the others at exit
  static constexpr std::uint32_t shm_left = 0x80000000u;  // `failed` word: the rank left normally
  std::vector<pollfd> pfds_;
  std::vector<int> pidx_;
  bool broken_ = false;
  errc broken_kind_ = errc::system;
  std::string broken_msg_;
  std::string notice_text_;  // the failure notice's text (send_notices), alive while rings hold it
  std::string master_addr_;  // the store's address, for abort()'s own connection
  std::uint16_t master_port_ = 0;
  std::mutex abort_m_;       // guards abort_msg_
  std::atomic<bool> aborted_{false};
  std::atomic<bool> abort_recorded_{false};  // abort() has tried to put its reason in the store (see fail)
  std::string abort_msg_;
};

}  // namespace gsync::transport
