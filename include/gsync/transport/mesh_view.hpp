#pragma once
/// \file
/// `transport::mesh<Ls...>`: one rank's endpoint of a mesh of per-peer links, their types tried in
/// the order of `Ls` for each peer (transport/links/link_list.hpp); gsync's own transport,
/// `transport::tcp` (transport/tcp.hpp), is `mesh<shm_link, tcp_link>`. Everything but the list
/// lives in the non-templated `mesh_view`, compiled once; how the mesh works, from set-up to
/// failures: transport/mesh/host_mesh.hpp.
///
/// This header is light on purpose: it declares the transport's calls without Asio, OpenSSL or the
/// store, so that code calling collectives parses little. Their definitions (transport/mesh/*.ipp)
/// come with transport/tcp.hpp in the header-only mode, and are compiled once elsewhere with
/// GSYNC_SEPARATE_COMPILATION (detail/build_mode.hpp).

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gsync/bootstrap/launch_env.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/health.hpp"
#include "gsync/core/log.hpp"
#include "gsync/core/memory_registration.hpp"
#include "gsync/core/topology.hpp"
#include "gsync/detail/build_mode.hpp"
#include "gsync/detail/function_ref.hpp"
#include "gsync/core/host_options.hpp"

namespace gsync::bootstrap {
class store_client;
}  // namespace gsync::bootstrap

namespace gsync::transport {

class host_mesh;
class link_kit;

/// The link list of `mesh<Ls...>` at run time (defined in transport/links/link_kit.hpp, which a
/// program that names its own link types includes, through gsync/transport/mesh.hpp).
template <class... Ls>
std::unique_ptr<link_kit> make_link_kit();

/// One rank's endpoint of a mesh, whatever its link list: the calls of `transport_policy`,
/// `send_progress_transport`, `counting_transport` and the rest, compiled once. Users name
/// `transport::mesh<Ls...>` (below) or its instance `transport::tcp` (transport/tcp.hpp).
///
/// An endpoint is a view of the rank's connections (transport/mesh/host_mesh.hpp): the one made
/// by joining the job spans every rank of it; `split` makes others over a subset of the ranks
/// that share the same connections (numbered 0..k-1 in the order given), each stamping its own
/// identity on its frames, so that several may be used at once, from different threads.
class mesh_view {
 public:
  mesh_view(const mesh_view&) = delete;
  mesh_view& operator=(const mesh_view&) = delete;
  /// Leaves the connections to the other views sharing them; the last one closes them (rank 0,
  /// which serves the store, first waits, bounded, until the others have left).
  GSYNC_DECL ~mesh_view();

  /// The view's identity on the wire (0: the job's world).
  std::uint64_t comm_id() const noexcept { return comm_; }
  /// Rank of this view's rank `r` in the job (the world view's numbering, used in messages).
  int job_rank(int r) const noexcept { return world_.empty() ? r : world_[static_cast<std::size_t>(r)]; }

  int rank() const noexcept { return rank_; }  ///< this rank
  int size() const noexcept { return size_; }  ///< ranks of this view
  /// Transport name for logs: the media in use, shared memory first: "tcp", "shm" (every peer on
  /// this host), "shm+tcp", "shm+verbs+tcp", ...
  std::string_view name() const noexcept { return name_; }
  /// What the links between ranks of one host cost (`costed_transport`), the same on every rank:
  /// the shared-memory link's model where shared memory carries same-host pairs, the TCP link's
  /// otherwise (transport/mesh/host_mesh.hpp says exactly when).
  const link_costs& local_costs() const noexcept { return *local_; }
  /// Which rank runs on which host (from every rank's host identity), and the measured links.
  const topology& topo() const noexcept { return *topo_; }
  /// Ranks of this view on this host (including this one), from the host identities.
  GSYNC_DECL int local_size() const noexcept;
  /// True when `peer` is reached through shared memory.
  GSYNC_DECL bool is_shm_peer(int peer) const noexcept;
  /// The medium that carries `peer`'s data ("shm", "verbs", "tcp", or an outside link's name;
  /// "" for this rank or a rank out of range).
  GSYNC_DECL std::string_view link_name(int peer) const noexcept;
  /// Where that medium runs, when its link says ("mlx5_0:1": the verbs link's adapter and port;
  /// "" for the others).
  GSYNC_DECL std::string_view link_where(int peer) const noexcept;
  /// Registers `bytes` with every RDMA adapter this rank's links use, for sends from it without a
  /// copy while the handle lives (`registering_transport`; core/memory_registration.hpp). Local to
  /// this rank (not collective); the links are the job's, shared by every view.
  GSYNC_DECL memory_registration register_memory(std::span<const std::byte> bytes);
  /// True when this host's shared-memory peers signal with asymmetric fences (transport/shm.hpp).
  GSYNC_DECL bool shm_asymmetric_fences() const noexcept;
  /// Sleeps on this rank's doorbell that ran their full length although what they waited for had
  /// arrived: lost wake-ups, which cost a sleep's length each (at most 100 ms). Should stay 0.
  GSYNC_DECL std::uint64_t shm_late_wakeups() const noexcept;
  /// Bytes this rank has read so far from shared-memory peer `peer`'s ring (0 for other peers).
  GSYNC_DECL std::uint64_t shm_read_position(int peer) const noexcept;
  /// Times the links between hosts for the automatic choice of algorithms (transport/link_probe.hpp;
  /// `topo().links()`, assumed until then): collective, every rank right after constructing the
  /// transport and before any operation. `communicator::join` (and `from_env`, `from_mpi`) call it;
  /// a program that constructs the transport itself calls it, or runs on assumed links.
  /// Does nothing on one host, with GSYNC_NET_PROBE=0, or with both GSYNC_NET_GBPS and GSYNC_NET_LATENCY_US.
  GSYNC_DECL void measure_links(std::chrono::milliseconds timeout);
  /// The job's rendezvous store (include gsync/bootstrap/store.hpp to use it).
  GSYNC_DECL bootstrap::store_client& store();

