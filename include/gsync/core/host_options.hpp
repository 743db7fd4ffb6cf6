#pragma once
/// \file
/// `transport::host_options`: the tunables of the host transport (`transport::tcp`: the mesh, its
/// sockets and its shared memory; each link type takes its own part, `link_traits<L>::options`).
/// Where a default was fitted, the measurements are in benchmarks/results/spin_yield.md.
///
/// Precedence: options passed explicitly (`config::transport`, or the transport's constructor)
/// are used as given; the GSYNC_* variables named below fill them only where the program asks for
/// the environment (`config::from_env()`, `communicator::from_env()`), all read in core/config.hpp.

#include <cstddef>
#include <string>

namespace gsync::transport {

/// Settings of the InfiniBand / RoCE verbs link (transport/links/verbs_link.hpp), used between
/// ranks on different hosts whose ports can reach each other.
struct ib_options {
  bool enabled = true;            ///< GSYNC_IB_DISABLE=1 turns verbs off (TCP between hosts)
  std::string hca;                ///< devices and ports to use, NCCL's grammar (GSYNC_IB_HCA; empty: all)
  int gid_index = -1;             ///< source GID index (GSYNC_IB_GID_INDEX; -1: a RoCE v2 IPv4 GID, else the first)
  int timeout = 18;               ///< ACK timeout exponent: 4.096 us * 2^timeout per try (GSYNC_IB_TIMEOUT, 1..31)
  int retry_cnt = 7;              ///< retries of an unacknowledged write (GSYNC_IB_RETRY_CNT, 0..7)
  std::size_t ring_bytes = 1 << 20;  ///< bytes of the ring each side keeps per peer (GSYNC_IB_RING_BYTES; 64 KiB..1 GiB, a multiple of 64)
  std::string library = "libibverbs.so.1";  ///< the library loaded at run time (GSYNC_IBVERBS_LIB)
  /// Use verbs between ranks of one host too (GSYNC_IB_INTRA=1; shared memory, when on, still
  /// comes first in the default mesh): for testing one machine's adapter.
  bool intra = false;
  /// A ring size the link accepts.
  static constexpr bool valid_ring_bytes(std::size_t b) noexcept { return b >= (64 << 10) && b <= (std::size_t{1} << 30) && b % 64 == 0; }
};

/// Tunables of the host transport (shared memory and TCP).
struct host_options {
  int socket_buffer_bytes = 4 << 20;          ///< SO_SNDBUF / SO_RCVBUF of data sockets (GSYNC_SOCKET_BUFFER)
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
  /// busy spin and before it sleeps on its futex (GSYNC_YIELD_US): a sleep costs a scheduler
  /// wake-up. -1: automatic, 2000 us, but 0 when this machine runs more ranks than cores and this
  /// rank has peers both through shared memory and over TCP.
  int yield_us = -1;
  /// Microseconds a wait for a small message from a TCP peer (at most `tcp_yield_bytes` still to
  /// come) keeps polling the sockets, yielding between polls, before it sleeps in poll(2)
  /// (GSYNC_TCP_YIELD_US). -1: automatic, 50 us when this machine runs more ranks than cores and
  /// every peer of this rank is over TCP, else 0.
  int tcp_yield_us = -1;
  /// Largest message (payload bytes still to come) whose wait yields rather than sleeps.
  std::size_t tcp_yield_bytes = 64 << 10;
  /// Use shared memory between ranks of one host (GSYNC_SHM_DISABLE=1 turns it off).
  bool shm = true;
  /// Let shared-memory peers signal without a full fence per message, the sleeping side issuing a
  /// membarrier(2) instead (transport/shm.hpp; used only when every rank of the host can, and not
  /// where ranks share cores). GSYNC_SHM_MEMBARRIER=0 turns it off.
  bool shm_light = true;
  /// Data bytes of each shared-memory ring (GSYNC_SHM_BYTES; a multiple of 64, >= 4 KiB).
  std::size_t shm_ring_bytes = 1 << 20;
  /// A collective's message of at least this many bytes crosses shared memory in one copy, read
  /// by the receiver from the sender's memory (process_vm_readv, transport/shm_single_copy.hpp),
  /// where the kernel allows it and the machine runs no more ranks than cores; smaller ones, and
  /// pairs it refuses, go through the ring (GSYNC_SHM_SINGLE_COPY: a size, 0 turns it off).
  std::size_t shm_single_copy_bytes = 1 << 20;
  /// Time the links between hosts at start-up when the ranks span several hosts
  /// (transport/link_probe.hpp; GSYNC_NET_PROBE=0 turns it off). Every rank must agree.
  bool net_probe = true;
  /// Connect a pair of ranks over TCP when a schedule first needs it, not all pairs at start-up
  /// (GSYNC_LAZY_CONNECT=0 connects every pair at start-up). A ring or recursive-doubling job then
  /// holds O(log N) connections per rank instead of N - 1. Same-host peers that talk through shared
  /// memory are connected at start-up either way: their connection is the liveness signal.
  bool lazy_connect = true;

  /// A shared-memory ring size the transport accepts: 4 KiB..1 GiB, a multiple of 64.
  static constexpr bool valid_ring_bytes(std::size_t b) noexcept { return b >= 4096 && b <= (std::size_t{1} << 30) && b % 64 == 0; }
  /// A socket buffer size the transport accepts: 0 (the kernel's autotuning) .. 1 GiB.
  static constexpr bool valid_socket_buffer(long long b) noexcept { return b >= 0 && b <= (1LL << 30); }
  /// Link rate between hosts in Gbit/s per direction, as the user knows it (GSYNC_NET_GBPS); wins
  /// over the probe's measure. 0: measured, else assumed (core/links.hpp).
  double net_gbps = 0;
  /// Cost of one message between hosts in microseconds (GSYNC_NET_LATENCY_US); 0: measured or assumed.
  double net_latency_us = 0;
  /// Milliseconds within which a rank that stopped answering (stopped, hung, its host gone, a
  /// partition) is reported lost on every rank, in an operation or between them: the heartbeat
  /// (transport/mesh/heartbeat.hpp), TCP keepalive on idle connections and TCP_USER_TIMEOUT on
  /// unacknowledged data (GSYNC_LIVENESS_S, default 10 s; 0: no heartbeat, the kernel's settings).
  int liveness_ms = 10000;
  /// A CRC32C over every message's payload, checked by the receiver (GSYNC_CHECKSUM=1): a payload
  /// altered between two ranks fails with `errc::corrupted` naming the link. Costs a pass over
  /// the data on each side (benchmarks/results/reliability.md). Must be alike on every rank.
  bool checksum = false;
  /// Network interface whose address this rank listens on and advertises (GSYNC_SOCKET_IFNAME);
  /// empty: the address of the route to the store (bootstrap/interface.hpp).
  std::string socket_ifname;
  /// The verbs link's settings (GSYNC_IB_*).
  ib_options ib;
};

/// The name of `host_options` before issue 52, kept for programs that use it.
using tcp_options = host_options;

}  // namespace gsync::transport
