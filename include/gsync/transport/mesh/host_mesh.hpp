#pragma once
/// \file
/// `transport::host_mesh`: the endpoint behind `transport::tcp` (one rank's connections to every
/// other rank). Internal: users name `transport::tcp` (transport/tcp.hpp); this header and the
/// files beside it are compiled where the set-up code is (header-only: through transport/tcp.hpp;
/// GSYNC_SEPARATE_COMPILATION: in src/gsync.cpp only). Its member functions live by concern in
/// setup.ipp, setup_steps.ipp, connect.ipp, data_path.ipp, link_path.ipp, progress.ipp, diagnostics.ipp and failure.ipp.
///
/// A mesh of per-peer links: every peer has the mesh's own TCP connection (hello, failure notices,
/// liveness) and a port on the first link type of the list whose endpoint connects the pair
/// (shared memory inside a host, TCP otherwise, for `transport::tcp`). The links move bytes; the
/// mesh routes each call to the peer's data link, waits on the links (waiter.hpp, progress.ipp), and
/// runs the failure protocol (failure_state.hpp, failure.ipp), the stall monitor and the diagnostics
/// across them. docs/architecture.md ("The host mesh at work") describes set-up, the data path,
/// same-host peers, failures, sharing and timeouts.

#include <sched.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gsync/bootstrap/auth.hpp"
#include "gsync/bootstrap/fd_limit.hpp"
#include "gsync/bootstrap/host_id.hpp"
#include "gsync/bootstrap/interface.hpp"
#include "gsync/bootstrap/launch_env.hpp"
#include "gsync/bootstrap/rank_record.hpp"
#include "gsync/bootstrap/store.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/config.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/op_numbering.hpp"
#include "gsync/core/health.hpp"
#include "gsync/core/log.hpp"
#include "gsync/core/topology.hpp"
#include "gsync/detail/aligned_buffer.hpp"
#include "gsync/detail/crc32c.hpp"
#include "gsync/detail/random.hpp"
#include "gsync/bootstrap/socket.hpp"
#include "gsync/core/tick_clock.hpp"
#include "gsync/transport/frame.hpp"
#include "gsync/transport/link_probe.hpp"
#include "gsync/transport/links/link_kit.hpp"
#include "gsync/transport/links/link_port.hpp"
#include "gsync/transport/links/shm_link.hpp"
#include "gsync/transport/links/tcp_link.hpp"
#include "gsync/transport/mesh/failure_state.hpp"
#include "gsync/transport/mesh/heartbeat.hpp"
#include "gsync/transport/mesh/peer_conn.hpp"
#include "gsync/transport/mesh/peer_listener.hpp"
#include "gsync/transport/mesh/peer_records.hpp"
#include "gsync/transport/mesh/rare_calls.hpp"
#include "gsync/transport/mesh/records.hpp"
#include "gsync/transport/mesh/shared_mode.hpp"
#include "gsync/transport/mesh/shrink_state.hpp"
#include "gsync/transport/mesh/stall_monitor.hpp"
#include "gsync/transport/mesh/start_connector.hpp"
#include "gsync/transport/mesh/waiter.hpp"
#include "gsync/transport/shm.hpp"
#include "gsync/core/host_options.hpp"

namespace gsync::transport {

/// One rank's endpoint: a TCP connection to every peer, shared-memory rings to same-host peers
/// (see the file comment). Satisfies `transport_policy`.
class host_mesh {
 public:
  /// Joins the job of `li`, its peers' data on the links of `kit` (the mesh's list: for each
  /// peer, the first type whose endpoint connects the pair). `server`: a store already serving at li's master address, which this
  /// rank (rank 0) serves the job with; `key`: the job key, instead of li's or the environment's;
  /// `rj`: the set-up of a shrink (all three from a shrink: shrink.ipp).
  host_mesh(const bootstrap::launch_info& li, std::chrono::milliseconds timeout, logger log, host_options opt, std::unique_ptr<link_kit> kit,
            std::unique_ptr<bootstrap::store_server> server = {}, const bootstrap::auth::job_key* key = nullptr, rejoin* rj = nullptr);
  host_mesh(const host_mesh&) = delete;
  host_mesh& operator=(const host_mesh&) = delete;
  ~host_mesh();

