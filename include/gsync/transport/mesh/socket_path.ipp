#pragma once
/// \file
/// Socket data path of the mesh: writing queued frames to TCP peers and reading frames from them,
/// waiting through the progress loop where a socket has nothing yet. The socket operations
/// themselves are the TCP link's (transport/links/tcp_link.hpp).
/// Part of transport::host_mesh (transport/mesh/host_mesh.hpp); included by transport/mesh/impl.ipp.

#include "gsync/transport/mesh/host_mesh.hpp"

namespace gsync::transport {

// pump() for every TCP peer with queued sends.
inline void host_mesh::pump_sockets() {
  for (int p = 0; p < size_; ++p)
    if (!peers_[p].via_shm && !peers_[p].tcp.q.empty()) pump(p);
}

// Writes as much of the peer's queue as the kernel takes now (tcp_link::pump).
inline void host_mesh::pump(int peer) {
  std::size_t done = 0;
  const int err = peers_[peer].tcp.pump(done);
  queued_ -= done;
  if (err)
    lost(peer, "rank " + std::to_string(rank_) + ": connection to rank " + std::to_string(peer) + " lost while sending (" +
                   detail::errno_text(err) + "): the peer exited or crashed");
}

// Reads the next frame header and, in the same system call when available, up to `n` payload
// bytes into dst (never more than the expected message, so a well-formed stream is never
// over-read; a malformed one fails the header check and poisons the transport anyway).
// Returns the payload bytes read.
inline std::size_t host_mesh::read_header(int peer, frame_header& h, std::byte* dst, std::size_t n, deadline dl, message_id id) {
  std::size_t got = 0;
  auto& l = peers_[peer].tcp;
  while (got < sizeof h) {
    const ssize_t r = l.read_header_some(h, got, dst, n);
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

[[noreturn]] inline void host_mesh::lost_while_receiving(int peer, message_id id, int err) {
  if (err == 0)
    lost(peer, "rank " + std::to_string(rank_) + ": rank " + std::to_string(peer) +
                   " closed its connection (it exited, crashed or failed) during op #" + std::to_string(id.seq), peer);
  lost(peer, "rank " + std::to_string(rank_) + ": connection to rank " + std::to_string(peer) + " lost while receiving (" +
                 detail::errno_text(err) + ")");
}

// Reads up to n bytes from peer, waiting (and progressing sends) until at least one arrives.
inline std::size_t host_mesh::read_some(int peer, std::byte* dst, std::size_t n, deadline dl, message_id id) {
  if (n == 0) return 0;
  for (;;) {
    const ssize_t r = peers_[peer].tcp.read_some(dst, n);
    if (r > 0) return static_cast<std::size_t>(r);
    if (r == 0) lost_while_receiving(peer, id, 0);
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) lost_while_receiving(peer, id, errno);
    wait_progress(peer, dl, id, n);
  }
}

inline void host_mesh::read_exact(int peer, std::byte* dst, std::size_t n, deadline dl, message_id id) {
  while (n > 0) {
    std::size_t got = read_some(peer, dst, n, dl, id);
    dst += got;
    n -= got;
  }
}

}  // namespace gsync::transport