  /// Aborts this endpoint; thread-safe, callable while another thread waits in it. Records `why`
  /// in the store for the peers (through a connection of its own, a few seconds at most), then
  /// shuts every connection down and rings the doorbells: the waiting thread wakes and fails with
  /// `errc::aborted`, and so does every later call; peers blocked on this rank fail at once,
  /// reporting the abort. Idempotent. The connections are shared: every view of them (every
  /// communicator split from the same job on this rank) is aborted with it.
  GSYNC_DECL void abort(const std::string& why) noexcept;
  /// What this rank knows of failures, without blocking, from any thread (`health_reporting_transport`):
  /// its own failure, an abort, or a peer the heartbeat (transport/mesh/heartbeat.hpp) found
  /// stopped or gone, also between operations. `lost_rank` is in the job's numbering. Shared by
  /// every view of the connections.
  GSYNC_DECL health_report health() const noexcept;

  /// Payload bytes handed to post_send so far through this view (frame headers not counted): what
  /// this rank sent, counted, for reports such as the gradient layer's bytes on the wire
  /// (`counting_transport`).
  std::uint64_t payload_bytes_posted() const noexcept { return posted_; }

  /// Queues [src, src+n) for `peer` and hands what the link takes now to it.
  GSYNC_DECL void post_send(int peer, message_id id, const std::byte* src, std::size_t n);
  /// Receives the next message from `peer` into dst (its header checked against `id` and `n`).
  GSYNC_DECL void recv(int peer, message_id id, std::byte* dst, std::size_t n, deadline dl);
  /// Receives the next message from `peer`, handing `consume` pieces whose sizes are multiples of
  /// `align` (from the staging buffer, or straight from the shared-memory ring).
  GSYNC_DECL void recv_stream(int peer, message_id id, std::size_t n, std::size_t align,
                              detail::function_ref<void(std::span<const std::byte>)> consume, deadline dl);
  /// Waits until the next message of this view from some peer p with `ids[p].tag != 0` is
  /// ids[p]'s (its tag and number) and returns p, the message left for `recv`
  /// (`any_source_transport`; transport/mesh/any_source.ipp).
  GSYNC_DECL int probe_any(std::span<const message_id> ids, deadline dl);
  /// Blocks until every send queued through this view no longer needs its source bytes.
  GSYNC_DECL void flush_sends(deadline dl);
  /// Hands queued sends to the links as far as they take them now, without waiting.
  GSYNC_DECL void progress_sends();
  /// Called when an operation has ended: a stall record it published is withdrawn at once, so
  /// that a rank busy outside gsync afterwards is not reported as stuck in it.
  GSYNC_DECL void op_finished() noexcept;