  int rank() const noexcept { return rank_; }                  ///< this rank
  int size() const noexcept { return size_; }                  ///< world size
  /// Transport name for logs: "tcp", "shm" (every peer on this host) or "shm+tcp".
  std::string_view name() const noexcept { return name_; }
  /// What the links between ranks of one host cost, the same on every rank of the job: the
  /// shared-memory link's model when the job runs on one host and every pair uses shared memory,
  /// or spans hosts with shared memory on; the TCP link's otherwise (transport/links/).
  const link_costs& local_costs() const noexcept { return local_costs_; }
  /// Ranks on this host (including this one), from the host identities.
  int local_size() const noexcept { return local_size_; }
  /// Which rank runs on which host (from every rank's host identity).
  const topology& topo() const noexcept { return topo_; }
  /// True when `peer` is reached through shared memory.
  bool is_shm_peer(int peer) const noexcept { return peers_[static_cast<std::size_t>(peer)].data->costs.shared_memory; }
  std::string_view link_name(int peer) const noexcept { return peers_[static_cast<std::size_t>(peer)].data->name; }
  std::string_view link_where(int peer) const noexcept { return peers_[static_cast<std::size_t>(peer)].data->where(); }
  /// Registers `bytes` with every data link that registers memory (link_path.ipp).
  std::vector<std::shared_ptr<const registration_hold>> register_memory(std::span<const std::byte> bytes);
  /// True when this host's shared-memory peers signal with asymmetric fences (transport/shm.hpp).
  bool shm_asymmetric_fences() const noexcept { return bell_owner_ && bell_owner_->light(); }
  /// Sleeps on this rank's doorbell that ran their full length although what they waited for had
  /// arrived: lost wake-ups, which cost a sleep's length each (at most 100 ms). Should stay 0.
  std::uint64_t shm_late_wakeups() const noexcept { return waiter_.late_wakeups(); }
  /// Bytes this rank has read so far from shared-memory peer `peer`'s ring (0 for other peers).
  std::uint64_t shm_read_position(int peer) const noexcept {
    const shm_link* l = peer >= 0 && peer < size_ && peer != rank_ ? peers_[static_cast<std::size_t>(peer)].data->as<shm_link>() : nullptr;
    return l ? l->read_position() : 0;
  }
  bootstrap::store_client& store() { return *store_; }         ///< the job's rendezvous store
  void measure_links(deadline dl);  ///< times the links between hosts (setup.ipp); collective
  /// The endpoint over the ranks still alive, after a failure (shrink.ipp); collective over them.
  /// `group`: the ranks of the communicator shrunk, in its order (empty: the job's world);
  /// `comm`: its identity (fingerprint::comm).
  std::shared_ptr<host_mesh> shrink(std::chrono::milliseconds timeout, const shrink_terms& terms, shrink_report& report,
                                    const std::vector<int>& group = {}, std::uint64_t comm = 0);
  void abort(const std::string& why) noexcept { rare_->abort(*this, why); }  ///< see transport::tcp::abort (failure.ipp)
  /// What this rank knows of failures, without blocking, from any thread (failure.ipp).
  health_report health() const noexcept { return fs_.health(rank_); }

  /// Payload bytes handed to post_send so far (frame headers not counted): what this rank sent,
  /// counted, for reports such as the gradient layer's bytes on the wire (`counting_transport`).
  std::uint64_t payload_bytes_posted() const noexcept { return posted_bytes_; }

  // The data path (data_path.ipp); see transport_policy in core/concepts.hpp. Peers are ranks
  // of the job; `id.fp.comm` names the communicator (0: the world). `staging`: the calling
  // communicator's staging buffer of opt().staging_bytes (null: the endpoint's own, the world's).
  void post_send(int peer, message_id id, const std::byte* src, std::size_t n);
  void recv(int peer, message_id id, std::byte* dst, std::size_t n, deadline dl);
  void recv_stream(int peer, message_id id, std::size_t n, std::size_t align,
                   detail::function_ref<void(std::span<const std::byte>)> consume, deadline dl, std::byte* staging = nullptr);
  /// A candidate of a receive from any source: a peer and the message wanted from it.
  struct probe_target {
    int peer;
    message_id id;
  };
  /// The index in `t` of a candidate whose next message is the one wanted from it, once there is one.
  std::size_t probe_any(std::span<const probe_target> t, deadline dl);
  /// Blocks until no queued send of communicator `comm` needs its source bytes any more.
  void flush_sends(deadline dl, std::uint64_t comm = 0);
  void progress_sends();

  /// From now on several communicators share this endpoint (`transport::tcp::split`), possibly
  /// from several threads: every call then takes the endpoint's lock (shared_mode.hpp).
  void share() noexcept {
    waiter_.open_wake();  // if it cannot, polls fall back to their 10 ms cap
    shared_.share();
  }
  /// Drops the frames set aside for communicator `comm` (it was destroyed).
  void forget_comm(std::uint64_t comm);
  /// The settings in force.
  const host_options& options() const noexcept { return opt_; }

  /// Called when an operation has ended: a stall record it published is withdrawn at once, so
  /// that a rank busy outside gsync afterwards is not reported as stuck in it.
  void op_finished() noexcept {
    try {
      call_lock g(shared_);
      if (stall_.withdraw()) rare_->erase_stall_record(*this);
    } catch (...) {
    }
  }

 private:
  using peer_conn = mesh_peer;
  // Shared mode (shared_mode.hpp): every call holds the endpoint's lock; a frame of another
  // communicator read off a peer's stream is set aside for its owner (data_path.ipp).
  using call_lock = shared_mode::lock;
  template <class F>  // out of line: the data path's calls keep only the test of shared mode
  [[gnu::noinline]] bool from_inbox(int peer, message_id id, std::size_t n, deadline dl, shared_mode::read_claim& claim, F&& deliver);
  void set_aside(int peer, link_port& l, const frame_header& h, const std::byte* got_bytes, std::size_t got, deadline dl, message_id id);
  static constexpr int listener_slot = -2;  // waiter::poll_set::idx of the listener (-1: the wake-up eventfd)
  static constexpr int admit_slot = -3;     // waiter::poll_set::idx of a connection being admitted

  using hello = records::hello;  // the data connection's (records.hpp)

  // Set-up (setup.ipp; its steps: setup_steps.ipp).
  void join_store(const bootstrap::launch_info& li, deadline dl, rejoin* rj);
  void start_heartbeat(const asio::ip::address& me);
  void exchange_records(const bootstrap::launch_info& li, deadline dl, rejoin* rj);
  void connect_peers(deadline dl);
  void settle_settings();
  void finish(deadline dl, rejoin* rj);
  [[noreturn]] void failed_setup(const error& raised, rejoin* rj);
  void open_recovery_listener(const asio::ip::address& addr);
  std::uint16_t recovery_port() const;
  std::string lost_rank();
  void tune(detail::net::tcp_socket& s);
  // The data path's rare calls, through pointers only the constructor references (rare_calls.hpp):
  // each forwarder below calls its `do_` function through them.
  using rare_calls = mesh_rare_calls;
  static const rare_calls rare;  // rare_calls.ipp
  const rare_calls* rare_ = &rare;
  void do_abort(const std::string& why) noexcept;
  void do_stall_report(int in_peer, message_id id, deadline dl, std::chrono::steady_clock::time_point now);

  // Connections (connect.ipp).
  void connect_at_start(deadline dl);
  void dial(int peer, deadline dl) { rare_->dial(*this, peer, dl); }
  void do_dial(int peer, deadline dl);
  start_connector::hooks connector_hooks(deadline dl);
  records::hello my_hello() const noexcept;
  void accept_ready(deadline dl) { rare_->accept_ready(*this, dl); }
  void do_accept_ready(deadline dl);
  void admit_some() { rare_->admit_some(*this); }
  void do_admit_some();
  void watch_dialers(waiter::poll_set& ps, int in_peer);
  void serve_dialers(const waiter::poll_set* ps, deadline dl);
  bool good_hello(const hello& h) const;
  void ensure_connected(int peer, deadline dl, message_id id);
  void check_lost_while_unconnected() { rare_->check_lost_while_unconnected(*this); }
  void do_check_lost_while_unconnected();
  // True while a peer not connected yet may still dial this rank: waits watch the listener.
  bool may_be_dialed() const noexcept { return listener_.may_be_dialed(size_); }
  // True when `peer`'s data goes over a TCP link not connected yet (connect.ipp).
  bool unconnected(int peer) const noexcept {
    const auto& c = peers_[static_cast<std::size_t>(peer)];
    return c.on_ctl && !c.tcp().connected();
  }
  void share_store(bootstrap::launch_info& li);
  void exchange_hosts(const bootstrap::launch_info& li);
  std::string missing_ranks(const std::vector<std::string>& keys, std::vector<int>* missing = nullptr);
  void connect_links(deadline dl);
  static void check_options(const host_options& o);