 protected:
  /// What makes the rank's link list: `make_link_kit<Ls...>` (transport/links/link_kit.hpp).
  using kit_maker = std::unique_ptr<link_kit> (*)();
  /// Joins the job described by `li` (see `mesh`), its links from `make`, the settings from the
  /// environment (core/config.hpp) or `opt`.
  GSYNC_DECL mesh_view(const bootstrap::launch_info& li, std::chrono::milliseconds timeout, logger log, kit_maker make);
  GSYNC_DECL mesh_view(const bootstrap::launch_info& li, std::chrono::milliseconds timeout, logger log, host_options opt, kit_maker make);
  mesh_view() = default;
  /// Makes `v` (default-constructed) the view of `split` / `shrink` (see `mesh`).
  GSYNC_DECL void split_into(mesh_view& v, const std::vector<int>& members, std::uint64_t comm) const;
  GSYNC_DECL void shrink_into(mesh_view& v, std::chrono::milliseconds timeout, const shrink_terms& terms, shrink_report& report) const;

 private:
  // This view's rank `peer` in the job, checked.
  int to_job(int peer) const {
    if (world_.empty()) return peer;
    if (peer < 0 || peer >= size_ || peer == rank_) [[unlikely]] bad_peer(peer);
    return world_[static_cast<std::size_t>(peer)];
  }
  [[noreturn]] GSYNC_DECL void bad_peer(int peer) const;

  std::shared_ptr<host_mesh> m_;
  std::vector<int> world_;  // this view's ranks in the job (empty: the world view itself)
  std::uint64_t comm_ = 0;  // identity on the wire (0: the world)
  int rank_ = 0;
  int size_ = 0;
  std::string_view name_;
  const topology* topo_ = nullptr;
  const link_costs* local_ = nullptr;
  std::shared_ptr<const topology> own_topo_;  // a split view's placement
  std::shared_ptr<std::byte[]> staging_;     // a split view's staging buffer (the world's is the mesh's)
  std::uint64_t posted_ = 0;
};

/// A mesh over the link types `Ls`, tried in this order for each peer: the first whose endpoint
/// connects the pair carries its data (transport/links/link_setup.hpp); `tcp_link` connects every
/// pair, so it ends a list. A program adds a medium by writing a link type (the `link` concept,
/// core/concepts.hpp, with its `link_traits` and endpoint) and naming it here:
/// `communicator<transport::mesh<my_link, transport::tcp_link>>` (include gsync/transport/mesh.hpp).
/// Satisfies `transport_policy`, `splittable_transport`, `shrinkable_transport` and the rest.
template <class... Ls>
class mesh : public mesh_view {
 public:
  /// Joins the job described by `li`: starts the store on rank 0, connects the full mesh. Every
  /// wait of the set-up ends at now + `timeout`. The transport's settings come from the GSYNC_*
  /// variables (core/config.hpp).
  mesh(const bootstrap::launch_info& li, std::chrono::milliseconds timeout, logger log)
      : mesh_view(li, timeout, std::move(log), &make_link_kit<Ls...>) {}
  /// The same with the settings `opt`, used as given: the environment is not read.
  mesh(const bootstrap::launch_info& li, std::chrono::milliseconds timeout, logger log, host_options opt)
      : mesh_view(li, timeout, std::move(log), std::move(opt), &make_link_kit<Ls...>) {}

  /// A view of the same connections over `members` (ranks of this view, this rank among them,
  /// no repeats): rank i of the new view is `members[i]` here. `comm` is the new view's identity
  /// on the wire (not 0, the same on every member, different from every other view's of the job).
  std::unique_ptr<mesh> split(const std::vector<int>& members, std::uint64_t comm) const {
    std::unique_ptr<mesh> v(new mesh());
    split_into(*v, members, comm);
    return v;
  }
  /// After a failure (`errc::peer_lost`, `errc::aborted`, a timeout), a new endpoint over the ranks
  /// still alive, numbered in their old order: collective over the survivors, each of which calls
  /// it; they agree on who is alive (transport/mesh/shrink.ipp), also when rank 0 is the one lost.
  /// Every wait ends by `timeout`. A split view shrinks to its own survivors: the result is an
  /// endpoint of its own over them, no longer a view of the job's connections. They go on only as
  /// `terms` allow (core/shrink_terms.hpp), else `errc::excluded`; `report` gets what they agreed.
  std::unique_ptr<mesh> shrink(std::chrono::milliseconds timeout, const shrink_terms& terms, shrink_report& report) const {
    std::unique_ptr<mesh> v(new mesh());
    shrink_into(*v, timeout, terms, report);
    return v;
  }

 private:
  mesh() = default;
};

}  // namespace gsync::transport

#if !defined(GSYNC_SEPARATE_COMPILATION)
#include "gsync/transport/mesh/impl.ipp"
#endif