  // Moving frames over a peer's data link, waiting where it has nothing yet (link_path.ipp).
  link_port& data_link(int peer) noexcept { return *peers_[static_cast<std::size_t>(peer)].data; }
  bool pump_link(int peer, link_port& l);
  // What a port's receive loops call back (link_port.hpp): the waits and failures of one read.
  struct port_waiter final : link_waiter {
    host_mesh& m;
    int peer;
    deadline dl;
    message_id id;
    port_waiter(host_mesh& m_, int peer_, deadline dl_, message_id id_) : m(m_), peer(peer_), dl(dl_), id(id_) {}
    void wait(std::size_t expect) override { m.wait_progress(peer, dl, id, expect); }
    [[noreturn]] void lost(int err, const char* why) override { m.lost_while_receiving(peer, id, err, why); }
    void aside(link_port& l, const frame_header& h, const std::byte* have, std::size_t got) override { m.set_aside(peer, l, h, have, got, dl, id); }
  };
  bool pump_peer(int peer);
  void lost_unless_taken(int peer, message_id id);  // progress.ipp
  void pump_descriptors();
  void take_link_events(int peer);
  bool pump_doorbells();
  bool bell_ready(int peer);
  bool bell_progress(int in_peer);
  int data_fd(int peer);
  std::uint32_t bell_failed(int peer);
  std::size_t take_header(int peer, link_port& l, frame_header& h, std::byte* dst, std::size_t n, deadline dl, message_id id);
  void take_payload(int peer, link_port& l, std::byte* dst, std::size_t n, std::size_t align,
                    detail::function_ref<void(std::span<const std::byte>)>* consume, deadline dl, message_id id);
  std::size_t take_some(int peer, link_port& l, std::byte* dst, std::size_t n, deadline dl, message_id id);
  frame_header recv_staged(int peer, link_port& l, message_id id, std::size_t n, std::size_t align,
                           detail::function_ref<void(std::span<const std::byte>)>& consume, deadline dl, std::byte* stage);
  void verify_checksum(int peer, link_port& l, const frame_header& data, std::uint32_t crc, deadline dl, message_id id);
  [[noreturn]] void lost_while_receiving(int peer, message_id id, int err, const char* why = nullptr);
  // The endpoint that holds this rank's doorbell (where waits on doorbell links sleep), else null.
  doorbell_owner* bell_owner() const noexcept { return bell_owner_; }

  // Receiving from any source (any_source.ipp).
  bool next_is(const probe_target& x, deadline dl);
  void any_wait(std::span<const probe_target> t, deadline dl);

  // Waiting (progress.ipp).
  void wait_progress(int in_peer, deadline dl, message_id id, std::size_t expect = SIZE_MAX);
  void checkpoint(int in_peer, message_id id, deadline dl);
  bool watch_links(waiter::poll_set& ps, int in_peer);
  void watch_closes(waiter::poll_set& ps, int in_peer);
  void bell_block(int in_peer, deadline dl, message_id id, int max_sleep_ms = 100, bool sockets = false);
  void watch_idle_sockets(message_id id);
  // A peer whose TCP connection is watched for a close while nothing is expected from it: its
  // data link is waited for by descriptor (doorbell links have their own liveness check), the
  // connection is open and not yet seen closed, nothing is queued for it.
  // True when `p`'s data goes over a descriptor link of its own (verbs), not its TCP connection:
  // that connection then says, by closing, that the peer is gone.
  bool separate_control(int p) noexcept {
    auto& c = peers_[p];
    return !c.by_doorbell() && c.data && c.tcp().connected() && data_fd(p) != c.tcp().fd();
  }
  bool watchable(int p) noexcept {
    auto& c = peers_[p];
    return !c.by_doorbell() && c.tcp().connected() && !c.tcp().seen_closed() && c.q().empty();
  }

  // Diagnostics (diagnostics.ipp).
  [[noreturn]] void timed_out(int in_peer, message_id id) {
    rare_->timed_out(*this, in_peer, id);
    __builtin_unreachable();
  }
  [[noreturn]] void do_timed_out(int in_peer, message_id id);
  void cross_check(int in_peer, message_id id, std::chrono::steady_clock::time_point now);

  // Shrinking to the survivors (shrink.ipp).
  // (shrink_agreement, shrink_round: transport/mesh/shrink_state.hpp)
  void close_agreement(std::uint64_t comm, bool done) noexcept;
  shrink_agreement agree_survivors(const shrink_round& sr, std::set<int> dead, deadline dl);
  shrink_agreement coordinate_shrink(const shrink_round& sr, std::set<int> dead, deadline dl);
  [[noreturn]] void refuse_minority(const shrink_round& sr, const std::set<int>& reached, const std::set<int>& dead, int need, std::int64_t seen);
  bootstrap::store_server& recovery_store();
  std::chrono::milliseconds liveness() const noexcept { return std::chrono::milliseconds(opt_.liveness_ms > 0 ? opt_.liveness_ms : 10000); }
  // The store's bounds, with this job's liveness for its connections.
  bootstrap::store_limits store_limits() const {
    bootstrap::store_limits l;
    l.liveness = std::chrono::milliseconds(opt_.liveness_ms);
    return l;
  }

  // Failure protocol (failure.ipp).
  void on_heartbeat(const heartbeat::news& n) noexcept;
  [[noreturn]] void heartbeat_lost();
  [[noreturn]] void failed_meanwhile();
  void wake_waits() noexcept;
  // The deadline of a store request on a failure path (a peer's failure record, this rank's):
  // a tenth of the liveness time, within 250 ms and 1 s. Rank 0, which serves the store, may be the rank
  // that stopped, before the heartbeat has said so: such a request then only waits.
  deadline failure_lookup_deadline() const {
    return std::chrono::steady_clock::now() + std::clamp(liveness() / 10, std::chrono::milliseconds(250), std::chrono::milliseconds(1000));
  }
  void bad_frame(const frame_header& h, message_id id, std::size_t n, int peer, const std::byte* have, std::size_t got) {
    rare_->bad_frame(*this, h, id, n, peer, have, got);
  }
  void do_bad_frame(const frame_header& h, message_id id, std::size_t n, int peer, const std::byte* have, std::size_t got);
  [[noreturn]] void on_notice(int peer, const frame_header& h, const std::byte* have, std::size_t got, message_id id) {
    rare_->on_notice(*this, peer, h, have, got, id);
    __builtin_unreachable();
  }
  [[noreturn]] void do_on_notice(int peer, const frame_header& h, const std::byte* have, std::size_t got, message_id id);
  void send_notices(errc kind, const std::string& msg, int lost);
  void check_bell_peers(int in_peer, message_id id);
  void closed_elsewhere(int peer, message_id id) { rare_->closed_elsewhere(*this, peer, id); }
  void do_closed_elsewhere(int peer, message_id id);
  [[noreturn]] void lost(int peer, const std::string& msg, int culprit = -1) {
    rare_->lost(*this, peer, msg, culprit);
    __builtin_unreachable();
  }
  [[noreturn]] void do_lost(int peer, const std::string& msg, int culprit);
  [[noreturn]] void fail(errc kind, const std::string& msg, int lost = -1) {
    rare_->fail(*this, kind, msg, lost);
    __builtin_unreachable();
  }
  [[noreturn]] void do_fail(errc kind, const std::string& msg_in, int lost);
  [[noreturn]] void bad_peer(int peer) const;
  [[noreturn]] void unusable();


  // Checks a received header; `have` holds the `got` bytes that followed it (TCP), so that a
  // failure notice can be read out.
  // The expected frame passes inline; anything else goes to the out-of-line report.
  void check(const frame_header& h, message_id id, std::size_t n, int peer, const std::byte* have, std::size_t got) {
    if (h.magic == frame_magic && h.tag == id.tag && h.seq == id.seq && h.bytes == n && h.fp == id.fp) [[likely]] return;
    bad_frame(h, id, n, peer, have, got);
  }
  // The checks at the entry of every transport call: inline tests, out-of-line errors (the hot
  // path of a small message stays a few instructions).
  void check_peer(int peer) const {
    if (peer < 0 || peer >= size_ || peer == rank_) [[unlikely]] bad_peer(peer);
  }
  void check_usable() {
    if (fs_.any()) [[unlikely]] unusable();
  }
  static std::string failed_key(int r) { return "gsync/failed/" + std::to_string(r); }
  static std::string failure_record(errc kind, const std::string& msg) { return records::failure_record(kind, msg); }

  int rank_, size_;
  logger log_;
  bootstrap::auth::job_key key_;  // launch_info::job_key or GSYNC_JOB_KEY (bootstrap/auth.hpp)
  bool cc_warned_ = false;
  stall_monitor stall_;  // the operation this rank waits in, its stall record and reports (stall_monitor.hpp)
  host_options opt_;
  host_options opt_given_;  // the settings as given (opt_ has the automatic ones resolved), for a shrink
  asio::io_context io_;
  peer_listener listener_{io_};  // the listener for peers' dials, what it has not admitted yet, the count connected
  std::unique_ptr<bootstrap::store_server> server_;
  std::unique_ptr<bootstrap::store_client> store_;
  std::uint64_t nonce_ = 0;
  std::vector<peer_conn> peers_;
  peer_records records_;  // every rank's set-up record (peer_records.hpp; taken in setup_steps.ipp)
  std::chrono::milliseconds dial_timeout_{0};     // how long a dial made by post_send may block
  std::chrono::steady_clock::time_point lost_check_next_{};  // check_lost_while_unconnected
  std::size_t queued_ = 0;       // messages queued, all peers
  std::uint64_t posted_bytes_ = 0;  // payload bytes handed to post_send (payload_bytes_posted)
  std::size_t bell_queued_ = 0;  // of which to peers whose data link is waited for by doorbell
  detail::aligned_bytes staging_;
  std::string name_ = "tcp";
  link_costs local_costs_ = link_traits<tcp_link>::costs;
  int local_size_ = 1;
  int machine_ranks_ = 1;     // ranks on this kernel (same bootstrap::kernel_id()), whatever their host identity
  bool cores_shared_ = false; // this machine runs more ranks than it has cores (exchange_hosts)
  std::uint64_t cur_op_ = 0;  // the collective this rank is in (or was last in), for failure records
  topology topo_;
  std::unique_ptr<link_kit> kit_;        // the mesh's link list: the types' endpoints (connect_links)
  doorbell_owner* bell_owner_ = nullptr;  // the endpoint holding this rank's doorbell, if any (connect_links)
  std::vector<int> bell_peers_;          // peers whose data link is waited for by doorbell
  static constexpr auto store_linger = std::chrono::seconds(10);  // longest wait of rank 0 for the others at exit
  static constexpr std::uint32_t shm_left = 0x80000000u;  // `failed` word: the rank left normally
  failure_state fs_;          // what this rank knows of failures (failure_state.hpp)
  std::string notice_text_;  // the failure notice's text (send_notices), alive while rings hold it
  // Liveness (transport/mesh/heartbeat.hpp): the heartbeat's thread reports through
  // on_heartbeat; a silent peer raises the alarm in fs_, which every wait and call checks.
  std::unique_ptr<heartbeat> hb_;
  shrink_state rec_;         // the recovery listener (setup.ipp) and what shrinks keep (shrink.ipp)
  std::string master_addr_;  // the store's address, for abort()'s own connection
  std::uint16_t master_port_ = 0;
  waiter waiter_;       // how this rank's threads wait on descriptors (waiter.hpp)
  shared_mode shared_;  // the endpoint's lock and per peer its reader and inbox, once shared (shared_mode.hpp)
};

}  // namespace gsync::transport
